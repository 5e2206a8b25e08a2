package orca

import "sync/atomic"

// callTable is a node's calls in flight, by request number. Requests are
// numbered in sequence and mostly finish in that order, so a call sits in
// a ring slot chosen by its number (req modulo callRing): putting,
// finding and removing one is an index and a compare, where a map hashes
// (docs/orca-history.md, "A replica's work per delivery", has the measurement).
//
// The slots are atomic so that a caller registers its call without the
// node's lock, which the replica holds while it applies a delivery
// (docs/orca-history.md, "The caller's work"): a compare-and-swap into a free
// slot. A call whose slot is taken (by a guarded write that waits long,
// or with more than callRing calls in flight) goes to the overflow map,
// more, under the node's lock. Everything but tryPut and tryRemove runs
// with n.mu held.
type callTable struct {
	ring [callRing]atomic.Pointer[call]
	more map[uint32]*call // n.mu
}

// callRing is the ring's length, a power of two: three times the
// writes a member has in flight when 64-byte writes fill the total
// order's default send window (65 batches of 21: 1365), which a caller
// that wants the order's message rate keeps in flight (docs/orca.md,
// "Batches"); deeper pipelines, and guarded writes that wait long, use
// the overflow map.
const callRing = 4096

func (t *callTable) slot(req uint32) *atomic.Pointer[call] { return &t.ring[req&(callRing-1)] }

// tryPut adds c, by c.req (not in the table yet), if its ring slot is
// free: without n.mu. Else putLocked adds it, with n.mu.
func (t *callTable) tryPut(c *call) bool { return t.slot(c.req).CompareAndSwap(nil, c) }

// putLocked adds c (n.mu held).
func (t *callTable) putLocked(c *call) {
	if !t.tryPut(c) {
		t.overflow(c)
	}
}

func (t *callTable) overflow(c *call) {
	if t.more == nil {
		t.more = map[uint32]*call{}
	}
	t.more[c.req] = c
}

// get returns the call of request req, or nil (n.mu held).
func (t *callTable) get(req uint32) *call {
	if c := t.slot(req).Load(); c != nil && c.req == req {
		return c
	}
	if t.more != nil {
		return t.more[req]
	}
	return nil
}

// tryRemove takes c out if it is in its ring slot: without n.mu. Else
// remove takes it out, with n.mu.
func (t *callTable) tryRemove(c *call) bool { return t.slot(c.req).CompareAndSwap(c, nil) }

// remove takes c out, if it is there (n.mu held).
func (t *callTable) remove(c *call) {
	if !t.tryRemove(c) && t.more[c.req] == c {
		delete(t.more, c.req)
	}
}

// all calls f with every call in the table (n.mu held). A call put
// during it, without n.mu, may or may not be among them.
func (t *callTable) all(f func(*call)) {
	for i := range t.ring {
		if c := t.ring[i].Load(); c != nil {
			f(c)
		}
	}
	for _, c := range t.more {
		f(c)
	}
}

// size counts the calls in the table (n.mu held; tests).
func (t *callTable) size() int {
	k := len(t.more)
	for i := range t.ring {
		if t.ring[i].Load() != nil {
			k++
		}
	}
	return k
}
