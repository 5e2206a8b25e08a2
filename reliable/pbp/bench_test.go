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
	ms := testMembers(n)
	var cores []*Core
	var macs [][6]byte
	for i := range n {
		c, err := New(Config{Group: testGroup, Self: frame.MemberID(i), Members: ms, Mode: mode, Window: window, Retain: retain})
		if err != nil {
			tb.Fatal(err)
		}
		cores = append(cores, c)
		macs = append(macs, ms[i].MAC)
	}
	return memseg.New(testGroup, cores, macs, t0)
}

// BenchmarkGroup measures messages per second through the cores alone:
// member 0 sends, every other member delivers. msgs/s counts messages
// delivered at one receiver per second of CPU.
func BenchmarkGroup(b *testing.B) {
	for _, mode := range []Mode{PBP2, PBP1} {
		for _, n := range []int{2, 8} {
			for _, size := range []int{64, 1400} {
				b.Run(fmt.Sprintf("%v/members=%d/size=%d", mode, n, size), func(b *testing.B) {
					g := newMemGroup(b, mode, n, 0)
					msg := make([]byte, size)
					sent := 0
					b.ReportAllocs()
					b.SetBytes(int64(size))
					b.ResetTimer()
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
					for i := 1; i < n; i++ {
						if g.Delivered[i] != b.N {
							b.Fatalf("member %d delivered %d of %d", i, g.Delivered[i], b.N)
						}
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
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
				const n = 3
				ms := testMembers(n)
				var cores []*Core
				var macs [][6]byte
				for i := range n {
					c, err := New(Config{Group: testGroup, Self: frame.MemberID(i), Members: ms, Relay: relay})
					if err != nil {
						b.Fatal(err)
					}
					cores = append(cores, c)
					macs = append(macs, ms[i].MAC)
				}
				g := memseg.New(testGroup, cores, macs, t0)
				msg := make([]byte, size)
				sent := 0
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
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
				if g.Delivered[1] != b.N {
					b.Fatalf("member 1 delivered %d of %d", g.Delivered[1], b.N)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkRetain is BenchmarkGroup's PBP2 run of full frames without and
// with Config.Retain (the copy kept for view changes), side by side: the
// receivers' cost of retaining at 2, 3 and 8 members. cpu-ns/op is the
// process's CPU time per message (cpuTime), steadier than ns/op on a
// loaded machine.
func BenchmarkRetain(b *testing.B) {
	for _, n := range []int{2, 3, 8} {
		for _, retain := range []bool{false, true} {
			b.Run(fmt.Sprintf("members=%d/retain=%v", n, retain), func(b *testing.B) {
				const size = 1400
				g := newMemGroupRetain(b, PBP2, n, 0, retain)
				msg := make([]byte, size)
				sent := 0
				b.ReportAllocs()
				b.SetBytes(size)
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
			})
		}
	}
}
