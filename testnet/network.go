// Package testnet simulates an Ethernet segment in virtual time, so that many
// rbcast nodes can run in one goroutine and every run is reproducible from a
// seed: same seed, same configuration, same inputs => the same frames, at the
// same virtual instants, in the same order (DESIGN.md, decision 1 and
// "Testing", level 2).
//
// A Network owns a virtual clock and an event queue. Endpoints attached to it
// implement link.Link. Frames sent on one endpoint are scheduled to arrive at
// every other endpoint whose address filter accepts them, after latency,
// serialization delay and the seeded impairments of the sender's Out and the
// receiver's In direction. Nothing runs by itself: the simulator advances time
// only in Step, RunUntil and RunFor, and calls back into the caller (timers,
// arrival hooks, bound Nodes) from there.
//
// Determinism rules kept in this package: no goroutines, no wall clock, no
// global math/rand, no map iteration; randomness comes from PCG streams
// derived from the seed, one per endpoint and direction, so attaching another
// endpoint does not change what the existing ones draw; simultaneous events
// run in the order they were scheduled.
//
// A Network and its endpoints must be used from one goroutine (the one
// driving the simulation), unlike the live links, which allow a sender and a
// receiver goroutine.
package testnet

import (
	"container/heap"
	"errors"
	"fmt"
	"time"
)

// Medium says how frames share the segment's capacity.
type Medium uint8

const (
	// Switch models a store-and-forward switch: each sender serializes its
	// frames on its own uplink, and each receiver's switch port serializes
	// the frames queued for it. Receivers congest independently.
	Switch Medium = iota
	// SharedBus models classic shared Ethernet (a hub): one frame on the
	// wire at a time, seen by all receivers at once.
	SharedBus
)

func (m Medium) String() string {
	switch m {
	case Switch:
		return "switch"
	case SharedBus:
		return "shared bus"
	}
	return fmt.Sprintf("Medium(%d)", uint8(m))
}

// Unlimited, as Config.Bandwidth, turns off serialization delay.
const Unlimited = -1

// Defaults used for zero Config fields.
const (
	DefaultLatency   = 50 * time.Microsecond
	DefaultBandwidth = 125_000_000 // bytes/s: 1 Gbit/s
)

// DefaultStart is the virtual epoch used when Config.Start is zero. It is a
// fixed instant so that traces with absolute times are reproducible.
var DefaultStart = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Config describes the segment. The zero value is a 1 Gbit/s switch with
// 50µs latency, starting at DefaultStart.
type Config struct {
	// Latency is the one-way propagation and switching delay added to every
	// frame. Zero means DefaultLatency; negative is an error.
	Latency time.Duration
	// Bandwidth in bytes per second of every port (or of the bus). Zero
	// means DefaultBandwidth; Unlimited means no serialization delay. A
	// frame occupies the wire for its length plus the FCS, preamble and
	// inter-frame gap, padded to the 64-byte minimum (IEEE 802.3).
	Bandwidth int64
	// Medium selects a switch (default) or a shared bus.
	Medium Medium
	// Start is the virtual time at which the network begins.
	Start time.Time
}

// ErrConfig is wrapped by every error about a bad Config, EndpointConfig,
// Impairment or partition.
var ErrConfig = errors.New("testnet: invalid configuration")

func configErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// Network is a simulated Ethernet segment with a virtual clock.
type Network struct {
	seed      uint64
	start     time.Time
	now       int64 // nanoseconds since start
	latency   int64
	bandwidth int64 // bytes/s; 0 means unlimited
	medium    Medium
	busFree   int64 // SharedBus: when the wire is next idle

	events eventQueue
	seq    uint64
	free   []*event // recycled frame events
	pool   packetPool

	endpoints []*Endpoint
	tracers   []func(Event)
	// partitioned says Partition is in force; each endpoint then carries a
	// group number and frames only cross within a group.
	partitioned bool
}

// New returns a network whose randomness is derived from seed.
func New(seed uint64, cfg Config) (*Network, error) {
	switch {
	case cfg.Latency < 0:
		return nil, configErrorf("Config.Latency is %v, want >= 0 (0 means %v)", cfg.Latency, DefaultLatency)
	case cfg.Bandwidth < 0 && cfg.Bandwidth != Unlimited:
		return nil, configErrorf("Config.Bandwidth is %d bytes/s, want > 0, 0 for the default %d, or Unlimited", cfg.Bandwidth, DefaultBandwidth)
	case cfg.Medium != Switch && cfg.Medium != SharedBus:
		return nil, configErrorf("Config.Medium is %v, want Switch or SharedBus", cfg.Medium)
	}
	n := &Network{seed: seed, start: cfg.Start, medium: cfg.Medium}
	if n.start.IsZero() {
		n.start = DefaultStart
	}
	n.latency = int64(cfg.Latency)
	if n.latency == 0 {
		n.latency = int64(DefaultLatency)
	}
	switch cfg.Bandwidth {
	case 0:
		n.bandwidth = DefaultBandwidth
	case Unlimited:
		n.bandwidth = 0
	default:
		n.bandwidth = cfg.Bandwidth
	}
	return n, nil
}

// Seed returns the seed the network was created with, for printing a failing
// run so that it can be replayed.
func (n *Network) Seed() uint64 { return n.seed }

// Endpoints returns the attached endpoints in attach order (index order).
func (n *Network) Endpoints() []*Endpoint { return append([]*Endpoint(nil), n.endpoints...) }

// Now returns the current virtual time.
func (n *Network) Now() time.Time { return n.start.Add(time.Duration(n.now)) }

func (n *Network) timeAt(ns int64) time.Time { return n.start.Add(time.Duration(ns)) }

// wireTime is how long a frame of size bytes (without FCS) occupies a port.
func (n *Network) wireTime(size int) int64 {
	if n.bandwidth == 0 {
		return 0
	}
	wire := int64(size) + 4 // FCS
	if wire < 64 {
		wire = 64
	}
	wire += 8 + 12 // preamble+SFD, inter-frame gap
	return wire * int64(time.Second) / n.bandwidth
}

type eventKind uint8

const (
	evArrival  eventKind = iota // a frame reaches a receiver's NIC
	evTimer                     // AfterFunc / At callback
	evWake                      // step a bound Node because frames arrived
	evDeadline                  // step a bound Node because its deadline came
)

type event struct {
	at    int64
	seq   uint64
	index int // position in the heap, -1 when not queued
	kind  eventKind

	// evArrival
	pkt      *packet
	from, to *Endpoint

	// evTimer
	fn func()

	// evWake and evDeadline use to; the endpoint keeps a pointer to its
	// pending ones so that it can cancel them.
}

// eventQueue orders events by time, then by scheduling order, which makes
// simultaneous events deterministic.
type eventQueue []*event

// Pointer receivers throughout: container/heap calls these through the
// interface holding *eventQueue, and value receivers cost a generated
// wrapper per call.
func (q *eventQueue) Len() int { return len(*q) }
func (q *eventQueue) Less(i, j int) bool {
	s := *q
	if s[i].at != s[j].at {
		return s[i].at < s[j].at
	}
	return s[i].seq < s[j].seq
}
func (q *eventQueue) Swap(i, j int) {
	s := *q
	s[i], s[j] = s[j], s[i]
	s[i].index = i
	s[j].index = j
}
func (q *eventQueue) Push(x any) {
	ev := x.(*event)
	ev.index = len(*q)
	*q = append(*q, ev)
}
func (q *eventQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	old[len(old)-1] = nil
	ev.index = -1
	*q = old[:len(old)-1]
	return ev
}

func (n *Network) newEvent(kind eventKind, at int64) *event {
	var ev *event
	if k := len(n.free); k > 0 && kind != evTimer {
		ev = n.free[k-1]
		n.free = n.free[:k-1]
	} else {
		ev = new(event)
	}
	*ev = event{kind: kind, at: at, index: -1}
	return ev
}

func (n *Network) schedule(ev *event) {
	if ev.at < n.now {
		ev.at = n.now
	}
	n.seq++
	ev.seq = n.seq
	heap.Push(&n.events, ev)
}

func (n *Network) recycle(ev *event) {
	if ev.kind == evTimer {
		return // a Timer may still point at it
	}
	*ev = event{index: -1}
	n.free = append(n.free, ev)
}

// Step processes the next event, advancing the clock to its time. It returns
// false, leaving the clock alone, when no event is pending.
func (n *Network) Step() bool {
	if len(n.events) == 0 {
		return false
	}
	ev := heap.Pop(&n.events).(*event)
	n.now = ev.at
	switch ev.kind {
	case evArrival:
		ev.to.arrive(ev.pkt, ev.from)
	case evTimer:
		fn := ev.fn
		ev.fn = nil // marks it fired for Timer.Stop
		fn()
	case evWake:
		ev.to.wakeEvent()
	case evDeadline:
		ev.to.deadlineEvent()
	}
	n.recycle(ev)
	return true
}

// RunUntil processes every event due at or before t, then sets the clock to
// t (if t is later than now).
func (n *Network) RunUntil(t time.Time) {
	until := int64(t.Sub(n.start))
	for len(n.events) > 0 && n.events[0].at <= until {
		n.Step()
	}
	if until > n.now {
		n.now = until
	}
}

// RunFor runs the network for d of virtual time.
func (n *Network) RunFor(d time.Duration) { n.RunUntil(n.Now().Add(d)) }

// Pending reports how many events are scheduled.
func (n *Network) Pending() int { return len(n.events) }

// Timer is a callback scheduled with AfterFunc or At.
type Timer struct {
	ev *event
	n  *Network
}

// AfterFunc calls fn from Step after d of virtual time (at once, in order,
// if d <= 0).
func (n *Network) AfterFunc(d time.Duration, fn func()) *Timer {
	return n.At(n.Now().Add(d), fn)
}

// At calls fn from Step at virtual time t; a t in the past means now. Events
// due at the same instant run in the order they were scheduled.
func (n *Network) At(t time.Time, fn func()) *Timer {
	ev := n.newEvent(evTimer, int64(t.Sub(n.start)))
	ev.fn = fn
	n.schedule(ev)
	return &Timer{ev: ev, n: n}
}

// Stop cancels the timer. It reports whether the timer was still pending.
func (t *Timer) Stop() bool {
	if t.ev.index < 0 || t.ev.fn == nil {
		return false
	}
	heap.Remove(&t.n.events, t.ev.index)
	t.ev.fn = nil
	return true
}
