package orca

// callTable is a node's calls in flight, by request number (n.mu held).
// Requests are numbered in sequence and mostly finish in that order, so a
// call sits in a ring slot chosen by its number (req modulo the ring's
// length, a power of two): putting, finding and removing one is an index
// and a compare, where a map hashes (docs/orca.md, "A replica's work per
// delivery", has the measurement). A call whose slot a later request
// needs while it still waits (a guarded write that waits long) moves to
// the overflow map, more; so does one that a grown ring has no slot for.
// The ring doubles when a request finds its slot taken while at least
// half the ring is in use: it has at most four slots a call in flight at
// the busiest (at least minCallRing), and never shrinks.
type callTable struct {
	ring  []*call
	more  map[uint32]*call
	count int // calls in ring and more
}

// minCallRing is a ring's first length.
const minCallRing = 64

func (t *callTable) slot(req uint32) *(*call) { return &t.ring[req&uint32(len(t.ring)-1)] }

// put adds c, by c.req (not in the table yet).
func (t *callTable) put(c *call) {
	if t.ring == nil {
		t.ring = make([]*call, minCallRing)
	}
	s := t.slot(c.req)
	if *s != nil && t.count >= len(t.ring)/2 {
		t.grow()
		s = t.slot(c.req)
	}
	if old := *s; old != nil {
		t.overflow(old)
	}
	*s = c
	t.count++
}

// grow doubles the ring.
func (t *callTable) grow() {
	old := t.ring
	t.ring = make([]*call, 2*len(old))
	for _, c := range old {
		if c == nil {
			continue
		}
		s := t.slot(c.req)
		if *s != nil {
			t.overflow(c)
			continue
		}
		*s = c
	}
}

func (t *callTable) overflow(c *call) {
	if t.more == nil {
		t.more = map[uint32]*call{}
	}
	t.more[c.req] = c
}

// get returns the call of request req, or nil.
func (t *callTable) get(req uint32) *call {
	if t.ring != nil {
		if c := *t.slot(req); c != nil && c.req == req {
			return c
		}
	}
	if t.more != nil {
		return t.more[req]
	}
	return nil
}

// remove takes the call of request req out, if it is there.
func (t *callTable) remove(req uint32) {
	if t.ring != nil {
		if s := t.slot(req); *s != nil && (*s).req == req {
			*s = nil
			t.count--
			return
		}
	}
	if _, ok := t.more[req]; ok {
		delete(t.more, req)
		t.count--
	}
}

// all calls f with every call in the table.
func (t *callTable) all(f func(*call)) {
	for _, c := range t.ring {
		if c != nil {
			f(c)
		}
	}
	for _, c := range t.more {
		f(c)
	}
}
