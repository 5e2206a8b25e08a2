// Package memseg is a lossless in-memory segment for benchmarking and
// testing the protocol cores alone (reliable/pbp, reliable/seq): no
// simulator, no link, each frame copied once as a socket would and
// decoded once, a unicast frame stepped only by its addressee. Every core
// is driven through its core.Stepper, as live. It is for tests and
// benchmarks.
package memseg

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// Segment runs cores in lock-step rounds on virtual time.
type Segment[C core.Core] struct {
	Cores     []C
	Steppers  []*core.Stepper
	Now       clock.Time
	Delivered []int // messages each core delivered
	Frames    int   // frames all cores sent

	// OnReady, if set, sees each core's Ready before it is carried out.
	OnReady func(i int, rd core.Ready)
	// StepErr, if set, is told of a frame core i's Step refused (a test
	// of a misbehaving member, whose frames are refused on purpose); nil
	// makes a refusal fail the test, as on a correct segment.
	StepErr func(i int, err error)
	// Tick is how far each Round moves the clock; 0 means a microsecond.
	Tick clock.Duration

	// Lend steps every frame as lent (core.Stepper.StepViewLent), from a
	// buffer of its own that goes back to be reused, as a ring slot, only
	// once no core holds its loan and every loan before it came back.
	Lend bool

	macs  [][6]byte
	group uint32
	queue [][]byte // frames sent this round
	bufs  [][]byte
	// Lend: the buffers of loans heldBase on, how many holds each has,
	// the buffers free, and Loans' scratch.
	held            []lentBuf
	heldBase        core.Loan
	free            [][]byte
	taken, returned []core.Loan
}

type lentBuf struct {
	buf   []byte
	holds int
}

// New puts cores (ticked once at now) on a segment. macs[i] is core i's
// address; group is the cores' group id.
func New[C core.Core](group uint32, cores []C, macs [][6]byte, now clock.Time) *Segment[C] {
	g := &Segment[C]{Cores: cores, Now: now, Delivered: make([]int, len(cores)), macs: macs, group: group}
	for _, c := range cores {
		g.Steppers = append(g.Steppers, core.NewStepper(c, group, frame.EtherType))
		c.Tick(now)
	}
	return g
}

// Replace puts c in core i's place (a restart), ticked at Now.
func (g *Segment[C]) Replace(i int, c C) {
	g.Cores[i] = c
	g.Steppers[i] = core.NewStepper(c, g.group, frame.EtherType)
	c.Tick(g.Now)
}

// Round collects every core's Ready, then hands the frames to their
// receivers, then advances time by Tick (a microsecond) and ticks.
func (g *Segment[C]) Round(tb testing.TB) {
	g.queue = g.queue[:0]
	for i, st := range g.Steppers {
		rd := st.Ready()
		if g.OnReady != nil {
			g.OnReady(i, rd)
		}
		g.Frames += len(rd.Frames)
		for _, f := range rd.Frames {
			if g.Lend {
				var b []byte
				if n := len(g.free); n > 0 {
					b, g.free = g.free[n-1], g.free[:n-1]
				}
				b = append(b[:0], f...)
				g.queue = append(g.queue, b)
				g.held = append(g.held, lentBuf{buf: b})
				continue
			}
			k := len(g.queue)
			if k == len(g.bufs) {
				g.bufs = append(g.bufs, make([]byte, 0, 1600))
			}
			g.bufs[k] = append(g.bufs[k][:0], f...)
			g.queue = append(g.queue, g.bufs[k])
		}
		g.Delivered[i] += len(rd.Deliveries)
		st.Advance()
	}
	if g.Lend {
		// The last round's frames were handed out (Advance): those no
		// loan holds go back, not this round's.
		g.settle(tb, len(g.held)-len(g.queue))
	}
	first := g.heldBase + core.Loan(len(g.held)-len(g.queue))
	for k, f := range g.queue {
		eth, rest, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			tb.Fatal(err)
		}
		v, err := frame.ParseGroup(rest, g.group)
		if err != nil {
			tb.Fatal(err)
		}
		src, dst := eth.Src(), eth.Dst()
		for j, st := range g.Steppers {
			if g.macs[j] == src || (dst != frame.Broadcast && dst != g.macs[j]) {
				continue
			}
			var err error
			if g.Lend {
				err = st.StepViewLent(g.Now, src, dst, v, first+core.Loan(k))
			} else {
				err = st.StepView(g.Now, src, dst, v)
			}
			if err != nil {
				if g.StepErr == nil {
					tb.Fatal(err)
				}
				g.StepErr(j, err)
			}
		}
	}
	d := g.Tick
	if d == 0 {
		d = clock.Microsecond
	}
	g.Now = g.Now.Add(d)
	for _, st := range g.Steppers {
		st.Tick(g.Now)
	}
}

// settle takes the loans the cores took and gave back since the last
// round and frees, in loan order, the buffers no loan holds among the
// first upto (Lend).
func (g *Segment[C]) settle(tb testing.TB, upto int) {
	for _, st := range g.Steppers {
		g.taken, g.returned = st.Loans(g.taken[:0], g.returned[:0])
		for _, l := range g.taken {
			g.held[l-g.heldBase].holds++
		}
		for _, l := range g.returned {
			if g.held[l-g.heldBase].holds--; g.held[l-g.heldBase].holds < 0 {
				tb.Fatalf("loan %d given back more often than taken", l)
			}
		}
	}
	k := 0
	for k < upto && g.held[k].holds == 0 {
		g.free = append(g.free, g.held[k].buf)
		k++
	}
	g.held = append(g.held[:0], g.held[k:]...)
	g.heldBase += core.Loan(k)
}
