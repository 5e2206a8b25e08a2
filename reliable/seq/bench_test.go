package seq

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// memGroup is a lossless in-memory segment for benchmarking the cores
// alone: no simulator, no link, each frame copied once as a socket would,
// unicast frames to their addressee only.
type memGroup struct {
	cores     []*Core
	now       Time
	queue     [][]byte
	bufs      [][]byte
	delivered []int
	frames    int // frames sent by every core
}

func newMemGroup(tb testing.TB, n int, method Method) *memGroup {
	g := &memGroup{now: t0, delivered: make([]int, n)}
	ms := testMembers(n)
	for i := range n {
		cfg := Config{Group: testGroup, Self: frame.MemberID(i), Members: ms, Method: method}
		c, err := New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		c.Tick(g.now)
		g.cores = append(g.cores, c)
	}
	return g
}

// round collects every core's Ready, then hands the frames to their
// receivers, then advances time by one microsecond and ticks.
func (g *memGroup) round(tb testing.TB) {
	g.queue = g.queue[:0]
	for i, c := range g.cores {
		rd := c.Ready()
		g.frames += len(rd.Frames)
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
		dst, src := eth.Dst(), eth.Src()
		for j, c := range g.cores {
			if src == testMAC(frame.MemberID(j)) || (dst != frame.Broadcast && dst != testMAC(frame.MemberID(j))) {
				continue
			}
			if err := c.Step(g.now, src, v); err != nil {
				tb.Fatal(err)
			}
		}
	}
	g.now = g.now.Add(Microsecond)
	for _, c := range g.cores {
		c.Tick(g.now)
	}
}

// BenchmarkGroup: 3 members, all 3 sending (the sequencer too), per
// method and message size. One op is one message delivered to all three
// members; ns/op is the CPU of the whole group (one thread). batch is the
// messages each sender proposes per round: 1 measures the per-request
// cost, 16 lets messages share requests (bundling).
func BenchmarkGroup(b *testing.B) {
	for _, method := range []Method{Method1, Method2, Hybrid} {
		for _, size := range []int{64, 1000} {
			for _, batch := range []int{1, 16} {
				if batch > 1 && size > 64 {
					continue
				}
				b.Run(fmt.Sprintf("%v/%dB/batch=%d", method, size, batch), func(b *testing.B) {
					benchGroup(b, method, size, batch)
				})
			}
		}
	}
}

func benchGroup(b *testing.B, method Method, size, batch int) {
	const n = 3
	g := newMemGroup(b, n, method)
	msg := make([]byte, size)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	// The segment is lossless: some message is proposed or delivered
	// every round or two. A second of virtual time (a million rounds,
	// 100 resend timeouts) without either is a bug, reported instead of
	// looping forever.
	const stallLimit = Second
	proposed := 0
	progress, progressAt := 0, g.now
	for proposed < b.N || min(g.delivered[0], g.delivered[1], g.delivered[2]) < b.N {
		if p := proposed + g.delivered[0] + g.delivered[1] + g.delivered[2]; p != progress {
			progress, progressAt = p, g.now
		} else if g.now.Sub(progressAt) > stallLimit {
			b.Fatalf("no message proposed or delivered in %d ms of virtual time: proposed %d of %d, delivered per member %v",
				stallLimit/Millisecond, proposed, b.N, g.delivered)
		}
		for _, c := range g.cores {
			for k := 0; k < batch && proposed < b.N; k++ {
				err := c.Propose(g.now, msg)
				if errors.Is(err, ErrWindowFull) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				proposed++
			}
		}
		g.round(b)
	}
	b.StopTimer()
	for i, d := range g.delivered {
		if d < b.N {
			b.Fatalf("member %d delivered %d of %d", i, d, b.N)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(g.frames)/float64(b.N), "frames/msg")
}
