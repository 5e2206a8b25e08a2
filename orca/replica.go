package orca

import (
	"fmt"
	"slices"
	"sync"

	"github.com/rbcast/rbcast/frame"
)

// The replica: what a node does with each message the total order
// delivers. Everything here runs with n.mu held, in delivery order, and
// depends on nothing but the messages and the objects' states, so every
// replica that is given the same messages does the same thing: that is
// the whole of Orca's consistency (docs/orca.md).

// object is a replica of a shared object.
type object struct {
	id    uint32
	name  string
	class *classInfo
	// mu guards state against local readers: the replica holds it while
	// it applies a write (it is the only writer, under n.mu).
	mu    sync.RWMutex
	state any // *S
	// writes counts the writes applied to it.
	writes uint64
	// pending are the guarded writes whose guard did not hold, in the
	// order they arrived (Orca's queue of blocked operations).
	pending []*pendingOp
	// digests are the state's digests after recent writes (Config.Check),
	// by write count modulo digestRing.
	digests [digestRing]digestEntry
	// changed, when a guarded read waits (Wake), is closed at the next
	// write to the object (n.mu held).
	changed chan struct{}
}

// changedLocked wakes the guarded reads waiting on o (n.mu held).
func (o *object) changedLocked() {
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// digestRing is how many recent digests a replica keeps per object for
// the determinism check.
const digestRing = 256

type digestEntry struct {
	writes, digest uint64
}

// pendingOp is a guarded write waiting for its guard.
type pendingOp struct {
	origin frame.MemberID
	req    uint32
	op     *opInfo
	args   any
	raw    []byte // the encoded arguments (snapshots)
	pos    Pos
}

// earlyMsg is a message for an object not made here yet.
type earlyMsg struct {
	from frame.MemberID
	pos  uint64
	msg  []byte
}

// Pos is a write's place in the order: the position of the message that
// applied it (counting every message delivered from the start, the same
// at every replica) and, for guarded writes that ran because that message
// made their guard true, their rank among those (0 for the message's own
// write).
type Pos struct {
	Delivery uint64
	Sub      uint32
}

// Less orders positions.
func (p Pos) Less(q Pos) bool {
	return p.Delivery < q.Delivery || p.Delivery == q.Delivery && p.Sub < q.Sub
}

func (p Pos) String() string { return fmt.Sprintf("%d.%d", p.Delivery, p.Sub) }

// lockObject makes the replica hold o's lock, under which it changes o's
// state (n.mu held): local readers wait. The replica keeps it for the
// writes to o that follow in the same delivery (a batch's), and lets it
// go when it needs another object's, or at the delivery's end
// (unlockObject): one lock a batch, not one a write.
func (n *Node) lockObject(o *object) {
	if n.locked == o {
		return
	}
	n.unlockObject()
	o.mu.Lock()
	n.locked = o
}

// unlockObject lets go of the object lock the replica holds, if any (n.mu
// held).
func (n *Node) unlockObject() {
	if o := n.locked; o != nil {
		n.locked = nil
		o.mu.Unlock()
	}
}

// deliver takes one message of the total order (data is valid only
// during the call).
func (n *Node) deliverLocked(from frame.MemberID, data []byte) {
	if !n.started || n.err != nil {
		return
	}
	if n.awaiting {
		n.holdLocked(from, data)
		return
	}
	if !n.hasState {
		return // before the first view: nothing is delivered there
	}
	if len(data) > 0 && data[0] == msgBatch {
		n.deliverBatchLocked(from, data)
		return
	}
	n.delivered++
	pos := n.delivered
	if len(data) == 0 {
		n.bad(from, "an empty message")
		return
	}
	switch data[0] {
	case msgPart, msgLast:
		buf := n.parts[from]
		if len(buf)+len(data)-1 > n.maxWrite {
			delete(n.parts, from)
			n.bad(from, fmt.Sprintf("a message in parts longer than MaxWrite (%d bytes)", n.maxWrite))
			return
		}
		buf = append(buf, data[1:]...)
		if data[0] == msgPart {
			n.parts[from] = buf
			return
		}
		delete(n.parts, from)
		if len(buf) > 0 && buf[0] != msgOp {
			n.bad(from, fmt.Sprintf("a message in parts of kind %#x, want an op", buf[0]))
			return
		}
		n.handle(from, buf, pos)
	case msgState:
		n.statePartLocked(from, data)
	default:
		n.handle(from, data, pos)
	}
}

// handle takes a whole message at position pos.
func (n *Node) handle(from frame.MemberID, msg []byte, pos uint64) {
	if len(msg) == 0 {
		n.bad(from, "an empty message in parts")
		return
	}
	switch msg[0] {
	case msgOp:
		id, op, req, args, err := parseOp(msg)
		if err != nil {
			n.bad(from, err.Error())
			return
		}
		n.noteRequest(from, req)
		o := n.last
		if o == nil || o.id != id {
			o = n.objects[id]
			if o != nil {
				n.last = o
			}
		}
		if o == nil {
			n.keepEarly(id, from, msg, pos)
			return
		}
		if int(op) >= len(o.class.ops) || !o.class.ops[op].write {
			n.bad(from, fmt.Sprintf("operation %d of object %q, which is not a write of class %s (do all members declare the same classes?)", op, o.name, o.class.name))
			n.failCall(from, req, fmt.Errorf("orca: operation %d of class %s is not a write here", op, o.class.name))
			return
		}
		n.invoke(o, from, req, o.class.ops[op], args, pos)
	case msgCancel:
		id, req, err := parseCancel(msg)
		if err != nil {
			n.bad(from, err.Error())
			return
		}
		o := n.objects[id]
		if o == nil {
			n.keepEarly(id, from, msg, pos)
			return
		}
		n.cancel(o, from, req)
	case msgDigest:
		id, writes, digest, err := parseDigest(msg)
		if err != nil {
			n.bad(from, err.Error())
			return
		}
		if o := n.objects[id]; o != nil && from != n.self {
			n.compareDigest(o, from, writes, digest)
		}
	default:
		n.bad(from, fmt.Sprintf("a message of unknown kind %#x", msg[0]))
	}
}

// noteRequest records request req of member from, seen in the order.
func (n *Node) noteRequest(from frame.MemberID, req uint32) {
	if int(from) >= len(n.lastReq) {
		n.lastReq = append(n.lastReq, make([]uint32, int(from)+1-len(n.lastReq))...)
	}
	n.lastReq[from] = max(n.lastReq[from], req)
}

func (n *Node) keepEarly(id uint32, from frame.MemberID, msg []byte, pos uint64) {
	n.early[id] = append(n.early[id], earlyMsg{from: from, pos: pos, msg: slices.Clone(msg)})
}

// bad counts a malformed message; every replica drops it alike.
func (n *Node) bad(from frame.MemberID, what string) {
	n.stats.BadMessages++
	if n.trace != nil {
		n.trace(TraceEvent{Kind: TraceBad, Member: n.self, Origin: from, Err: fmt.Errorf("orca: dropped %s from member %d", what, from)})
	}
}

// failCall ends this member's call req with err, if the message was ours.
func (n *Node) failCall(from frame.MemberID, req uint32, err error) {
	if from != n.self {
		return
	}
	if c := n.calls.get(req); c != nil {
		c.err = err
		c.finish()
	}
}

// invoke runs a write that arrived at pos: at once if its guard holds (or
// it has none), else queued; then the queued writes its effect enables.
func (n *Node) invoke(o *object, from frame.MemberID, req uint32, op *opInfo, raw []byte, pos uint64) {
	var c *call
	if from == n.self {
		c = n.calls.get(req)
	}
	var tr *traced
	if n.trace != nil {
		tr = new(traced)
	}
	n.lockObject(o)
	outcome, detail := op.writer.runWrite(o, raw, c, tr)
	switch outcome {
	case runBadArgs:
		err := detail.(error)
		n.bad(from, fmt.Sprintf("%v on %q with arguments that do not decode: %v", op, o.name, err))
		n.failCall(from, req, fmt.Errorf("orca: the arguments do not decode: %w", err))
	case runGuardPanic:
		n.failLocked(guardPanicked(op, o, from, detail))
	case runOpPanic:
		n.failLocked(opPanicked(op, o, from, detail))
	case runBlocked:
		args := detail
		if op.viewArgs {
			args, _ = op.decodeArgs(raw) // a copy: the queue keeps it
		}
		o.pending = append(o.pending, &pendingOp{origin: from, req: req, op: op, args: args, raw: slices.Clone(raw), pos: Pos{Delivery: pos}})
	case runApplied:
		var args, result any
		if tr != nil {
			args, result = tr.args, tr.result
		}
		if n.applied(o, from, req, op, args, result, c, Pos{Delivery: pos}) {
			n.retry(o, pos)
		}
	}
}

// retry runs the queued writes of o whose guards now hold, after the
// write at position pos changed o: the first in arrival order whose guard
// holds, then again from the start (its effect may enable an earlier
// one), until none does.
func (n *Node) retry(o *object, pos uint64) {
	sub := uint32(1)
	for i := 0; i < len(o.pending); {
		p := o.pending[i]
		ok, err := n.guardHolds(o, p)
		if err != nil {
			return
		}
		if !ok {
			i++
			continue
		}
		o.pending = slices.Delete(o.pending, i, i+1)
		if !n.apply(o, p, Pos{Delivery: pos, Sub: sub}) {
			return
		}
		sub++
		i = 0
	}
}

func guardPanicked(op *opInfo, o *object, from frame.MemberID, p any) error {
	return fmt.Errorf("orca: the guard of %v on %q (from member %d) panicked: %v", op, o.name, from, p)
}

func opPanicked(op *opInfo, o *object, from frame.MemberID, p any) error {
	return fmt.Errorf("orca: %v on %q (from member %d) panicked: %v", op, o.name, from, p)
}

// guardHolds evaluates queued write p's guard on o; a guard that panics
// stops the node.
func (n *Node) guardHolds(o *object, p *pendingOp) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = guardPanicked(p.op, o, p.origin, r)
			n.failLocked(err)
		}
	}()
	return p.op.guard(o.state, p.args), nil
}

// apply runs queued write p on o at position at (see applied), and
// reports whether the node still works (an operation that panics stops
// it: the replica may be half changed).
func (n *Node) apply(o *object, p *pendingOp, at Pos) bool {
	n.lockObject(o)
	result, err := func() (r any, err error) {
		defer func() {
			if x := recover(); x != nil {
				err = opPanicked(p.op, o, p.origin, x)
			}
		}()
		return p.op.apply(o.state, p.args), nil
	}()
	if err != nil {
		n.failLocked(err)
		return false
	}
	var c *call
	if p.origin == n.self {
		if c = n.calls.get(p.req); c != nil {
			p.op.setResult(c, result)
		}
	}
	return n.applied(o, p.origin, p.req, p.op, p.args, result, c, at)
}

// applied accounts for write req of member origin, just applied to o at
// position at with its result in c (the caller's call, if the write is
// this member's); args and result are the trace's. It reports whether
// the node still works.
func (n *Node) applied(o *object, origin frame.MemberID, req uint32, op *opInfo, args, result any, c *call, at Pos) bool {
	o.writes++
	n.stats.Applied++
	var digest uint64
	if n.cfg.Check || n.trace != nil {
		b, err := o.class.appendState(nil, o.state)
		if err != nil {
			n.failLocked(fmt.Errorf("orca: encoding the state of %q for its digest: %w", o.name, err))
			return false
		}
		digest = digestOf(b)
		o.digests[o.writes%digestRing] = digestEntry{writes: o.writes, digest: digest}
	}
	if c != nil {
		c.result, c.writes, c.digest = result, o.writes, digest
		c.finish()
	}
	if n.trace != nil {
		n.trace(TraceEvent{Kind: TraceApply, Member: n.self, Object: o.name, Op: op.name, Write: true, Origin: origin, Req: req,
			Args: args, Result: result, Pos: at, Writes: o.writes, Digest: digest})
	}
	if o.changed != nil {
		if n.delivering {
			// After the delivery, with the object's lock free for
			// the reads that wake.
			n.queueWake(wakeUp{o.changed, true})
			o.changed = nil
		} else {
			o.changedLocked()
		}
	}
	return true
}

// cancel drops the guarded write req of member from if it still waits
// (its caller's context ended); if it ran already, the cancellation comes
// too late and changes nothing.
func (n *Node) cancel(o *object, from frame.MemberID, req uint32) {
	i := slices.IndexFunc(o.pending, func(p *pendingOp) bool { return p.origin == from && p.req == req })
	if i < 0 {
		return
	}
	o.pending = slices.Delete(o.pending, i, i+1)
	n.stats.Cancelled++
	if from == n.self {
		if c := n.calls.get(req); c != nil {
			c.cancelled = true
			c.finish()
		}
	}
}

// compareDigest checks a peer's digest of o after its write count writes
// against this replica's (Config.Check).
func (n *Node) compareDigest(o *object, from frame.MemberID, writes, digest uint64) {
	if !n.cfg.Check {
		return
	}
	e := o.digests[writes%digestRing]
	if e.writes != writes || writes == 0 {
		n.stats.DigestsUnchecked++
		return
	}
	n.stats.DigestsChecked++
	if e.digest != digest {
		n.failLocked(&DivergedError{Object: o.name, Writes: writes, Member: from, Here: e.digest, There: digest})
	}
}

// DivergedError says that this replica of an object and another member's
// differ after the same writes: an operation of its class is not
// deterministic (Config.Check).
type DivergedError struct {
	Object      string
	Writes      uint64
	Member      frame.MemberID
	Here, There uint64
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("orca: replicas of %q diverged: after write %d its state here digests to %016x, at member %d to %016x (an operation or guard of its class is not deterministic: see docs/orca.md, \"Determinism\")",
		e.Object, e.Writes, e.Here, e.Member, e.There)
}
