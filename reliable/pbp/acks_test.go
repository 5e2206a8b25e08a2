package pbp

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// The acknowledgement matrix: once a group is quiet, every member knows
// that every member holds every sender's whole stream (each row heard from
// the others' Acks and Heartbeats), with loss too; before, a member knew
// only who held its own stream. Unknown ids are refused.
func TestAckMatrix(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   testnet.Impairment
	}{{"lossless", testnet.Impairment{}}, {"loss-10", testnet.Impairment{Loss: 0.1}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := scenario{seed: 5, members: 4, k: 150, window: 16, crash: -1, leaver: -1, link: simtest.Link{MTU: 1500, In: tc.in}}
			r := runScenario(t, s)
			if err := r.verdict(); err != nil {
				t.Fatal(err)
			}
			r.Net.RunFor(2 * time.Second) // quiet: heartbeats carry the final vectors
			for _, m := range r.Members {
				for _, snd := range r.Members {
					end := snd.Core.nextSeq
					for _, o := range r.Members {
						if h, ok := m.Core.Holds(o.ID, snd.ID); !ok || h != end {
							t.Errorf("member %d: Holds(%d, %d) = %d, %v; want %d (all of %d's %d frames)", m.ID, o.ID, snd.ID, h, ok, end, snd.ID, end-s.initialSeq)
						}
					}
					if st, ok := m.Core.StableFrom(snd.ID); !ok || st != end {
						t.Errorf("member %d: StableFrom(%d) = %d, %v; want %d", m.ID, snd.ID, st, ok, end)
					}
				}
				if _, ok := m.Core.Holds(999, r.Members[0].ID); ok {
					t.Errorf("member %d: Holds of an unknown member: ok", m.ID)
				}
				if _, ok := m.Core.StableFrom(frame.MemberID(999)); ok {
					t.Errorf("member %d: StableFrom of an unknown sender: ok", m.ID)
				}
			}
		})
	}
}
