package dsm

// A copy of reliable/rtnet_test.go (test helpers are not importable):
// a testnet segment advanced in real time, so that Join runs over it.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
)

// rtNet runs a testnet segment in real time, so that Groups — with their
// goroutines and blocking calls — run over the simulator's seeded loss,
// duplication and reordering. One goroutine advances the virtual clock to
// the wall clock's; every access to the network is serialized by mu, as
// testnet requires (one goroutine at a time).
type rtNet struct {
	mu    sync.Mutex
	net   *testnet.Network
	base  time.Time // virtual time at start
	start time.Time // wall time at start
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

// stop ends the clock goroutine; Cleanup calls it too.
func (r *rtNet) stop() {
	r.once.Do(func() { close(r.quit) })
	r.wg.Wait()
}

func newRTNet(t *testing.T, seed uint64) *rtNet {
	t.Helper()
	n, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rtNet{net: n, base: n.Now(), start: time.Now(), quit: make(chan struct{})}
	r.wg.Add(1)
	go r.run()
	t.Cleanup(r.stop)
	return r
}

func (r *rtNet) run() {
	defer r.wg.Done()
	for {
		select {
		case <-r.quit:
			return
		default:
		}
		r.mu.Lock()
		r.net.RunUntil(r.base.Add(time.Since(r.start)))
		r.mu.Unlock()
		time.Sleep(20 * time.Microsecond)
	}
}

// attach adds an endpoint and returns it as a blocking link.Link.
func (r *rtNet) attach(t *testing.T, cfg testnet.EndpointConfig) *rtLink {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ep, err := r.net.Attach(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &rtLink{r: r, ep: ep, arrived: make(chan struct{}, 1), closed: make(chan struct{})}
	ep.OnReceive(func() {
		select {
		case l.arrived <- struct{}{}:
		default:
		}
	})
	return l
}

type rtLink struct {
	r         *rtNet
	ep        *testnet.Endpoint
	arrived   chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

var _ link.Link = (*rtLink)(nil)

var errRTDeadline = fmt.Errorf("rtlink: deadline: %w", os.ErrDeadlineExceeded)

func (l *rtLink) Send(frames [][]byte) (int, error) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Send(frames)
}

func (l *rtLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.r.mu.Lock()
		n, err := l.ep.Recv(time.Time{}, frames)
		l.r.mu.Unlock()
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		var expired <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return 0, errRTDeadline
			}
			if timer == nil {
				timer = time.NewTimer(d)
			}
			expired = timer.C
		}
		select {
		case <-l.arrived:
		case <-expired:
			return 0, errRTDeadline
		case <-l.closed:
			return 0, net.ErrClosed
		}
	}
}

func (l *rtLink) MTU() int                       { return l.ep.MTU() }
func (l *rtLink) HardwareAddr() net.HardwareAddr { return l.ep.HardwareAddr() }
func (l *rtLink) Stats() (link.Stats, error) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Stats()
}
func (l *rtLink) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Close()
}
