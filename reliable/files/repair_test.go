package files

import (
	"cmp"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// TestRepairsOncePerLoss: a block a receiver lost is repaired about once,
// even where the segment's queue holds the pacer's frames far longer
// than the round trip the sender measured on its idle start (the 1 GB
// netns runs sent 1.0–1.1 M repairs for 733 k blocks). One receiver of
// three loses 20 % of what arrives; the sender's repairs are counted
// against the FileData frames the segment dropped. Before the repairs
// were timed by delivery (repair.go), the slower ports sent 4243
// repairs for 1509 drops, and 11926 for 2986 with 5 ms latency.
func TestRepairsOncePerLoss(t *testing.T) {
	files := shapeFiles(rand.New(rand.NewPCG(1, 4)), 1, 4<<20)
	for _, tc := range []struct {
		name      string
		link      simtest.Link
		latency   time.Duration
		bandwidth int64
		most      float64 // repairs per FileData dropped; 0: 1.1
	}{
		{name: "default segment", link: simtest.Link{MTU: 1500}},
		{name: "5 ms latency", link: simtest.Link{MTU: 1500}, latency: 5 * time.Millisecond},
		// The pacer (100 MB/s) outruns the ports (50 MB/s): the frames
		// queue at the port, up to 40 ms of them for 4 MiB.
		{name: "slower ports", link: simtest.Link{MTU: 1500}, bandwidth: 50_000_000},
		// Four times slower, and far: up to 130 ms queued, 10 ms away.
		{name: "much slower ports, 5 ms latency", link: simtest.Link{MTU: 1500}, bandwidth: 25_000_000, latency: 5 * time.Millisecond},
		// Jitter reorders the frames: a receiver reports a gap after half
		// a round trip, and a block overtaken by more than that is
		// repaired though it arrives (as it was before: 976 repairs
		// for 800 drops); bound loosely.
		{name: "jitter", link: simtest.Link{MTU: 1500, Out: testnet.Impairment{Jitter: 200 * time.Microsecond}}, most: 1.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := []*simFile{{name: files[0].name, data: files[0].data, hash: files[0].hash}}
			sc := &scenario{seed: 1, n: 4, link: tc.link, files: [][]*simFile{fresh}, senders: 1,
				crash: map[int][2]time.Duration{}, late: map[int]time.Duration{}, ghost: -1, refuse: -1, rate: shapeRate,
				inLoss: map[int]float64{3: 0.2}, latency: tc.latency, bandwidth: tc.bandwidth}
			var dropped, queueDrops int
			s, err := runSim(t, sc, func(ev testnet.Event) {
				if ev.Kind != testnet.EventDrop || len(ev.Frame) <= frame.EthernetHeaderLen {
					return
				}
				if v, err := frame.Parse(ev.Frame[frame.EthernetHeaderLen:]); err == nil && v.Type() == frame.FileData {
					dropped++
					if ev.Reason == testnet.DropOverflow {
						queueDrops++
					}
				}
			})
			if err != nil {
				t.Fatalf("%v\n%v", err, sc)
			}
			for _, n := range s.nodes[1:] {
				if len(n.received) != 1 {
					t.Fatalf("member %d received %d files, want 1", n.id, len(n.received))
				}
			}
			st := s.nodes[0].core.Stats().Detail.(Stats)
			t.Logf("%s: %d blocks sent, %d repairs (%d to the group), %d FileData dropped (%d by a full queue); SRTT %v",
				tc.name, st.BlocksSent, st.BlocksRepaired, st.RepairsToGroup, dropped, queueDrops, st.SRTT)
			most := cmp.Or(tc.most, 1.1)
			if float64(st.BlocksRepaired) > most*float64(dropped) {
				t.Errorf("%d repairs for %d FileData frames dropped: more than %v × (repairs answered twice)", st.BlocksRepaired, dropped, most)
			}
		})
	}
}

// A receiver that takes the offer late (it waited for room,
// MaxReceiving, or lost the offer) reports a top from the blocks it
// dropped meanwhile, every one of them missing. Its top's block did not
// arrive: no round trip is measured from when the pass sent it. Such a
// sample, the whole wait, set the receiver's repair timeout to its cap
// (ten times MaxTimer): each repair it lost waited a second to go again,
// and a receiver waiting out a sender's FileEnd interval could give the
// transfer up as silent with its sender sending.
func TestLateTakerRepairTimeout(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Members = members()[:2] })
	data := make([]byte, 40)
	id, err := s.Send(2, Outgoing{Name: "x", Size: 40, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
	if err != nil {
		t.Fatal(err)
	}
	seq := uint32(0)
	report := func(now Time, st frame.FileStatusBody) {
		t.Helper()
		st.ID, st.Incarnation, st.Credit = id, 11, 256
		if err := s.Step(now, macB, macA, encode(t, 2, 22, seq, frame.FlagHashAlg, &st)); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	repairs := func() (n int) {
		_, vs := sent(t, s)
		for _, v := range vs {
			if v.Type() == frame.FileData && v.Flags()&frame.FlagRetransmit != 0 {
				n++
			}
		}
		return n
	}
	now := Time(3)
	report(now, frame.FileStatusBody{State: frame.FileNeedOffer})
	for ; now < Time(20*Millisecond); now += Time(Millisecond) {
		s.Tick(now)
	}
	sent(t, s) // the pass: 4 blocks, FileEnd
	// Half a second on, it takes the offer: every block missing.
	now = Time(500 * Millisecond)
	miss := []frame.Range{{First: 0, Last: 3}}
	report(now, frame.FileStatusBody{State: frame.FileReceiving, Top: 4, Missing: miss})
	s.Tick(now)
	if n := repairs(); n != 4 {
		t.Fatalf("%d blocks repaired at the report, want 4", n)
	}
	// The repairs are lost; it reports them missing again, and they go
	// again within a repair timeout of a round trip or so, not a second.
	n := 0
	for end := now + Time(100*Millisecond); now < end; now += Time(Millisecond) {
		if now%Time(20*Millisecond) == 0 {
			report(now, frame.FileStatusBody{State: frame.FileReceiving, Top: 4, Missing: miss})
		}
		s.Tick(now)
		n += repairs()
	}
	if n < 4 {
		t.Fatalf("%d blocks repaired again over 100ms of reports missing all 4; want every one", n)
	}
}
