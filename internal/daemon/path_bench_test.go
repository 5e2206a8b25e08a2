package daemon

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
)

// BenchmarkDaemonPath is the daemon path of `rbcastd bench`, in one
// process and without a namespace: three daemons over a memSeg (MTU
// 1500), one client streaming 1400-byte messages into daemon 0 through a
// send ring of 4 MiB (Reserve, Commit, Publish per 64, as `rbcastd send`
// does), and a subscriber at each of daemons 1 and 2 reading a deliver
// ring of 4 MiB with recv's default nap. An op is one message delivered
// to both subscribers, so the CPU of a run per op (callgrind,
// GOMAXPROCS=1; COMMON.md's recipe) is what the daemons, their clients and
// the in-memory link spend per message.
func BenchmarkDaemonPath(b *testing.B) {
	const size, perBatch = 1400, 64
	ds := memGroup(b, 3, reliable.FIFO)
	type sub struct {
		c  *localapi.Conn
		rr *localapi.RingReceiver
	}
	var subs []sub
	for _, x := range ds[1:] {
		c, _ := dialFlags(b, x.socket, localapi.HelloBatch)
		rr, err := c.DeliverRing(4 << 20)
		if err != nil {
			b.Fatal(err)
		}
		rr.SetNap(2 * time.Millisecond)
		if err := c.Write(&localapi.Subscribe{From: 0}); err != nil {
			b.Fatal(err)
		}
		awaitSubscribed(b, c, 0)
		c.SetDeadline(time.Time{}) // dialFlags's 30 s: callgrind runs longer
		subs = append(subs, sub{c, rr})
	}
	c, w := dial(b, ds[0].socket, true)
	if int(w.MaxMessage) < size {
		b.Fatalf("the group's largest message is %d bytes", w.MaxMessage)
	}
	sr, err := c.SendRing(4 << 20)
	if err != nil {
		b.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	send := func(n int) error {
		for left := n; left > 0; {
			slots, err := sr.Reserve(size, min(left, perBatch))
			if err != nil {
				return err
			}
			for _, s := range slots {
				s[0] = byte(left)
				sr.Commit(size)
				left--
			}
			if err := sr.Publish(); err != nil {
				return err
			}
		}
		return nil
	}
	// stream sends n messages and waits until both subscribers read
	// them all.
	stream := func(n int) {
		sent := make(chan error, 1)
		go func() { sent <- send(n) }()
		got := make(chan error, len(subs))
		for _, s := range subs {
			go func() {
				for k := range n {
					_, d, _, err := s.rr.Next(true)
					if err == nil && len(d) != size {
						b.Errorf("message %d of %d is %d bytes", k, n, len(d))
					}
					if err != nil {
						got <- err
						return
					}
				}
				got <- s.rr.Release()
			}()
		}
		for range subs {
			if err := <-got; err != nil {
				b.Fatal(err)
			}
		}
		if err := <-sent; err != nil {
			b.Fatal(err)
		}
	}
	stream(2000) // warm up: buffers, pools and queues grow to their size
	// The wake-ups of the clients: the sender's Doorbells (the daemon
	// slept on its send ring), the subscribers' sleeps (each ended by a
	// DaemonDoorbell) and naps. The daemon's wake-ups are their other
	// ends.
	bells0, sleeps0, naps0 := sr.Doorbells(), uint64(0), uint64(0)
	for _, s := range subs {
		naps, _ := s.rr.Naps()
		sleeps0, naps0 = sleeps0+s.rr.Sleeps(), naps0+naps
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	stream(b.N)
	b.StopTimer()
	sleeps, naps := -sleeps0, -naps0
	for _, s := range subs {
		n, _ := s.rr.Naps()
		sleeps, naps = sleeps+s.rr.Sleeps(), naps+n
	}
	b.ReportMetric(float64(sr.Doorbells()-bells0)/float64(b.N), "sendbells/op")
	b.ReportMetric(float64(sleeps)/float64(b.N), "recvsleeps/op")
	b.ReportMetric(float64(naps)/float64(b.N), "recvnaps/op")
}
