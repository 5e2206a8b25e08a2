package daemon

import (
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
)

// memSeg is a segment in memory that allocates nothing per frame: every
// frame a member sends is copied into a preallocated slot of every other
// member's queue (dropped when the queue is full, as a NIC drops).
type memSeg struct{ links []*memLink }

func newMemSeg(n int) *memSeg { return newMemSegMTU(n, memMTU, 4096) }

// newMemSegMTU is newMemSeg with links of an MTU, each holding slots
// frames.
func newMemSegMTU(n, mtu, slots int) *memSeg {
	s := &memSeg{}
	for i := range n {
		l := &memLink{seg: s, mac: net.HardwareAddr{2, 0, 0, 0, 0, byte(i + 1)}, mtu: mtu, ready: make(chan struct{}, 1),
			closed: make(chan struct{}), timer: time.NewTimer(time.Hour)}
		for range slots {
			l.slots = append(l.slots, make([]byte, mtu+link.EthernetHeaderLen))
		}
		l.lens = make([]int, len(l.slots))
		s.links = append(s.links, l)
	}
	return s
}

const memMTU = 1500

// memLink is one member's end of a memSeg. Its slots are a ring: from
// first, held slots that the last Recv handed out (valid until the next
// Recv), then queued ones.
type memLink struct {
	seg    *memSeg
	mac    net.HardwareAddr
	mtu    int
	mu     sync.Mutex
	slots  [][]byte
	lens   []int
	first  int
	held   int
	queued int
	ready  chan struct{}
	closed chan struct{}
	once   sync.Once
	timer  *time.Timer // Recv's, reused
}

var (
	_ link.Link  = (*memLink)(nil)
	_ link.Waker = (*memLink)(nil)
)

func (l *memLink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		for _, dst := range l.seg.links {
			if dst != l {
				dst.push(f)
			}
		}
	}
	return len(frames), nil
}

func (l *memLink) push(f []byte) {
	l.mu.Lock()
	if l.held+l.queued < len(l.slots) {
		i := (l.first + l.held + l.queued) % len(l.slots)
		l.lens[i] = copy(l.slots[i], f)
		l.queued++
	}
	l.mu.Unlock()
	l.Wake()
}

func (l *memLink) Wake() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

func (l *memLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	for {
		l.mu.Lock()
		l.first = (l.first + l.held) % len(l.slots)
		l.held = 0
		n := min(l.queued, len(frames))
		for k := range n {
			i := (l.first + k) % len(l.slots)
			frames[k] = link.Frame{Data: l.slots[i][:l.lens[i]]}
		}
		l.held, l.queued = n, l.queued-n
		l.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			l.timer.Reset(d)
			timeout = l.timer.C
		}
		select {
		case <-l.ready:
			l.timer.Stop()
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		case <-l.closed:
			return 0, net.ErrClosed
		}
	}
}

func (l *memLink) MTU() int                       { return l.mtu }
func (l *memLink) HardwareAddr() net.HardwareAddr { return l.mac }
func (l *memLink) Stats() (link.Stats, error)     { return link.Stats{}, nil }
func (l *memLink) Close() error                   { l.once.Do(func() { close(l.closed) }); return nil }

// The daemon's steady state allocates nothing per message: a client
// streams SendBatch packets into one daemon, a subscriber at the other
// reads them as DeliverBatch packets, and the whole process (both
// daemons, both groups, both clients) allocates a bounded number of times
// however many messages pass (the once-a-second rate sample, timers),
// not a number that grows with them.
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100 000 messages")
	}
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	for _, rings := range []bool{false, true} {
		name := "packets"
		if rings {
			name = "rings"
		}
		t.Run(name, func(t *testing.T) { steadyStateAllocs(t, rings) })
	}
}

// steadyStateAllocs streams through SendBatch and DeliverBatch packets
// (local API version 1) or through the rings (version 2).
func steadyStateAllocs(t *testing.T, rings bool) {
	ds := memGroup(t, 2, reliable.FIFO)
	const size, perBatch = 1000, 40
	sub, _ := dialFlags(t, ds[1].socket, localapi.HelloBatch)
	var rr *localapi.RingReceiver
	if rings {
		var err error
		if rr, err = sub.DeliverRing(localapi.MinRing); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Write(&localapi.Subscribe{From: 0}); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, sub, 0) // before the stream: it counts every message
	c, _ := dial(t, ds[0].socket, true)
	var sr *localapi.RingSender
	if rings {
		var err error
		if sr, err = c.SendRing(localapi.MinRing); err != nil {
			t.Fatal(err)
		}
	}
	pkt := []byte{byte(localapi.TSendBatch)}
	for range perBatch {
		pkt = append(pkt, 0, 0, 3, 232) // 1000
		pkt = append(pkt, make([]byte, size)...)
	}
	// One goroutine writes, this one reads: each stream is a number of
	// batches, written and then all read.
	batches := make(chan int)
	werr := make(chan error, 1)
	go func() {
		for n := range batches {
			var err error
			for range n {
				if !rings {
					if err = c.WritePacket(pkt); err != nil {
						break
					}
					continue
				}
				for left := perBatch; left > 0 && err == nil; {
					var slots [][]byte
					if slots, err = sr.Reserve(size, left); err == nil {
						for range slots {
							sr.Commit(size)
						}
						left -= len(slots)
					}
				}
				if err == nil {
					err = sr.Publish()
				}
			}
			werr <- err
		}
	}()
	defer close(batches)
	// stream sends n batches and reads them. With fill, the subscriber
	// reads nothing until daemon 1's group holds a full receive queue
	// (RecvQueue's 4096): the queue allocates a buffer when it holds
	// more messages at once than ever before, so the warm-up fills it
	// (and, held past the loop's read pause, warms the repair path's
	// pools too), as a subscriber that lags under load does.
	stream := func(n int, fill bool) {
		batches <- n
		for fill {
			g := ds[1].d.g.Load()
			if fill = g == nil || g.Stats().Queued < reliable.DefaultRecvQueue; fill {
				time.Sleep(time.Millisecond) // polls the queue, asserts nothing by time
			}
		}
		for got := 0; got < n*perBatch; {
			if rings {
				if _, _, _, err := rr.Next(true); err != nil {
					t.Fatalf("after %d of %d messages: %v", got, n*perBatch, err)
				}
				got++
				continue
			}
			m, err := sub.Read()
			if err != nil {
				t.Fatalf("after %d of %d messages: %v", got, n*perBatch, err)
			}
			switch m := m.(type) {
			case *localapi.Deliver:
				got++
			case *localapi.DeliverBatch:
				got += len(m.Msgs)
			}
		}
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}
	stream(1000, true) // warm up: buffers, pools and queues grow to their size
	// A bound that does not grow with the messages (one allocation per
	// 1000 messages would be 100): what runs once a second or so (the
	// rate sample, timers) over the stream's time, with room for a slow
	// machine. Measured: 0 to 45.
	const n = 2500 // 100 000 messages
	msgs := n * perBatch
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	stream(n, false)
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	allocs := after.Mallocs - before.Mallocs
	t.Logf("%d messages in %v: %d allocations in the whole process (%.4f per message)", msgs, el.Round(time.Millisecond), allocs, float64(allocs)/float64(msgs))
	if limit := 50 + uint64(el.Seconds()*50); allocs > limit {
		t.Fatalf("%d allocations for %d messages (%.4f per message), want at most %d for the stream's %v", allocs, msgs, float64(allocs)/float64(msgs), limit, el.Round(time.Millisecond))
	}
}
