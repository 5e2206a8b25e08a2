package reliable

import (
	"context"
	"errors"
)

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
