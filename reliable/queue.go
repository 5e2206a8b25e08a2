package reliable

import (
	"sync"

	"github.com/rbcast/rbcast/frame"
)

// msgQueue holds delivered messages until Recv takes them. Each slot keeps
// its buffer across uses, so in steady state pushing copies but does not
// allocate. The event loop pushes, Recv callers pop.
type msgQueue struct {
	mu     sync.Mutex
	slots  []queued
	head   int
	n      int
	limit  int
	ready  chan struct{} // signalled when messages arrive or the queue closes
	room   chan struct{} // signalled when a pop leaves the queue below its limit
	closed bool
	err    error // returned once the queue is empty and closed
}

type queued struct {
	from frame.MemberID
	data []byte
}

func newMsgQueue(limit int) *msgQueue {
	return &msgQueue{slots: make([]queued, limit), limit: limit, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// full reports whether the loop should stop taking Data frames.
func (q *msgQueue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n >= q.limit
}

// pushLocked copies a message in; the queue may exceed its limit by what
// one batch of frames delivers, never drops. q.mu must be held.
func (q *msgQueue) pushLocked(from frame.MemberID, data []byte) {
	if q.n == len(q.slots) {
		grown := make([]queued, 2*len(q.slots))
		for i := range q.n {
			grown[i] = q.slots[(q.head+i)%len(q.slots)]
		}
		q.slots, q.head = grown, 0
	}
	s := &q.slots[(q.head+q.n)%len(q.slots)]
	s.from = from
	s.data = append(s.data[:0], data...)
	q.n++
}

func (q *msgQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop appends the oldest message to dst. ok is false when the queue is
// empty; err is set when it is also closed.
func (q *msgQueue) pop(dst []byte) (from frame.MemberID, data []byte, ok bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		if q.closed {
			return 0, dst, false, q.err
		}
		return 0, dst, false, nil
	}
	s := &q.slots[q.head]
	from, data = s.from, append(dst, s.data...)
	q.head = (q.head + 1) % len(q.slots)
	q.n--
	if q.n > 0 || q.closed {
		q.signal() // more for another waiting Recv
	}
	if q.n < q.limit {
		select {
		case q.room <- struct{}{}:
		default:
		}
	}
	return from, data, true, nil
}

func (q *msgQueue) close(err error) {
	q.mu.Lock()
	q.closed, q.err = true, err
	q.mu.Unlock()
	q.signal()
}
