package invariant

import (
	"fmt"
	"hash/maphash"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// storms finds more than NackStormCount Nacks naming the same range within
// NackStormWindow, once per burst. It counts each transmission once: a
// frame sent (or captured without direction), and the first received copy
// of a frame whose sender's own interface is not captured.
type storms struct {
	ranges     bounded[rangeKey, *storm]
	outSenders bounded[senderKey, struct{}]
	seenIn     bounded[uint64, struct{}]
}

func (s *storms) init(window int) {
	s.ranges = newBounded[rangeKey, *storm](window)
	s.outSenders = newBounded[senderKey, struct{}](window)
	s.seenIn = newBounded[uint64, struct{}](window)
}

type rangeKey struct {
	target      frame.MemberID
	first, last uint32
}

type storm struct {
	hits []hit
	in   bool
}

type hit struct {
	at time.Time
	n  int
}

func (c *Checker) checkStorm(f *Frame, report reportFunc) {
	v := f.View
	k := senderKey{v.Sender(), v.Incarnation()}
	if f.Dir == DirOut {
		c.outSenders.put(k, struct{}{})
	}
	if v.Type() != frame.Nack {
		return
	}
	if f.Dir == DirIn {
		if _, ok := c.outSenders.get(k); ok {
			return
		}
		h := maphash.Bytes(c.seed, f.Data)
		if _, ok := c.seenIn.get(h); ok {
			return
		}
		c.seenIn.put(h, struct{}{})
	}
	rl := v.NackRanges()
	for i := range rl.Len() {
		rg := rl.At(i)
		rk := rangeKey{v.NackTarget(), rg.First, rg.Last}
		s, ok := c.ranges.get(rk)
		if !ok {
			s = &storm{}
			c.ranges.put(rk, s)
		}
		s.hits = append(s.hits, hit{f.Time, f.N})
		for len(s.hits) > 0 && f.Time.Sub(s.hits[0].at) > c.opts.NackStormWindow {
			s.hits = s.hits[1:]
		}
		if len(s.hits) <= c.opts.NackStormCount {
			s.in = false
			continue
		}
		if !s.in {
			s.in = true
			frames := make([]int, len(s.hits))
			for i := range s.hits {
				frames[i] = s.hits[i].n
			}
			report(KindNackStorm, fmt.Sprintf("%d Nacks to member %d for seqs %d-%d within %v (limit %d)", len(s.hits), rk.target, rk.first, rk.last, c.opts.NackStormWindow, c.opts.NackStormCount), frames...)
		}
	}
}
