package reliable

import (
	"sync"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// msgQueue holds delivered messages until Recv takes them. A popped
// message's buffer goes to spare and the next push copies into it, so
// the queue allocates a buffer only when more messages are queued than
// ever before (not per slot: a ring that grew past its limit has slots
// no message ever had, and the ring reaches each of them in turn), and in
// steady state pushing copies but does not allocate. The event loop
// pushes, Recv callers pop.
//
// A large message may instead be queued as a view (pushViewLocked): the
// bytes stay where the engine delivered them from (the link's ring, or
// the core's buffer of an out-of-order frame), and Recv copies them
// straight to the caller, once instead of twice. Views are valid only
// until the loop Advances the core, so before that the loop calls
// settle: it gives a reader that is taking messages a moment to take the
// views, then copies whatever views are left into the slots' buffers.
type msgQueue struct {
	mu     sync.Mutex
	slots  []queued
	spare  [][]byte // buffers of popped messages, for the next pushes
	head   int
	n      int
	limit  int
	ready  chan struct{} // signalled, when a Recv waits, as messages arrive or the queue closes
	room   chan struct{} // signalled, when the loop waits for room, as a pop leaves the queue below its limit
	closed bool
	err    error // returned once the queue is empty and closed

	views   int           // queued messages held as views
	drained chan struct{} // signalled when a pop takes the last view
	popped  bool          // a message was popped since the last settle
	waiting int           // Recv callers waiting for a message
	roomIn  bool          // the loop waits for room (waitRoom)
	timer   *time.Timer   // settle's bound (the loop's own)
}

type queued struct {
	from frame.MemberID
	data []byte
	view []byte // the message, when held as a view (data unused)
}

// viewMin is the smallest message queued as a view: below it the copy
// costs less than handing the views over.
const viewMin = 1024

// settleWait bounds how long settle waits for a reader to take the views
// (a variable for benchmarks: RBCAST_BENCH_SETTLE). The wait ends as soon
// as the reader has taken them; the bound only matters when the reader is
// descheduled mid-way, and then holds the loop's Advance (frames wait in
// the ring, acknowledgements leave up to that much later). 1 ms: shorter
// bounds gave back part of the CPU the views save, 3 ms saved no more
// (BenchmarkGoodput, MTU 9000; docs/benchmarks-history.md, "Measurements
// formerly in code comments").
var settleWait = time.Millisecond

func newMsgQueue(limit int) *msgQueue {
	return &msgQueue{slots: make([]queued, limit), spare: make([][]byte, 0, limit), limit: limit, ready: make(chan struct{}, 1), room: make(chan struct{}, 1),
		drained: make(chan struct{}, 1)}
}

// full reports whether the loop should stop taking Data frames.
func (q *msgQueue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n >= q.limit
}

// len is the number of messages queued.
func (q *msgQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
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
	if k := len(q.spare) - 1; s.data == nil && k >= 0 {
		s.data, q.spare = q.spare[k], q.spare[:k]
	}
	s.data = append(s.data[:0], data...)
	q.n++
}

// pushViewLocked queues a message without copying it: data must stay
// valid until the next settle. q.mu must be held.
func (q *msgQueue) pushViewLocked(from frame.MemberID, data []byte) {
	q.pushLocked(from, nil)
	q.slots[(q.head+q.n-1)%len(q.slots)].view = data
	q.views++
}

// settle ends the views' life: if a reader is taking messages (one popped
// since the last settle, or one waits), it waits up to settleWait for the
// views to be taken, then copies the ones left into their slots. The
// event loop calls it before it receives or steps again.
func (q *msgQueue) settle() {
	q.mu.Lock()
	if q.views == 0 {
		q.popped = false
		q.mu.Unlock()
		return
	}
	active := q.popped || q.waiting > 0
	q.popped = false
	select {
	case <-q.drained: // stale
	default:
	}
	q.mu.Unlock()
	if active {
		if q.timer == nil {
			q.timer = time.NewTimer(settleWait)
		} else {
			q.timer.Reset(settleWait)
		}
		select {
		case <-q.drained:
		case <-q.timer.C:
		}
		q.timer.Stop()
	}
	q.mu.Lock()
	q.detachLocked()
	q.mu.Unlock()
}

// detachLocked copies every view still queued into its slot's buffer.
func (q *msgQueue) detachLocked() {
	for i := 0; q.views > 0 && i < q.n; i++ {
		s := &q.slots[(q.head+i)%len(q.slots)]
		if s.view != nil {
			s.data = append(s.data[:0], s.view...)
			s.view = nil
			q.views--
		}
	}
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
	from, data, ok, _, err = q.popFreed(dst)
	return from, data, ok, err
}

// popFreed is pop that also says whether this pop took the queue below
// its limit (it was full before).
func (q *msgQueue) popFreed(dst []byte) (from frame.MemberID, data []byte, ok, freed bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		if q.closed {
			if q.waiting > 0 {
				q.signal() // close's one signal woke us: wake the next
			}
			return 0, dst, false, false, q.err
		}
		return 0, dst, false, false, nil
	}
	s := &q.slots[q.head]
	if s.view != nil {
		from, data = s.from, append(dst, s.view...)
		s.view = nil
		if q.views--; q.views == 0 {
			select {
			case q.drained <- struct{}{}:
			default:
			}
		}
	} else {
		from, data = s.from, append(dst, s.data...)
	}
	if s.data != nil {
		q.spare, s.data = append(q.spare, s.data[:0]), nil
	}
	q.popped = true
	q.head = (q.head + 1) % len(q.slots)
	q.n--
	if (q.n > 0 || q.closed) && q.waiting > 0 {
		q.signal() // more for another waiting Recv
	}
	if q.n < q.limit && q.roomIn {
		select {
		case q.room <- struct{}{}:
		default:
		}
	}
	return from, data, true, q.n == q.limit-1, nil
}

// startWait counts a Recv caller as waiting for a message, unless one
// arrived (or the queue closed) since its pop found it empty (false: pop
// again). The check and the count are one step under q.mu, as the
// pushes' and pops' look at the count is: a message pushed between an
// empty pop and the wait then signals ready, instead of finding no one
// waiting and leaving the caller asleep beside it.
func (q *msgQueue) startWait() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n > 0 || q.closed {
		return false
	}
	q.waiting++
	return true
}

// endWait ends a wait that startWait began.
func (q *msgQueue) endWait() {
	q.mu.Lock()
	q.waiting--
	q.mu.Unlock()
}

// startRoomWait has pops signal room while the loop waits for it, unless
// the queue is below its limit already (false: no wait).
func (q *msgQueue) startRoomWait() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n < q.limit || q.closed {
		return false
	}
	q.roomIn = true
	return true
}

// endRoomWait ends a wait that startRoomWait began.
func (q *msgQueue) endRoomWait() {
	q.mu.Lock()
	q.roomIn = false
	q.mu.Unlock()
}

func (q *msgQueue) close(err error) {
	q.mu.Lock()
	q.closed, q.err = true, err
	q.mu.Unlock()
	q.signal()
}
