// Package memseg is a lossless in-memory segment for benchmarking the
// protocol cores alone (reliable/pbp, reliable/seq): no simulator, no link,
// each frame copied once as a socket would, a unicast frame stepped only by
// its addressee. It is for tests and benchmarks.
package memseg

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
)

// Core is what a round needs of a protocol core besides its Ready.
type Core interface {
	Advance()
	Step(now clock.Time, src [6]byte, v frame.View) error
	Tick(now clock.Time)
}

// Segment runs cores in lock-step rounds on virtual time.
type Segment[C Core] struct {
	Cores     []C
	Now       clock.Time
	Delivered []int // messages each core delivered
	Frames    int   // frames all cores sent

	// StepErr, if set, is told of a frame core i's Step refused (a test
	// of a misbehaving member, whose frames are refused on purpose); nil
	// makes a refusal fail the test, as on a correct segment.
	StepErr func(i int, err error)
	// Tick is how far each Round moves the clock; 0 means a microsecond.
	Tick clock.Duration

	macs  [][6]byte
	group uint32
	ready func(C) (frames [][]byte, deliveries int)
	queue [][]byte // frames sent this round
	bufs  [][]byte
}

// New puts cores (ticked once at now) on a segment. macs[i] is core i's
// address; ready returns the frames and the number of deliveries of a
// core's Ready; group is the cores' group id.
func New[C Core](group uint32, cores []C, macs [][6]byte, now clock.Time, ready func(C) ([][]byte, int)) *Segment[C] {
	g := &Segment[C]{Cores: cores, Now: now, Delivered: make([]int, len(cores)), macs: macs, group: group, ready: ready}
	for _, c := range cores {
		c.Tick(now)
	}
	return g
}

// Round collects every core's Ready, then hands the frames to their
// receivers, then advances time by Tick (a microsecond) and ticks.
func (g *Segment[C]) Round(tb testing.TB) {
	g.queue = g.queue[:0]
	for i, c := range g.Cores {
		frames, deliveries := g.ready(c)
		g.Frames += len(frames)
		for _, f := range frames {
			k := len(g.queue)
			if k == len(g.bufs) {
				g.bufs = append(g.bufs, make([]byte, 0, 1600))
			}
			g.bufs[k] = append(g.bufs[k][:0], f...)
			g.queue = append(g.queue, g.bufs[k])
		}
		g.Delivered[i] += deliveries
		c.Advance()
	}
	for _, f := range g.queue {
		eth, rest, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			tb.Fatal(err)
		}
		v, err := frame.ParseGroup(rest, g.group)
		if err != nil {
			tb.Fatal(err)
		}
		src, dst := eth.Src(), eth.Dst()
		for j, c := range g.Cores {
			if g.macs[j] == src || (dst != frame.Broadcast && dst != g.macs[j]) {
				continue
			}
			if err := c.Step(g.Now, src, v); err != nil {
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
	for _, c := range g.Cores {
		c.Tick(g.Now)
	}
}
