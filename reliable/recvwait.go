package reliable

import (
	"context"
	"errors"

	"github.com/rbcast/rbcast/frame"
)

// RecvHook takes delivered messages on the group's loop goroutine, before
// the receive queue: a reader with memory of its own (a ring shared with
// another process) gets each message copied once, as the loop delivers
// it, without a hand-off to a goroutine of its own (Group.SetRecvHook).
type RecvHook interface {
	// Take is offered each delivered message while the receive queue is
	// empty, on the goroutine that carries out the turn: the loop's, or a
	// Send's that carries out its own turn while the loop's turns wait
	// (sendNow: under Order Total the sequencer delivers its own message
	// there); data is valid during the call only. It returns whether it
	// took the message: false leaves it, and every message after it until
	// the queue is empty again, to the queue (Recv, RecvAppend, WaitRecv),
	// so that the order holds. Take must not wait (the protocol waits with
	// it) nor call the Group's methods.
	Take(from frame.MemberID, data []byte) bool
	// Flush ends a turn's deliveries when Take took some: it is called
	// after the turn's last delivery (before its events), or before
	// another hook is offered a message.
	Flush()
}

// SetRecvHook has h take the deliveries offered while the receive queue
// is empty (nil: none, the queue has them all). A message the queue holds
// already is never offered, so a reader that takes the queue's messages
// and hands them on the way h does keeps the group's order, if it makes
// sure h takes nothing while it holds one the queue gave it and has not
// yet handed on (remove the hook first, or have h refuse meanwhile).
// Without effect when Config.Deliver is set.
func (g *Group) SetRecvHook(h RecvHook) {
	g.queue.mu.Lock()
	g.queue.hook = h
	g.queue.mu.Unlock()
}

// WaitRecv waits until a message waits, and takes nothing; it returns
// the stream's end (what Recv returns once everything was received) when
// nothing more will come, or ctx's error when it is done first. A reader that receives into memory of its own
// making (a ring's next record, reserved only once something waits) waits
// here, and then takes every message that waits in one go.
func (g *Group) WaitRecv(ctx context.Context) error {
	if g.cfg.Deliver != nil {
		return errors.New("reliable: WaitRecv is not available when Config.Deliver is set")
	}
	for {
		if ok, err := g.queue.available(); ok || err != nil {
			return err
		}
		if !g.queue.startWait() {
			continue
		}
		select {
		case <-g.queue.ready:
		case <-ctx.Done():
			g.queue.endWait()
			return ctx.Err()
		}
		g.queue.endWait()
	}
}

// available reports whether a message waits, or else the closed queue's
// error (ErrClosed if it has none).
func (q *msgQueue) available() (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.n > 0:
		return true, nil
	case q.closed && q.err != nil:
		return false, q.err
	case q.closed:
		return false, ErrClosed
	}
	return false, nil
}
