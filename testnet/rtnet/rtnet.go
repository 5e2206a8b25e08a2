// Package rtnet runs a simulated segment (testnet) in real time, so that
// code with goroutines and blocking calls — reliable.Group, dsm.Join, the
// daemon — runs over the simulator's seeded loss, duplication and
// reordering. It is for tests: New takes a testing.TB, fails the test on
// error and stops the clock when the test ends.
//
// One goroutine advances the virtual clock to the wall clock's; every
// access to the network is serialized by one mutex, as testnet requires
// (one goroutine at a time). Correctness tests that can be written against
// reliable.Driver on virtual time should be; this is for the code that
// cannot.
package rtnet

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

// Net is a testnet segment advanced in real time.
type Net struct {
	mu    sync.Mutex
	net   *testnet.Network
	base  time.Time // virtual time at start
	start time.Time // wall time at start
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

// New starts a segment with the given seed and default impairments
// (none; set them per endpoint with Attach). It stops when t ends.
func New(t testing.TB, seed uint64) *Net {
	t.Helper()
	n, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &Net{net: n, base: n.Now(), start: time.Now(), quit: make(chan struct{})}
	r.wg.Add(1)
	go r.run()
	t.Cleanup(r.Stop)
	return r
}

// Stop ends the clock goroutine; the test's Cleanup calls it too.
func (r *Net) Stop() {
	r.once.Do(func() { close(r.quit) })
	r.wg.Wait()
}

func (r *Net) run() {
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

// Attach adds an endpoint and returns it as a blocking link.Link.
func (r *Net) Attach(t testing.TB, cfg testnet.EndpointConfig) *Link {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ep, err := r.net.Attach(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{r: r, ep: ep, arrived: make(chan struct{}, 1), woken: make(chan struct{}, 1), closed: make(chan struct{})}
	ep.OnReceive(func() {
		select {
		case l.arrived <- struct{}{}:
		default:
		}
	})
	return l
}

// Link is one endpoint of a Net as a link.Link whose Recv blocks until a
// frame arrives, the deadline passes, Wake is called or the link is
// closed.
type Link struct {
	r         *Net
	ep        *testnet.Endpoint
	arrived   chan struct{}
	woken     chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

var _ link.Waker = (*Link)(nil)

// Wake implements link.Waker.
func (l *Link) Wake() {
	select {
	case l.woken <- struct{}{}:
	default: // a Wake is pending already
	}
}

var errDeadline = fmt.Errorf("rtnet: deadline: %w", os.ErrDeadlineExceeded)

// Crash crashes the endpoint (see testnet.Endpoint.Crash).
func (l *Link) Crash() {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	l.ep.Crash()
}

// Restart brings a crashed endpoint back with an empty queue (see
// testnet.Endpoint.Restart): crashed from Attach until Restart, it is a
// member that starts late, which hears nothing sent before it started.
func (l *Link) Restart() {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	l.ep.Restart()
}

// Counters returns the endpoint's counters in one direction.
func (l *Link) Counters(dir testnet.Direction) testnet.Counters {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Counters(dir)
}

func (l *Link) Send(frames [][]byte) (int, error) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Send(frames)
}

func (l *Link) Recv(deadline time.Time, frames []link.Frame) (int, error) {
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
				return 0, errDeadline
			}
			if timer == nil {
				timer = time.NewTimer(d)
			}
			expired = timer.C
		}
		select {
		case <-l.arrived:
		case <-expired:
			return 0, errDeadline
		case <-l.woken:
			return 0, errDeadline
		case <-l.closed:
			return 0, net.ErrClosed
		}
	}
}

func (l *Link) MTU() int                       { return l.ep.MTU() }
func (l *Link) HardwareAddr() net.HardwareAddr { return l.ep.HardwareAddr() }
func (l *Link) Stats() (link.Stats, error) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Stats()
}
func (l *Link) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.ep.Close()
}
