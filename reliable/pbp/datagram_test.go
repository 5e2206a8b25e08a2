package pbp

import (
	"testing"

	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// Datagrams in a registered group (the Unreliable level): lossless, every
// member receives every other's datagrams, also those proposed between
// Ready and Advance; with 10 % loss and 5 % duplication each at most once
// (the harness fails a run on a duplicate, a corrupt one or one's own) and
// most of them; the reliable stream is delivered whole either way
// (verdict), and no datagram is acknowledged or repaired.
func TestDatagrams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    testnet.Impairment
		least float64
	}{{"lossless", testnet.Impairment{}, 1}, {"loss-10-dup-5", testnet.Impairment{Loss: 0.1, Duplicate: 0.05}, 0.75}} {
		t.Run(tc.name, func(t *testing.T) {
			s := scenario{seed: 2, members: 4, k: 200, window: 16, crash: -1, leaver: -1, link: simtest.Link{MTU: 1500, In: tc.in}}
			r := runScenario(t, s)
			if err := r.verdict(); err != nil {
				t.Fatal(err)
			}
			for _, m := range r.Members {
				var got, want int
				for j, o := range r.Members {
					if o == m {
						continue
					}
					got += len(m.DgGot[j])
					want += o.DgSent
				}
				st := m.Core.Counters()
				t.Logf("member %d: %d of the others' %d datagrams; sent %d, dropped %d, retransmitted %d", m.ID, got, want, st.DatagramsSent, st.DatagramsDropped, st.Retransmitted)
				if want == 0 || float64(got) < tc.least*float64(want) {
					t.Errorf("member %d got %d of the others' %d datagrams, want at least %.0f %%", m.ID, got, want, 100*tc.least)
				}
				if st.DatagramsSent != uint64(m.DgSent) {
					t.Errorf("member %d: core sent %d datagrams, %d proposed", m.ID, st.DatagramsSent, m.DgSent)
				}
			}
		})
	}
}
