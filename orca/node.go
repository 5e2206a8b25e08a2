package orca

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// DefaultMaxWrite is the largest write message (header and encoded
// arguments) when Config.MaxWrite is 0: 1 MiB, sent in parts of at most
// MaxMessage bytes.
const DefaultMaxWrite = 1 << 20

// ErrClosed is returned by operations once the node is closed (or its
// group stopped).
var ErrClosed = errors.New("orca: node closed")

// ErrCancelled is wrapped, with the context's error, by a guarded write
// that was cancelled before its guard held.
var ErrCancelled = errors.New("orca: guarded write cancelled")

// Config configures a Node.
type Config struct {
	// Group configures the reliable group under the node (Join; the
	// simulator uses its protocol fields only). Order is set to
	// reliable.Total; Deliver and OnEvent must be nil: the node sets them.
	Group reliable.Config
	// MaxWrite bounds a write's message (and what a replica reassembles
	// from parts); 0 means DefaultMaxWrite. Every member must use the
	// same value.
	MaxWrite int
	// Check turns on the determinism check: every replica digests an
	// object's state after each write, and the writer broadcasts its
	// digest after its write returns; a replica whose digest differs
	// stops with a *DivergedError. It costs a state encoding per write
	// per replica and a message per write.
	Check bool
	// Trace, when set, is called with every operation that returns to a
	// caller here and every write applied here, with the node's lock
	// held: it must not call the node. For tests (History) and debugging.
	Trace func(TraceEvent)
	// Views runs the node over a group whose membership changes
	// (reliable's Config.Views, with Order Total: the Agreed level; set
	// Group.Safe for Safe): processes join the running group, leave,
	// fail and restart, and one that joins gets the objects' state from
	// a member that has it (docs/orca.md, "State transfer"). Rank and
	// Size then follow the view.
	Views bool
}

// Node is one member's Orca runtime: its replicas of the shared objects
// and its end of the group's total order. Its methods and the operations
// on its objects are safe for concurrent use.
type Node struct {
	mu  sync.Mutex // guards the replica (objects' pending writes, early, parts, calls) and the fields below
	env Env
	cfg Config
	// trace is cfg.Trace (nil: tracing off).
	trace    func(TraceEvent)
	maxWrite int

	self       frame.MemberID
	members    []frame.MemberID
	rank       int
	maxMessage int
	started    bool

	objects map[uint32]*object
	// last is the object the last write went to: a batch's writes
	// mostly go to one.
	last *object
	// delivering is set while deliverNow applies a delivery: finish
	// and applied then queue the wake-ups of waiting callers and guarded
	// reads (queueWake), which deliverNow sends once it let go of n.mu
	// and the object's lock. The first goes in wake1 and the others in
	// wakes, a slice kept for the next delivery: a delivery with one
	// wake-up (a lone write) sends it and is done, without taking n.mu
	// again to give the slice back.
	delivering bool
	wake1      wakeUp
	wakes      []wakeUp
	// locked is the object whose lock the replica holds while it applies
	// a delivery's writes (lockObject), nil between deliveries.
	locked *object
	// early holds messages for objects not made here yet, by object id,
	// in their order.
	early map[uint32][]earlyMsg
	// parts reassembles each member's message sent in parts.
	parts map[frame.MemberID][]byte
	// delivered counts the messages delivered here: a message's position
	// in the order.
	delivered uint64
	calls     callTable
	// lastReq is each member's last request number seen in the order, by
	// member id (0: none yet): a member that restarts continues after its
	// earlier run's. (A slice: every write updates it.)
	lastReq []uint32

	// State transfer (Config.Views; transfer.go). view is the view
	// installed last, key this member's run in it; hasState: the
	// replica holds the objects' state (founding view, static group, or
	// restored); awaiting: it joined and waits for it, holding back the
	// messages delivered (held) and collecting its state's parts
	// (stateBuf); firstView the members of the view it joined in.
	// needState are the members that joined and have no state yet;
	// snapObjects the restored objects not made here yet (New takes
	// them). stateWake is closed when hasState or err is set.
	view        *reliable.ViewInfo
	key         memberKey
	hasState    bool
	awaiting    bool
	held        []heldMsg
	stateBuf    []byte
	firstView   map[memberKey]bool
	needState   map[memberKey]bool
	snapObjects map[uint32]*snapObject
	stateWake   chan struct{}

	closed bool  // Close was called
	left   bool  // the leave is done (Host.OnEvent)
	err    error // why the node stopped working, once it has
	stats  Stats

	// sendMu orders this member's sends: a write's parts go out
	// together, and a batch before anything sent after it.
	sendMu  sync.Mutex
	sendBuf []byte
	// out coalesces writes while one of this member's messages is in
	// flight (batch.go), on an Env that can send from Deliver (try, nil
	// otherwise).
	out    outbox
	try    func(msg []byte) error
	failed atomic.Bool // err is set (read without mu on the read path)
	// writable: usable would say nil (the write path's check without mu).
	writable atomic.Bool
	// nextReq counts the request numbers taken, without mu (on a cache
	// line of its own, away from what the event loop writes): a write's
	// is its low 32 bits. Every write called here takes one; Restore may
	// skip some (reqSkipped, mu), so Stats.Writes is their difference.
	_          [64]byte
	nextReq    atomic.Uint64
	_          [64]byte
	reqSkipped uint64
	// sent counts what send sent (Stats), without mu.
	sent struct{ messages, bytes, parts, batches, batched atomic.Uint64 }

	// testDeliver, when set (tests only: export_test.go), takes every
	// delivery instead of the replica and may drop, delay or reorder it
	// before handing it on: a deliberately broken replica.
	testDeliver func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte))
}

// call is a write of this member, from its start until its caller has
// its outcome: in n.calls, by request number, until the replica is done
// with it. It is part of the caller's Pending (out), where the replica
// puts the result; a Call's is reused by the next.
type call struct {
	n   *Node
	obj *object
	op  *opInfo
	out any // the *Pending[R] holding the call
	req uint32
	// state holds callDone, set with n.mu held when the write was applied
	// (its result in out), failed (err) or cancelled, and the replica
	// took the call off n.calls: the fields below are the caller's from
	// then on (Ready reads it without the lock); and callWaiting, set by
	// Wake before its waiter looks at callDone: the replica sends into
	// wake only when it finds callWaiting set as it sets callDone (a call
	// kept for reuse has a wake whether or not its waiter waits for this
	// write). One word, so that each side's read of the other's bit is
	// the same atomic operation as its own write. reset clears both.
	state     atomic.Uint32
	cancelled bool
	err       error
	// writes and digest: the object's write count and state digest after
	// the write (Config.Check). args and result are boxed for the trace
	// only (Config.Trace).
	writes, digest uint64
	args, result   any
	// wake, made when a waiter first asks for it (and kept with the call
	// when it is reused), receives a value after done is set or the node
	// fails; a waiter whose call is done already gets closedChan. The
	// replica's last touch of a finished call is that send, which may
	// come after its caller went on: a call reused may find a stale value
	// there, a spurious wake-up (its waiter checks Ready again).
	wake chan struct{}
}

// The bits of call.state.
const (
	callDone = 1 << iota
	callWaiting
)

// isDone reports whether the replica is done with c.
func (c *call) isDone() bool { return c.state.Load()&callDone != 0 }

// Stats are a node's counters.
type Stats struct {
	// Objects made here.
	Objects int
	// Writes is the write operations called here (reads are not
	// counted: they cost a lock and the operation only); Applied is the
	// writes applied by this replica (every member's).
	Writes, Applied uint64
	// Pending is the guarded writes queued here now (every member's);
	// Cancelled the guarded writes cancelled before they ran.
	Pending   int
	Cancelled uint64
	// Early is the messages waiting for an object not made here yet.
	Early int
	// Messages and Bytes are what this node sent (parts count singly),
	// Parts the messages that were parts of a longer one. Batches are
	// the messages that carried several writes (or cancellations and
	// digests) of this member together, Batched what they carried.
	Messages, Bytes, Parts uint64
	Batches, Batched       uint64
	// BadMessages are messages dropped as malformed, or naming an
	// operation the class does not have.
	BadMessages uint64
	// DigestsChecked counts peers' digests compared with this replica's
	// (Config.Check); DigestsUnchecked those that came after this replica
	// no longer had its own for that write.
	DigestsChecked, DigestsUnchecked uint64
	// StateSent counts the views at which this member sent the objects'
	// state to members that joined; StateReceived is the size of the
	// state this member restored when it joined (Config.Views).
	StateSent, StateReceived uint64
	// StateReceiving is the bytes of the state received so far while
	// this member waits for the rest (0 before the first part and once
	// restored).
	StateReceiving int
	// Group is the reliable layer's counters.
	Group reliable.Stats
}

func newNode(env Env, cfg Config) *Node {
	n := &Node{env: env, cfg: cfg, trace: cfg.Trace, maxWrite: cfg.MaxWrite,
		objects: map[uint32]*object{}, early: map[uint32][]earlyMsg{}, parts: map[frame.MemberID][]byte{},
		needState: map[memberKey]bool{}}
	if n.maxWrite <= 0 {
		n.maxWrite = DefaultMaxWrite
	}
	if t, ok := env.(TrySender); ok {
		n.try = t.TrySend
	}
	return n
}

// start sets the group once it is known (with n.mu held): deliveries that
// arrived before wait for n.mu and come after.
func (n *Node) start(self frame.MemberID, members []frame.MemberID, maxMessage int) error {
	if maxMessage < opHeaderLen+partOverhead {
		return fmt.Errorf("orca: the group carries messages of %d bytes, too few for a write's %d-byte header", maxMessage, opHeaderLen)
	}
	if maxMessage < stateHeaderLen+1 {
		return fmt.Errorf("orca: the group carries messages of %d bytes, too few for a state part's %d-byte header", maxMessage, stateHeaderLen)
	}
	n.maxMessage = maxMessage
	n.started = true
	defer n.updateWritable()
	if n.cfg.Views {
		// Self, members and the state come with the first view.
		return nil
	}
	n.self = self
	n.members = slices.Sorted(slices.Values(members))
	n.rank = slices.Index(n.members, self)
	if n.rank < 0 {
		n.started = false
		return fmt.Errorf("orca: member %d is not among the members %v", self, n.members)
	}
	n.haveState()
	return nil
}

func (n *Node) Self() frame.MemberID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.self
}

// Rank is this member's index, 0..Size()-1, in the order of member ids.
// In a static group it never changes (rank 0 is the first sequencer).
// Under Config.Views it is the index in the view installed last, so it
// changes when a member with a lower id joins or goes: a program that
// divides work by rank reads Rank and Size once, after Join, and keeps
// them (as TSP and ASP do), or divides work through a shared object.
func (n *Node) Rank() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rank
}

// Size is the number of members: those the group started with in a
// static group, those of the view installed last under Config.Views.
func (n *Node) Size() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.members)
}

// Self is this member's id in the group (under Config.Views, in the view
// installed last).

// MaxMessage is the largest message the group carries in one frame: a
// write's message longer than it goes in parts.
func (n *Node) MaxMessage() int { return n.maxMessage }

// Err says why the node stopped working (nil while it works).
func (n *Node) Err() error {
	if !n.failed.Load() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	s := n.stats
	s.Objects = len(n.objects)
	s.Pending = 0
	for _, o := range n.objects {
		s.Pending += len(o.pending)
	}
	for _, e := range n.early {
		s.Early += len(e)
	}
	s.StateReceiving = len(n.stateBuf)
	s.Writes = n.nextReq.Load() - n.reqSkipped
	n.mu.Unlock()
	s.Messages, s.Bytes, s.Parts = n.sent.messages.Load(), n.sent.bytes.Load(), n.sent.parts.Load()
	s.Batches, s.Batched = n.sent.batches.Load(), n.sent.batched.Load()
	s.Group = n.env.GroupStats()
	return s
}

// Close sends this member's batch, if it has one, and leaves the group
// once every live member holds what this member sent (Env.Leave; bounded
// by the group's CloseTimeout), then cleanly (reliable.Group.Close).
// Operations called after it, or waiting when the group stops, fail with
// ErrClosed.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.updateWritable()
	n.mu.Unlock()
	n.flushQueued()
	err := n.env.Leave()
	n.mu.Lock()
	n.failLocked(ErrClosed)
	n.mu.Unlock()
	return err
}

// usable says why the node cannot run an operation (n.mu held).
func (n *Node) usable() error {
	switch {
	case n.err != nil:
		return n.err
	case n.closed:
		return ErrClosed
	case !n.started:
		return errors.New("orca: node not started (Host.Start)")
	case !n.hasState:
		return errors.New("orca: the node does not hold the objects' state yet (WaitState)")
	}
	return nil
}

// updateWritable sets writable after a field usable reads changed (n.mu
// held).
func (n *Node) updateWritable() { n.writable.Store(n.usable() == nil) }

// failLocked stops the node with err (n.mu held); waiting calls return.
func (n *Node) failLocked(err error) {
	if n.err != nil {
		return
	}
	n.err = err
	n.failed.Store(true)
	n.writable.Store(false)
	if n.stateWake != nil {
		close(n.stateWake)
		n.stateWake = nil
	}
	n.calls.all((*call).wakeUp)
	for _, o := range n.objects {
		o.changedLocked()
	}
}

// finish completes c (n.mu held): the replica is done with it. Its
// waiter, if it waits, is woken at once, or after the delivery being
// applied (deliverNow).
func (c *call) finish() {
	n := c.n
	n.calls.remove(c)
	// Read before callDone is set: from then on the waiter may return and
	// reuse c (its Pending comes from the Op's pool, which every node of
	// the process shares) and make c.wake under another node's lock.
	w := c.wake
	if c.state.Or(callDone)&callWaiting == 0 || w == nil {
		return
	}
	if n.delivering {
		n.queueWake(wakeUp{ch: w})
		return
	}
	wakeChan(w)
}

// queueWake queues a wake-up for the end of the delivery (n.mu held).
func (n *Node) queueWake(w wakeUp) {
	if n.wake1.ch == nil {
		n.wake1 = w
		return
	}
	n.wakes = append(n.wakes, w)
}

// send sends the wake-up.
func (w wakeUp) send() {
	if w.close {
		close(w.ch)
	} else {
		wakeChan(w.ch)
	}
}

// wakeUp wakes c's waiter, if it waits (n.mu held).
func (c *call) wakeUp() {
	if c.wake != nil {
		wakeChan(c.wake)
	}
}

// wakeUp is a wake-up deferred to a delivery's end: a value into a
// call's channel, or (close) an object's changed channel closed.
type wakeUp struct {
	ch    chan struct{}
	close bool
}

// wakeChan puts a wake-up in a waiter's channel, unless one is there.
func wakeChan(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// reset readies a call for reuse (nothing refers to it: it is off
// n.calls, and its waiter returned).
func (c *call) reset() {
	if c.wake != nil {
		select {
		case <-c.wake:
		default:
		}
	}
	c.state.Store(0)
	c.cancelled, c.err = false, nil
	c.args, c.result = nil, nil
}

// closedChan is the wake of a call that is ready already.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// A call is the Waiter of its caller: it waits for the write's
// application here.

func (c *call) Ready() bool {
	return c.isDone() || c.n.failed.Load()
}

func (c *call) Wake() <-chan struct{} {
	if c.Ready() {
		return closedChan
	}
	// Only the waiter makes c.wake (under n.mu, where the replica reads
	// it), so it may read it without the lock; once made, every wakeUp of
	// the call finds it.
	if w := c.wake; w != nil {
		if c.state.Or(callWaiting)&callDone != 0 {
			return closedChan // done since the check above
		}
		return w
	}
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.state.Or(callWaiting)
	c.wake = make(chan struct{}, 1)
	if c.Ready() {
		c.wake <- struct{}{} // it became ready since the check above
	}
	return c.wake
}

func (c *call) String() string {
	return fmt.Sprintf("waiting for %v on %q to be applied", c.op, c.obj.name)
}

// newObject makes the replica of object name (see New).
func (n *Node) newObject(name string, c *classInfo, state any) (*object, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.usable(); err != nil {
		return nil, err
	}
	id := objectID(name)
	if o := n.objects[id]; o != nil {
		if o.name == name {
			return nil, fmt.Errorf("orca: object %q made twice", name)
		}
		return nil, fmt.Errorf("orca: objects %q and %q have the same id %#x (FNV-1a of the name): rename one", o.name, name, id)
	}
	o := &object{id: id, name: name, class: c, state: state}
	if so := n.snapObjects[id]; so != nil {
		// Restored by a state transfer before it was made here.
		state, pending, err := so.objectOf(o)
		if err != nil {
			return nil, err
		}
		o.install(so, state, pending)
		delete(n.snapObjects, id)
	}
	n.objects[id] = o
	if n.trace != nil {
		n.traceNew(o)
	}
	// Writes that came before: applied now, in their order and places.
	early := n.early[id]
	delete(n.early, id)
	for _, m := range early {
		n.handle(m.from, m.msg, m.pos)
	}
	n.unlockObject()
	return o, nil
}

// startWrite registers a write's call c (its node, object, operation
// and Pending set) and broadcasts its message msg. It takes the node's
// lock only when the node is not usable or c's slot in the calls is
// taken: the replica holds it while it applies a delivery.
func (n *Node) startWrite(ctx context.Context, c *call, msg []byte) error {
	o, op := c.obj, c.op
	if len(msg) > n.maxWrite {
		return fmt.Errorf("orca: %v on %q: the write's message is %d bytes, more than MaxWrite (%d)", op, o.name, len(msg), n.maxWrite)
	}
	if !n.writable.Load() {
		n.mu.Lock()
		err := n.usable()
		n.mu.Unlock()
		if err != nil {
			return err
		}
	}
	// A node that fails from here on wakes its calls without this one
	// (failLocked), which then finds the node failed when it waits.
	req := uint32(n.nextReq.Add(1))
	setRequest(msg, req)
	c.req = req
	if !n.calls.tryPut(c) {
		n.mu.Lock()
		n.calls.putLocked(c)
		n.mu.Unlock()
	}

	if err := n.send(ctx, msg); err != nil {
		if !n.calls.tryRemove(c) {
			n.mu.Lock()
			n.calls.remove(c)
			n.mu.Unlock()
		}
		return fmt.Errorf("orca: %v on %q: sending: %w", op, o.name, err)
	}
	return nil
}

// await waits for a write started by startWrite to be applied here; its
// result is in the call's Pending then.
func (n *Node) await(ctx context.Context, c *call) error {
	o, op, req := c.obj, c.op, c.req
	err := n.env.Wait(ctx, c)
	if err != nil && ctx.Err() != nil && n.Err() == nil {
		// ctx ended first. A guarded write may wait forever: cancel it
		// through the order, where every replica sees the cancellation
		// in the same place; an unguarded one is applied in its place
		// anyway. Either way its fate is known after one more wait.
		if op.guard != nil {
			if serr := n.send(context.Background(), appendCancel(nil, o.id, req)); serr != nil {
				n.mu.Lock()
				n.failLocked(fmt.Errorf("orca: sending a cancellation: %w", serr))
				n.mu.Unlock()
			}
		}
		err = n.env.Wait(context.Background(), c)
	}
	if !c.isDone() {
		n.mu.Lock()
		if !c.isDone() {
			// The node failed first: the call is still registered.
			n.calls.remove(c)
			if n.err != nil {
				err = n.err
			}
			n.mu.Unlock()
			return fmt.Errorf("orca: %v on %q: %w", op, o.name, err)
		}
		n.mu.Unlock()
	}
	if c.cancelled {
		return fmt.Errorf("orca: %v on %q: %w (%w)", op, o.name, ErrCancelled, ctx.Err())
	}
	if n.trace != nil {
		n.mu.Lock()
		n.trace(TraceEvent{Kind: TraceCall, Member: n.self, Object: o.name, Op: op.name, Write: true, Origin: n.self, Req: req,
			Args: c.args, Result: c.result, Err: c.err})
		n.mu.Unlock()
	}
	if c.err == nil && n.cfg.Check {
		// Sent after the write, so every replica has applied it when the
		// digest arrives.
		if err := n.send(context.Background(), appendDigest(nil, o.id, c.writes, c.digest)); err != nil {
			return fmt.Errorf("orca: sending the digest of %q: %w", o.name, err)
		}
	}
	return c.err
}

// send broadcasts msg, in parts if it is longer than MaxMessage; once
// the first part is out the others follow whatever ctx does (a peer
// joins them in the order they come from this member; other messages of
// this member may come between them, the parts of another may not). On
// an Env that can send from Deliver, a message that fits goes into the
// member's batch instead while one of its messages is in flight (queue,
// batch.go), and is sent with it.
func (n *Node) send(ctx context.Context, msg []byte) error {
	if len(msg) <= n.maxMessage {
		how := n.queue(msg)
		if how == queued {
			return nil
		}
		if how == sendOrdered {
			// After the batch, which may hold this caller's earlier
			// writes.
			n.sendMu.Lock()
			defer n.sendMu.Unlock()
			if err := n.sendBatchLocked(); err != nil {
				return err
			}
			if how = n.queue(msg); how == queued {
				return nil // it starts the next batch
			}
			if how == sendOrdered {
				n.out.sent(1)
			}
		}
		if err := n.env.Send(ctx, msg); err != nil {
			n.out.sent(-1)
			return err
		}
		n.countSent(1, len(msg), 0)
		return nil
	}
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	if err := n.sendBatchLocked(); err != nil {
		return err
	}
	chunk := n.maxMessage - partOverhead
	parts := 0
	for off := 0; off < len(msg); off += chunk {
		end := min(off+chunk, len(msg))
		kind := byte(msgPart)
		if end == len(msg) {
			kind = msgLast
		}
		n.sendBuf = append(append(n.sendBuf[:0], kind), msg[off:end]...)
		if off > 0 {
			ctx = context.Background()
		}
		n.out.sent(1)
		if err := n.env.Send(ctx, n.sendBuf); err != nil {
			n.out.sent(-1)
			n.countSent(parts, parts*partOverhead+off, parts)
			return err
		}
		parts++
	}
	n.countSent(parts, parts*partOverhead+len(msg), parts)
	return nil
}

func (n *Node) countSent(msgs, bytes, parts int) {
	n.sent.messages.Add(uint64(msgs))
	n.sent.bytes.Add(uint64(bytes))
	n.sent.parts.Add(uint64(parts))
}

// traceRead records a read that returned (Op.Call's read path).
func (n *Node) traceRead(o *object, op *opInfo, args, result any) {
	n.mu.Lock()
	n.trace(TraceEvent{Kind: TraceCall, Member: n.self, Object: o.name, Op: op.name, Args: args, Result: result})
	n.mu.Unlock()
}
