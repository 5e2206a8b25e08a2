package daemon

import (
	"errors"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/internal/localapi"
)

// ringHook has the group's loop put its deliveries straight into the sole
// subscriber's deliver ring (reliable.RecvHook), copied once, with no
// hand-off to the fan-out's goroutine. The fan-out installs it only while
// it holds no delivery it has not yet written (fanout), and it takes a
// delivery only while the subscriber list is the one it was made for
// (gen), the ring has room, and the connection's write lock is free:
// anything else leaves the delivery to the queue and the fan-out, so the
// loop never waits for the client. It holds the write lock from the turn's
// first delivery it takes to the turn's Flush, which publishes them all.
type ringHook struct {
	d      *Daemon
	c      *conn
	from   uint16 // the subscriber's: localapi.AllMembers, or one sender
	gen    uint64 // Daemon.subsGen when it was made
	locked bool   // it holds c.wmu (the turn's goroutine only: RecvHook)
	n      uint32 // deliveries taken since the last Flush
}

// serves reports whether the hook is the one for s in the list of
// generation gen.
func (h *ringHook) serves(s *subscriber, gen uint64) bool {
	return h.c == s.c && h.from == s.from && h.gen == gen
}

// Take puts one delivery into the ring (committed only if the subscriber
// wants its sender's), or refuses it.
func (h *ringHook) Take(from frame.MemberID, data []byte) bool {
	c := h.c
	if !h.locked {
		if !c.wmu.TryLock() {
			h.d.hookLeft.Add(1)
			return false
		}
		h.locked = true
	}
	r := c.rings.deliver
	if r == nil || c.ringFailed.Load() || h.d.subsGen.Load() != h.gen {
		h.Flush()
		h.d.hookLeft.Add(1)
		return false
	}
	var err error
	c.slot, err = r.Reserve(c.slot, len(data), 1)
	if err != nil {
		switch {
		case errors.Is(err, localapi.ErrRecordTooLarge):
			c.ringTooSmall(err)
		case !errors.Is(err, localapi.ErrRingFull):
			c.closeAsync()
		}
		h.Flush() // full: the fan-out waits for room, holding nothing of the loop's
		h.d.hookLeft.Add(1)
		return false
	}
	hops.At(hops.FanoutRecv, 2)
	if h.from == localapi.AllMembers || h.from == uint16(from) {
		copy(c.slot[0], data)
		r.Commit(uint16(from), len(data))
	}
	h.n++
	return true
}

// Flush publishes what Take put into the ring, rings the client if it
// sleeps, and lets go of the write lock.
func (h *ringHook) Flush() {
	if !h.locked {
		return
	}
	c := h.c
	if c.rings.deliver != nil {
		if err := c.publishDeliverNoWait(); err != nil {
			c.closeAsync()
		}
	}
	if h.n > 0 {
		h.d.hookTook.Add(uint64(h.n))
		hops.At(hops.FanoutWrote, h.n)
		h.n = 0
	}
	h.locked = false
	c.wmu.Unlock()
}
