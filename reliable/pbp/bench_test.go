package pbp

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/memseg"
)

// newMemGroup puts n PBP cores on a lossless in-memory segment.
func newMemGroup(tb testing.TB, mode Mode, n, window int) *memseg.Segment[*Core] {
	return newMemGroupRetain(tb, mode, n, window, false)
}

// newMemGroupRetain is newMemGroup with Config.Retain set as retain (a
// group with views runs its cores so).
func newMemGroupRetain(tb testing.TB, mode Mode, n, window int, retain bool) *memseg.Segment[*Core] {
	return newMemGroupConfig(tb, n, Config{Mode: mode, Window: window, Retain: retain})
}

// newMemGroupConfig puts n PBP cores configured as cfg (its Group, Self
// and Members set per member) on a lossless in-memory segment.
func newMemGroupConfig(tb testing.TB, n int, cfg Config) *memseg.Segment[*Core] {
	ms := testMembers(n)
	var cores []*Core
	var macs [][6]byte
	for i := range n {
		cfg.Group, cfg.Self, cfg.Members = testGroup, frame.MemberID(i), ms
		c, err := New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		cores = append(cores, c)
		macs = append(macs, ms[i].MAC)
	}
	return memseg.New(testGroup, cores, macs, t0)
}

// stream has member 0 of g's n send b.N messages of size bytes, as fast
// as its window lets it, until every other member delivered them all,
// and reports msgs/s (messages delivered at one receiver per second) and
// cpu-ns/op (the process's CPU time per message, cpuTime: steadier than
// ns/op on a loaded machine).
func stream(b *testing.B, g *memseg.Segment[*Core], n, size int) {
	msg := make([]byte, size)
	sent := 0
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	cpu0 := cpuTime()
	for g.Delivered[n-1] < b.N {
		for sent < b.N {
			if err := g.Cores[0].Propose(g.Now, msg); errors.Is(err, ErrWindowFull) {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			sent++
		}
		g.Round(b)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	for i := 1; i < n; i++ {
		if g.Delivered[i] != b.N {
			b.Fatalf("member %d delivered %d of %d", i, g.Delivered[i], b.N)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkGroup measures messages per second through the cores alone:
// member 0 sends, every other member delivers.
func BenchmarkGroup(b *testing.B) {
	for _, mode := range []Mode{PBP2, PBP1} {
		for _, n := range []int{2, 8} {
			for _, size := range []int{64, 1400} {
				b.Run(fmt.Sprintf("%v/members=%d/size=%d", mode, n, size), func(b *testing.B) {
					stream(b, newMemGroup(b, mode, n, 0), n, size)
				})
			}
		}
	}
}

// BenchmarkRelayCost is BenchmarkGroup's PBP2 run at 3 members with and
// without Relay, side by side: the copy of every delivered message that
// Relay keeps (nothing is relayed on a lossless segment).
func BenchmarkRelayCost(b *testing.B) {
	for _, size := range []int{64, 1400} {
		for _, relay := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/relay=%v", size, relay), func(b *testing.B) {
				stream(b, newMemGroupConfig(b, 3, Config{Relay: relay}), 3, size)
			})
		}
	}
}

// BenchmarkRetain is BenchmarkGroup's PBP2 run of full frames without and
// with Config.Retain (the copy kept for view changes), side by side: the
// receivers' cost of retaining at 2, 3 and 8 members.
func BenchmarkRetain(b *testing.B) {
	for _, n := range []int{2, 3, 4, 8} {
		for _, retain := range []bool{false, true} {
			b.Run(fmt.Sprintf("members=%d/retain=%v", n, retain), func(b *testing.B) {
				stream(b, newMemGroupRetain(b, PBP2, n, 0, retain), n, 1400)
			})
		}
	}
}

// BenchmarkRetainLent is a group with views' receive path at MTU 9000,
// four members, member 0 streaming full frames: without retention (the
// registered group), retaining a copy of every frame delivered, and
// retaining it where the link lent it (StepLent: memseg.Segment.Lend
// recycles a frame's buffer only once its loan came back).
func BenchmarkRetainLent(b *testing.B) {
	for _, mode := range []string{"none", "copy", "lent"} {
		b.Run("retain="+mode, func(b *testing.B) {
			g := newMemGroupConfig(b, 4, Config{Mode: PBP2, MTU: 9000, Retain: mode != "none"})
			g.Lend = mode == "lent"
			stream(b, g, 4, g.Cores[0].Info().MaxMessage)
		})
	}
}

// BenchmarkNoteAcks is the acknowledgement matrix's cost per frame
// received (noteAcks) at 8 members, from member 3: a stream's frames,
// where only the sender's own entry moves, and frames of a group where
// every member sends, where every entry moves.
func BenchmarkNoteAcks(b *testing.B) {
	const n, sender = 8, 3
	for _, all := range []bool{false, true} {
		b.Run(fmt.Sprintf("all=%v", all), func(b *testing.B) {
			c := newCore(b, testConfig(PBP2, 0, n))
			p, _ := c.peer(sender)
			views := make([]frame.View, 256)
			acks := make([]uint32, n)
			for i := range views {
				for s := range acks {
					if s == sender || all {
						acks[s] = 100 + uint32(i)
					} else {
						acks[s] = 100
					}
				}
				_, views[i] = in{sender: sender, seq: 99, acks: acks, body: &frame.Empty{T: frame.Ack}}.view(b)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i&255 == 0 { // the vectors start again from the first
					clear(p.vec)
				}
				c.noteAcks(p, views[i&255])
			}
		})
	}
}
