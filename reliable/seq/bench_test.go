package seq

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/memseg"
)

// newMemGroup puts n sequencer cores on a lossless in-memory segment.
func newMemGroup(tb testing.TB, n int, method Method) *memseg.Segment[*Core] {
	ms := testMembers(n)
	var cores []*Core
	var macs [][6]byte
	for i := range n {
		c, err := New(Config{Group: testGroup, Self: frame.MemberID(i), Members: ms, Method: method})
		if err != nil {
			tb.Fatal(err)
		}
		cores = append(cores, c)
		macs = append(macs, testMAC(frame.MemberID(i)))
	}
	return memseg.New(testGroup, cores, macs, t0)
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
	progress, progressAt := 0, g.Now
	for proposed < b.N || min(g.Delivered[0], g.Delivered[1], g.Delivered[2]) < b.N {
		if p := proposed + g.Delivered[0] + g.Delivered[1] + g.Delivered[2]; p != progress {
			progress, progressAt = p, g.Now
		} else if g.Now.Sub(progressAt) > stallLimit {
			b.Fatalf("no message proposed or delivered in %d ms of virtual time: proposed %d of %d, delivered per member %v",
				stallLimit/Millisecond, proposed, b.N, g.Delivered)
		}
		for _, c := range g.Cores {
			for k := 0; k < batch && proposed < b.N; k++ {
				err := c.Propose(g.Now, msg)
				if errors.Is(err, ErrWindowFull) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				proposed++
			}
		}
		g.Round(b)
	}
	b.StopTimer()
	for i, d := range g.Delivered {
		if d < b.N {
			b.Fatalf("member %d delivered %d of %d", i, d, b.N)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(g.Frames)/float64(b.N), "frames/msg")
}
