package pbp

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// memGroup is a lossless in-memory segment for benchmarking the cores
// alone: no simulator, no link, each frame copied once as a socket would.
type memGroup struct {
	cores     []*Core
	macs      [][6]byte
	now       Time
	queue     [][]byte // frames sent this round
	bufs      [][]byte
	delivered []int
}

func newMemGroup(tb testing.TB, mode Mode, n, window int) *memGroup {
	g := &memGroup{now: t0, delivered: make([]int, n)}
	ms := testMembers(n)
	for i := range n {
		cfg := Config{Group: testGroup, Self: frame.MemberID(i), Members: ms, Mode: mode, Window: window}
		c, err := New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		c.Tick(g.now)
		g.cores = append(g.cores, c)
		g.macs = append(g.macs, ms[i].MAC)
	}
	return g
}

// round collects every core's Ready, then hands the frames to their
// receivers, then advances time by one microsecond and ticks.
func (g *memGroup) round(tb testing.TB) {
	g.queue = g.queue[:0]
	for i, c := range g.cores {
		rd := c.Ready()
		for _, f := range rd.Frames {
			k := len(g.queue)
			if k == len(g.bufs) {
				g.bufs = append(g.bufs, make([]byte, 0, 1600))
			}
			g.bufs[k] = append(g.bufs[k][:0], f...)
			g.queue = append(g.queue, g.bufs[k])
		}
		g.delivered[i] += len(rd.Deliveries)
		c.Advance()
	}
	for _, f := range g.queue {
		eth, rest, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			tb.Fatal(err)
		}
		v, err := frame.ParseGroup(rest, testGroup)
		if err != nil {
			tb.Fatal(err)
		}
		src, dst := eth.Src(), eth.Dst()
		for j, c := range g.cores {
			if g.macs[j] == src || (dst != frame.Broadcast && dst != g.macs[j]) {
				continue
			}
			if err := c.Step(g.now, src, v); err != nil {
				tb.Fatal(err)
			}
		}
	}
	g.now += Time(Microsecond)
	for _, c := range g.cores {
		c.Tick(g.now)
	}
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
					for g.delivered[n-1] < b.N {
						for sent < b.N {
							if err := g.cores[0].Propose(g.now, msg); errors.Is(err, ErrWindowFull) {
								break
							} else if err != nil {
								b.Fatal(err)
							}
							sent++
						}
						g.round(b)
					}
					b.StopTimer()
					for i := 1; i < n; i++ {
						if g.delivered[i] != b.N {
							b.Fatalf("member %d delivered %d of %d", i, g.delivered[i], b.N)
						}
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				})
			}
		}
	}
}
