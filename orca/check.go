package orca

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/rbcast/rbcast/frame"
)

// History records a run's trace events (set Config.Trace to its Record)
// for the sequential-consistency checker (Check) and the replica
// comparison (Agree). It assumes one program thread per member: each
// member's calls are its program order.
type History struct {
	mu      sync.Mutex
	news    map[string]TraceEvent
	order   []string // object names in the order first made
	calls   map[frame.MemberID][]TraceEvent
	applied map[frame.MemberID][]TraceEvent
	bad     []TraceEvent
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{news: map[string]TraceEvent{}, calls: map[frame.MemberID][]TraceEvent{},
		applied: map[frame.MemberID][]TraceEvent{}}
}

// Record takes one event (Config.Trace). Safe for concurrent use.
func (h *History) Record(ev TraceEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case TraceNew:
		if _, ok := h.news[ev.Object]; !ok {
			h.news[ev.Object] = ev
			h.order = append(h.order, ev.Object)
		}
	case TraceCall:
		h.calls[ev.Member] = append(h.calls[ev.Member], ev)
	case TraceApply, TraceRestore:
		h.applied[ev.Member] = append(h.applied[ev.Member], ev)
	case TraceBad:
		h.bad = append(h.bad, ev)
	}
}

// Calls returns member m's calls in program order.
func (h *History) Calls(m frame.MemberID) []TraceEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls[m])
}

// Applied returns the writes member m's replica applied, in order of
// position.
func (h *History) Applied(m frame.MemberID) []TraceEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var a []TraceEvent
	for _, seg := range segments(h.applied[m]) {
		a = append(a, seg.applied...)
	}
	return a
}

// segment is a part of a replica's log: the writes it applied from the
// start (restored false), or after it restored a snapshot taken after
// message after (a member that joined or restarted: Config.Views).
type segment struct {
	restored bool
	after    uint64
	applied  []TraceEvent
}

// segments splits a replica's log at its restores, each part in order of
// position.
func segments(evs []TraceEvent) []segment {
	segs := []segment{{}}
	for _, e := range evs {
		if e.Kind == TraceRestore {
			segs = append(segs, segment{restored: true, after: e.Pos.Delivery})
			continue
		}
		segs[len(segs)-1].applied = append(segs[len(segs)-1].applied, e)
	}
	for i := range segs {
		segs[i].applied = sortedApplied(segs[i].applied)
	}
	if len(segs) > 1 && len(segs[0].applied) == 0 {
		segs = segs[1:]
	}
	return segs
}

// Bad returns the messages some replica dropped as malformed.
func (h *History) Bad() []TraceEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.bad)
}

func sortedApplied(evs []TraceEvent) []TraceEvent {
	s := slices.Clone(evs)
	// Stable: a replica applies in position order, except writes that
	// waited for their object to be made here (New).
	slices.SortStableFunc(s, func(a, b TraceEvent) int {
		switch {
		case a.Pos.Less(b.Pos):
			return -1
		case b.Pos.Less(a.Pos):
			return 1
		}
		return 0
	})
	return s
}

// Agree checks that the replicas of members applied the same writes at
// the same positions and were left in the same states after each (the
// digests): every member's log is a prefix of the longest (a member that
// left or crashed stopped applying), and what a member applied after it
// restored a snapshot (it joined a running group: Config.Views) is a
// prefix of the longest's writes after the snapshot's place. It returns
// the member with the longest log from the start, the witness for Check.
func (h *History) Agree(members []frame.MemberID) (frame.MemberID, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ref []TraceEvent
	var refID frame.MemberID
	for _, m := range members {
		segs := segments(h.applied[m])
		if len(segs) == 1 && !segs[0].restored && len(segs[0].applied) > len(ref) {
			ref, refID = segs[0].applied, m
		}
	}
	if len(members) > 0 && refID == 0 {
		refID = members[0]
	}
	for _, m := range members {
		for _, seg := range segments(h.applied[m]) {
			start := 0
			if seg.restored {
				start = sort.Search(len(ref), func(i int) bool { return ref[i].Pos.Delivery > seg.after })
			}
			for i, e := range seg.applied {
				if start+i >= len(ref) {
					return refID, fmt.Errorf("member %d applied %v, beyond the longest log from the start (member %d's, %d writes)", m, e, refID, len(ref))
				}
				r := ref[start+i]
				if e.Pos != r.Pos || e.Object != r.Object || e.Origin != r.Origin || e.Req != r.Req || e.Writes != r.Writes {
					return refID, fmt.Errorf("write %d: member %d applied %v; member %d %v", start+i, m, e, refID, r)
				}
				if e.Digest != r.Digest {
					return refID, fmt.Errorf("write %d: replicas differ after it: member %d %v; member %d %v", start+i, m, e, refID, r)
				}
			}
		}
	}
	return refID, nil
}

// Check checks that the members' calls are sequentially consistent
// (Lamport): there is one order of all writes, respecting each member's
// program order, such that every write returned what it returns when
// applied in that order to the objects' initial states, and every read
// returned what the read gives on the state some prefix of that order
// leaves — a prefix that includes the member's own earlier writes, does
// not shrink from one of its calls to the next, and excludes its later
// writes. The order checked is member witness's (its replica's applied
// writes); Agree checks that the others applied the same. Each object is
// replayed from its initial state with its class's operations, so the
// checker trusts nothing the replicas computed.
func (h *History) Check(witness frame.MemberID, members []frame.MemberID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var order []TraceEvent
	if segs := segments(h.applied[witness]); len(segs) > 0 {
		order = segs[0].applied
	}
	type state struct {
		class  *classInfo
		cur    any
		states [][]byte // encoded after each of its writes, from 0 (the initial state)
		at     []int    // the order's index of each of its writes
	}
	objs := map[string]*state{}
	for _, name := range h.order {
		ev := h.news[name]
		if ev.Err != nil {
			return ev.Err
		}
		s := &state{class: ev.class, cur: ev.class.newState(), states: [][]byte{ev.Initial}}
		if err := ev.class.decodeState(ev.Initial, s.cur); err != nil {
			return fmt.Errorf("object %q: the initial state does not decode: %w", name, err)
		}
		objs[name] = s
	}
	type key struct {
		origin frame.MemberID
		req    uint32
	}
	index := map[key]int{}
	results := make([]any, len(order))
	for i, w := range order {
		s := objs[w.Object]
		if s == nil {
			return fmt.Errorf("member %d applied a write on %q, which no member made", witness, w.Object)
		}
		op := s.class.op(w.Op)
		if op == nil || !op.write {
			return fmt.Errorf("member %d applied %q.%s, not a write of class %s", witness, w.Object, w.Op, s.class.name)
		}
		k := key{w.Origin, w.Req}
		if j, dup := index[k]; dup {
			return fmt.Errorf("member %d applied member %d's write #%d twice (at %v and %v)", witness, w.Origin, w.Req, order[j].Pos, w.Pos)
		}
		index[k] = i
		if op.guard != nil && !op.guard(s.cur, w.Args) {
			return fmt.Errorf("order of member %d, write %d (%v): its guard does not hold on the state the writes before it leave", witness, i, w)
		}
		results[i] = op.apply(s.cur, w.Args)
		if !reflect.DeepEqual(results[i], w.Result) {
			return fmt.Errorf("order of member %d, write %d (%v): replayed, it returns %v", witness, i, w, results[i])
		}
		b, err := s.class.appendState(nil, s.cur)
		if err != nil {
			return fmt.Errorf("object %q: encoding the replayed state: %w", w.Object, err)
		}
		s.states = append(s.states, b)
		s.at = append(s.at, i)
	}
	// readAt evaluates a read on the state of s after its first c writes.
	readAt := func(s *state, op *opInfo, args any, c int) (any, bool) {
		st := s.class.newState()
		if err := s.class.decodeState(s.states[c], st); err != nil {
			return nil, false
		}
		if op.guard != nil && !op.guard(st, args) {
			return nil, false
		}
		return op.apply(st, args), true
	}
	for _, m := range members {
		calls := h.calls[m]
		low := 0 // the prefix this member has observed
		for ci, c := range calls {
			s := objs[c.Object]
			if s == nil {
				return fmt.Errorf("member %d called %q.%s, but no member made %q", m, c.Object, c.Op, c.Object)
			}
			op := s.class.op(c.Op)
			if op == nil {
				return fmt.Errorf("member %d called %q.%s: class %s has no such operation", m, c.Object, c.Op, s.class.name)
			}
			if c.Write {
				if c.Err != nil {
					continue // failed: not applied here, not returned
				}
				i, ok := index[key{m, c.Req}]
				if !ok {
					return fmt.Errorf("member %d's call %d, %v, returned but is not in member %d's order", m, ci, c, witness)
				}
				if i < low {
					return fmt.Errorf("member %d's call %d, %v, is write %d of the order, but the member had observed the first %d writes before calling it: not in program order",
						m, ci, c, i, low)
				}
				if !reflect.DeepEqual(results[i], c.Result) {
					return fmt.Errorf("member %d's call %d, %v: in the order it returns %v", m, ci, c, results[i])
				}
				low = i + 1
				continue
			}
			// A read: the state after some prefix [low, high] of the
			// order, high excluding the member's next write.
			high := len(order)
			for _, next := range calls[ci+1:] {
				if next.Write && next.Err == nil {
					if i, ok := index[key{m, next.Req}]; ok {
						high = i
					}
					break
				}
			}
			// c0 is the object's write count at prefix low.
			c0, _ := slices.BinarySearch(s.at, low)
			found := false
			var seen []string
			for cnt := c0; cnt < len(s.states) && (cnt == c0 || s.at[cnt-1] < high); cnt++ {
				r, ok := readAt(s, op, c.Args, cnt)
				if ok && reflect.DeepEqual(r, c.Result) {
					if cnt > c0 {
						low = s.at[cnt-1] + 1
					}
					found = true
					break
				}
				if len(seen) < 8 {
					seen = append(seen, fmt.Sprint(r))
				}
			}
			if !found {
				return fmt.Errorf("member %d's call %d, %v, is not sequentially consistent: no state of %q between writes %d and %d of member %d's order gives it (they give %s)",
					m, ci, c, c.Object, low, high, witness, strings.Join(seen, ", "))
			}
		}
	}
	return nil
}

// op returns the class's operation called name.
func (c *classInfo) op(name string) *opInfo {
	for _, o := range c.ops {
		if o.name == name {
			return o
		}
	}
	return nil
}
