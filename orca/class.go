package orca

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MaxOps is the most operations a class may declare (one byte of the
// write message names the operation).
const MaxOps = 255

// Class is an object type: its state, a value of type S, and the
// operations declared on it with Read and Write (Orca's object
// specification and implementation in one). Declare every operation
// before the first object of the class is made (New); every member must
// declare the same classes with the same operations in the same order,
// since a write names its operation by its index.
type Class[S any] struct {
	info  *classInfo
	state Codec[S]
}

// classInfo is a class with its types erased: what the replica needs to
// apply a write that arrives as bytes.
type classInfo struct {
	name string
	ops  []*opInfo
	// err is the first mistake in the declaration (New reports it); used
	// is set by New, after which the class may not change (New may run on
	// several nodes' goroutines at once).
	err  error
	used atomic.Bool
	// The state codec, on *S behind an any.
	appendState func(b []byte, state any) ([]byte, error)
	decodeState func(b []byte, state any) error
	newState    func() any // a zero *S
	assignState func(dst, src any)
}

// opInfo is an operation with its types erased.
type opInfo struct {
	class *classInfo
	index uint8
	name  string
	write bool
	// decodeArgs returns the arguments a write's message carries; guard
	// (nil: none) and apply take the state (*S) and those arguments.
	// They serve queued guarded writes, snapshots and the checker, so
	// decodeArgs copies b first if the codec decodes views (viewArgs).
	decodeArgs func(b []byte) (any, error)
	viewArgs   bool
	guard      func(state, args any) bool
	apply      func(state, args any) any
	// writer is the write's way through the replica when it arrives
	// (its *Op): decode, guard and apply with the types known, so that
	// nothing is boxed. setResult hands a result that apply computed (a
	// queued write's) to the caller's call.
	writer    writeRunner
	setResult func(c *call, r any)
}

// writeRunner is a write operation with its types (*Op), for the replica.
type writeRunner interface {
	// runWrite runs the write whose message's arguments are raw on
	// replica o (n.mu held, and o's lock: lockObject): it decodes the
	// arguments, and if the operation has no guard or its guard holds,
	// applies it, handing the result to c (the caller's call, if the write is
	// this member's). detail is the decode error (runBadArgs), what
	// panicked (runGuardPanic, runOpPanic), or the arguments for the
	// guard's queue (runBlocked; nil from a codec of views: the queue
	// decodes a copy). tr, when not nil (a trace), gets the arguments and
	// result of a write applied.
	runWrite(o *object, raw []byte, c *call, tr *traced) (runOutcome, any)
}

// traced is a write's arguments and result, for the trace.
type traced struct{ args, result any }

// runOutcome says how a write's run went.
type runOutcome uint8

const (
	runApplied runOutcome = iota
	runBlocked
	runBadArgs
	runGuardPanic
	runOpPanic
)

func (op *Op[S, A, R]) runWrite(o *object, raw []byte, c *call, tr *traced) (runOutcome, any) {
	a, err := op.args.Decode(raw)
	if err != nil {
		return runBadArgs, err
	}
	s := o.state.(*S)
	if op.guard != nil {
		ok, p := callGuard(op.guard, s, a)
		if p != nil {
			return runGuardPanic, p
		}
		if !ok {
			if op.info.viewArgs {
				return runBlocked, nil
			}
			return runBlocked, a
		}
	}
	r, p := callWrite(op.fn, s, a)
	if p != nil {
		return runOpPanic, p
	}
	if c != nil {
		if out, ok := c.out.(*Pending[R]); ok {
			out.result = r
		}
	}
	if tr != nil {
		tr.args, tr.result = a, r
		if op.info.viewArgs {
			tr.args, _ = op.info.decodeArgs(raw) // a is a view: the trace keeps a copy
		}
	}
	return runApplied, nil
}

// callGuard evaluates a guard, recovering a panic.
func callGuard[S, A any](guard func(*S, A) bool, s *S, a A) (ok bool, p any) {
	defer func() { p = recover() }()
	return guard(s, a), nil
}

// callWrite applies a write's function (the replica holds the object's
// lock: lockObject), recovering a panic.
func callWrite[S, A, R any](fn func(*S, A) R, s *S, a A) (r R, p any) {
	defer func() { p = recover() }()
	return fn(s, a), nil
}

func (op *opInfo) String() string { return op.class.name + "." + op.name }

// NewClass declares a class named name. Its state codec is Gob until
// State sets another; the codec serves snapshots (state transfer) and the
// determinism check (Config.Check), nothing else.
func NewClass[S any](name string) *Class[S] {
	c := &Class[S]{info: &classInfo{name: name}}
	if name == "" {
		c.info.err = errors.New("orca: a class needs a name")
	}
	c.setState(Gob[S]())
	return c
}

// State sets the codec of the class's state (see NewClass).
func (c *Class[S]) State(codec Codec[S]) *Class[S] {
	if c.check("set its state codec") {
		c.setState(codec)
	}
	return c
}

func (c *Class[S]) setState(codec Codec[S]) {
	c.state = codec
	c.info.appendState = func(b []byte, s any) ([]byte, error) { return codec.Append(b, *s.(*S)) }
	c.info.decodeState = func(b []byte, s any) error {
		v, err := codec.Decode(b)
		if err != nil {
			return err
		}
		*s.(*S) = v
		return nil
	}
	c.info.newState = func() any { return new(S) }
	c.info.assignState = func(dst, src any) { *dst.(*S) = *src.(*S) }
}

// Name is the class's name.
func (c *Class[S]) Name() string { return c.info.name }

// check reports whether the class may still change, recording why not.
func (c *Class[S]) check(what string) bool {
	if c.info.used.Load() && c.info.err == nil {
		c.info.err = fmt.Errorf("orca: class %s: cannot %s after an object of it was made", c.info.name, what)
	}
	return c.info.err == nil
}

// Op is an operation of class S: it takes arguments of type A and returns
// a result of type R. Read operations run on the local replica without
// communication; write operations are broadcast in the group's total
// order and applied by every replica in that order, the result going to
// the caller. Either may have a guard (When): Orca's blocking operation.
type Op[S, A, R any] struct {
	c    *Class[S]
	info *opInfo
	args Codec[A]
	// The typed functions, for the read path and the replica's, which
	// allocate nothing of their own.
	guard func(*S, A) bool
	fn    func(*S, A) R
	// calls are the Pendings of finished Calls, for the next (a Call's
	// is its own until it returns).
	calls sync.Pool
}

// Read declares a read operation: fn computes a result from the state and
// the arguments. It must not change the state, nor keep or return a
// reference into it (return copies): the state changes under later writes,
// and a caller that wrote into it would change one replica only.
func Read[S, A, R any](c *Class[S], name string, fn func(s *S, a A) R) *Op[S, A, R] {
	return declare(c, name, false, nil, fn)
}

// Write declares a write operation: fn changes the state according to the
// arguments and returns a result, which is handed to the caller (every
// other replica computes it too and drops it). args encodes the arguments
// into the broadcast message.
//
// fn must be deterministic: a function of the state and the arguments
// only, so that every replica, applying the same writes in the same order,
// holds the same state. It must not read clocks, random numbers, the
// environment, other objects or anything outside its arguments and the
// state; must not range over a map where the order matters (Go randomises
// it); must not keep a reference to the arguments or return one into the
// state; must not block, start goroutines or call the Node. Config.Check
// catches a replica that diverges anyway (docs/orca.md, "Determinism").
func Write[S, A, R any](c *Class[S], name string, args Codec[A], fn func(s *S, a A) R) *Op[S, A, R] {
	return declare(c, name, true, args, fn)
}

func declare[S, A, R any](c *Class[S], name string, write bool, args Codec[A], fn func(*S, A) R) *Op[S, A, R] {
	op := &Op[S, A, R]{c: c, args: args, fn: fn}
	info := &opInfo{class: c.info, name: name, write: write}
	op.info = info
	if !c.check("declare operation " + name) {
		return op
	}
	switch {
	case name == "":
		c.info.err = fmt.Errorf("orca: class %s: an operation needs a name", c.info.name)
	case fn == nil:
		c.info.err = fmt.Errorf("orca: class %s: operation %s has no function", c.info.name, name)
	case write && args == nil:
		c.info.err = fmt.Errorf("orca: class %s: write operation %s has no argument codec (NoArgs for none)", c.info.name, name)
	case len(c.info.ops) == MaxOps:
		c.info.err = fmt.Errorf("orca: class %s: more than %d operations", c.info.name, MaxOps)
	}
	for _, o := range c.info.ops {
		if o.name == name && c.info.err == nil {
			c.info.err = fmt.Errorf("orca: class %s: operation %s declared twice", c.info.name, name)
		}
	}
	if c.info.err != nil {
		return op
	}
	info.index = uint8(len(c.info.ops))
	info.apply = func(s, a any) any { return fn(s.(*S), a.(A)) }
	if write {
		_, info.viewArgs = args.(viewDecoder)
		info.decodeArgs = func(b []byte) (any, error) {
			if info.viewArgs {
				b = slices.Clone(b)
			}
			return args.Decode(b)
		}
		info.writer = op
		info.setResult = func(c *call, r any) {
			if out, ok := c.out.(*Pending[R]); ok {
				out.result = r.(R)
			}
		}
	}
	c.info.ops = append(c.info.ops, info)
	return op
}

// When gives the operation a guard: Call blocks until guard holds, then
// runs the operation (Orca's guarded command; an operation with several
// alternatives is one guard that holds if any does, and a function that
// branches on them). A read waits until the local replica's state makes
// the guard true. A write is broadcast at once and each replica, in the
// order, runs it if the guard holds and otherwise queues it; after every
// write applied to the object the replica retries its queued writes in
// the order they arrived, so every replica decides alike. The guard must
// be deterministic and free of side effects, like the operation.
func (op *Op[S, A, R]) When(guard func(s *S, a A) bool) *Op[S, A, R] {
	if !op.c.check("give operation " + op.info.name + " a guard") {
		return op
	}
	if guard == nil {
		op.c.info.err = fmt.Errorf("orca: class %s: operation %s: nil guard", op.c.info.name, op.info.name)
		return op
	}
	op.guard = guard
	op.info.guard = func(s, a any) bool { return guard(s.(*S), a.(A)) }
	return op
}

// Name is the operation's name.
func (op *Op[S, A, R]) Name() string { return op.info.name }

// IsWrite reports whether the operation is a write.
func (op *Op[S, A, R]) IsWrite() bool { return op.info.write }

// Call runs the operation on object o with arguments a and returns its
// result.
//
// A read without a guard runs at once on the local replica, under the
// object's read lock, without communication, and never fails. A guarded
// read waits until the guard holds here, or ctx ends (ctx.Err()).
//
// A write is broadcast (the message holds the object, the operation and
// the encoded arguments; one larger than a frame goes in several) and
// Call returns once the local replica has applied it, in its place in
// the total order, with the result computed there: the caller's next read
// sees it. If ctx ends while a guarded write waits for its guard, Call
// broadcasts a cancellation: whichever of the two comes first in the
// order decides, alike at every replica, and Call returns the result if
// the write ran, ctx.Err() if it was cancelled. A write without a guard
// is applied once sent, whatever ctx does (Call waits for it). A failed or
// closed node fails the call.
func (op *Op[S, A, R]) Call(ctx context.Context, o *Object[S], a A) (R, error) {
	var zero R
	if o == nil {
		return zero, fmt.Errorf("orca: %v called on a nil object", op.info)
	}
	if o.c != op.c {
		return zero, fmt.Errorf("orca: %v called on object %q of another class (%s)", op.info, o.obj.name, o.c.info.name)
	}
	if op.c.info.err != nil {
		return zero, op.c.info.err
	}
	if !op.info.write {
		return op.read(ctx, o, a)
	}
	p, _ := op.calls.Get().(*Pending[R])
	if p == nil {
		p = &Pending[R]{}
	}
	p.start(o.n, o.obj, op.info)
	if o.n.trace != nil {
		p.c.args = a // boxed for the trace only
	}
	err := op.send(ctx, o, p, a)
	if err == nil {
		err = o.n.await(ctx, &p.c)
	}
	r := p.result
	p.reuse()
	op.calls.Put(p)
	if err != nil {
		return zero, err
	}
	return r, nil
}

// send encodes a write's message and broadcasts it for p.
func (op *Op[S, A, R]) send(ctx context.Context, o *Object[S], p *Pending[R], a A) error {
	buf := msgBufs.Get().(*[]byte)
	defer putMsgBuf(buf)
	msg, err := op.args.Append(appendOpHeader((*buf)[:0], o.obj.id, op.info.index), a)
	*buf = msg[:0]
	if err != nil {
		return fmt.Errorf("orca: %v on %q: encoding the arguments: %w", op.info, o.obj.name, err)
	}
	return o.n.startWrite(ctx, &p.c, msg)
}

// msgBufs holds buffers for writes' messages: Env.Send does not keep
// them.
var msgBufs = sync.Pool{New: func() any { return new([]byte) }}

// putMsgBuf returns a message buffer to msgBufs, unless it grew large (a
// write in parts) and would hold the memory.
func putMsgBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		msgBufs.Put(b)
	}
}

// Go starts a write and returns once it is broadcast (or queued in this
// member's batch while one of its messages is in flight; the node sends
// the batch by itself: docs/orca.md, "Batches"), without waiting for its
// application: as if a new Orca process were forked to call it (the
// language's fork), so that one goroutine can have many writes in flight
// — the way to fill the total order's window from one caller. Pending.Wait
// joins it: returns the result once the write is applied here. Until then
// nothing orders the write before this goroutine's later operations (they
// are another process's); writes one goroutine starts with Go are applied
// in the order it started them (the total order keeps each member's
// order, and a batch keeps it). ctx bounds the broadcast (back-pressure);
// Wait takes its own for a guard. Go of a read operation fails: call
// reads with Call.
func (op *Op[S, A, R]) Go(ctx context.Context, o *Object[S], a A) *Pending[R] {
	if err := op.goable(o); err != nil {
		return &Pending[R]{err: err}
	}
	return op.goIn(ctx, &Pending[R]{}, o, a)
}

// goable says why op cannot be started with Go on o, if it cannot.
func (op *Op[S, A, R]) goable(o *Object[S]) error {
	switch {
	case o == nil:
		return fmt.Errorf("orca: %v started on a nil object", op.info)
	case o.c != op.c:
		return fmt.Errorf("orca: %v started on object %q of another class (%s)", op.info, o.obj.name, o.c.info.name)
	case op.c.info.err != nil:
		return op.c.info.err
	case !op.info.write:
		return fmt.Errorf("orca: Go of %v, a read: call reads with Call", op.info)
	}
	return nil
}

// goIn starts the write in p, new or reset.
func (op *Op[S, A, R]) goIn(ctx context.Context, p *Pending[R], o *Object[S], a A) *Pending[R] {
	p.start(o.n, o.obj, op.info)
	if o.n.trace != nil {
		p.c.args = a // boxed for the trace only
	}
	p.err = op.send(ctx, o, p, a)
	return p
}

// GoReuse is Go with p's memory: it starts the write in p, whose earlier
// write's outcome its caller has taken (Wait returned), and returns p
// (a nil p: a new Pending, as Go). A caller that keeps many writes in
// flight (a ring of Pendings, each waited for before the next write in
// its place) so allocates nothing per write; Go allocates a Pending for
// each. The rule is the caller's: p is the new write's from here on, and
// nothing may use it for the earlier one (its result is taken, and Wait
// and Applied speak of the new write): hand GoReuse only a Pending that
// no other goroutine holds. A p whose write is still in flight, not
// waited for, is left alone: GoReuse then returns a new Pending that
// failed, saying so.
func (op *Op[S, A, R]) GoReuse(ctx context.Context, p *Pending[R], o *Object[S], a A) *Pending[R] {
	if p == nil {
		return op.Go(ctx, o, a)
	}
	if p.err == nil && !p.waited {
		return &Pending[R]{err: fmt.Errorf("orca: GoReuse of %v given a Pending whose write was not waited for (Wait it first)", op.info)}
	}
	p.reuse()
	if err := op.goable(o); err != nil {
		p.err = err
		return p
	}
	return op.goIn(ctx, p, o, a)
}

// Pending is a write started with Go (or GoReuse).
type Pending[R any] struct {
	// c is the write's call; the replica puts the result in result.
	c   call
	err error
	// waited: Wait has the outcome (err, result).
	waited bool
	result R
}

// start sets p up for a write of op on obj.
func (p *Pending[R]) start(n *Node, obj *object, op *opInfo) {
	p.c.n, p.c.obj, p.c.op, p.c.out = n, obj, op, p
}

// reuse readies a Pending for the next write (a Call's pooled one, or
// one given to GoReuse), once nothing refers to its call (it is off the
// node's calls: the replica finished it, or it was never sent).
func (p *Pending[R]) reuse() {
	var zero R
	p.c.reset()
	p.err, p.waited, p.result = nil, false, zero
}

// Wait waits until the write is applied here and returns its result (or
// the error that stopped it: sending it, the node's failure; for a
// guarded write whose ctx ends, the cancellation's outcome, as Call). It
// may be called again and returns the same.
func (p *Pending[R]) Wait(ctx context.Context) (R, error) {
	if p.err != nil || p.waited {
		return p.result, p.err
	}
	p.waited, p.err = true, p.c.n.await(ctx, &p.c)
	if p.err != nil {
		var zero R
		p.result = zero
	}
	return p.result, p.err
}

// Applied reports, without waiting, whether the write has been applied
// here (or failed).
func (p *Pending[R]) Applied() bool {
	if p.err != nil || p.waited {
		return true
	}
	return p.c.Ready()
}

// read is Call for a read operation.
func (op *Op[S, A, R]) read(ctx context.Context, o *Object[S], a A) (R, error) {
	obj := o.obj
	for {
		obj.mu.RLock()
		if op.guard == nil || op.guard(o.state, a) {
			r := op.fn(o.state, a)
			obj.mu.RUnlock()
			if o.n.trace != nil {
				o.n.traceRead(obj, op.info, a, r)
			}
			return r, nil
		}
		obj.mu.RUnlock()
		n := o.n
		err := n.env.Wait(ctx, &guardWaiter[S, A, R]{op: op, o: o, a: a})
		if err == nil {
			err = n.Err()
		}
		if err != nil {
			var zero R
			return zero, fmt.Errorf("orca: %v on %q: waiting for its guard: %w", op.info, obj.name, err)
		}
	}
}

// guardWaiter waits for a read's guard.
type guardWaiter[S, A, R any] struct {
	op *Op[S, A, R]
	o  *Object[S]
	a  A
}

func (w *guardWaiter[S, A, R]) Ready() bool {
	obj := w.o.obj
	obj.mu.RLock()
	ok := w.op.guard(w.o.state, w.a)
	obj.mu.RUnlock()
	return ok || w.o.n.Err() != nil
}

func (w *guardWaiter[S, A, R]) Wake() <-chan struct{} {
	n := w.o.n
	n.mu.Lock()
	defer n.mu.Unlock()
	obj := w.o.obj
	if obj.changed == nil {
		obj.changed = make(chan struct{})
		if n.err != nil {
			close(obj.changed) // failed: nobody would close it
		}
	}
	return obj.changed
}

func (w *guardWaiter[S, A, R]) String() string {
	return fmt.Sprintf("waiting for the guard of %v on %q", w.op.info, w.o.obj.name)
}

// Object is a shared data-object: a replica of it at every member, made
// by New.
type Object[S any] struct {
	n     *Node
	c     *Class[S]
	obj   *object
	state *S // obj.state, typed
}

// Name is the object's name.
func (o *Object[S]) Name() string { return o.obj.name }

// New makes this member's replica of the object called name, of class c,
// starting from initial (which the replica takes over: keep no reference
// into it). Every member makes every object it uses, with the same name,
// class and initial state; writes that arrive before the replica is made
// wait for it and are applied, in their order, by New. A name made twice
// here is an error, and so is a name whose 32-bit id (FNV-1a of the name)
// another object here has.
func New[S any](n *Node, name string, c *Class[S], initial S) (*Object[S], error) {
	if c.info.err != nil {
		return nil, c.info.err
	}
	c.info.used.Store(true)
	state := newPadded[S]()
	*state = initial
	obj, err := n.newObject(name, c.info, state)
	if err != nil {
		return nil, err
	}
	return &Object[S]{n: n, c: c, obj: obj, state: state}, nil
}

// newPadded allocates a zero S with cache lines of its own: a small state
// (a counter, a bound) would otherwise share its line with whatever the
// allocator put beside it, and the replica's writes to it and another
// goroutine's writes to its neighbour would move the line between the
// CPUs at every write. A line of padding on either side keeps other
// objects off the lines S touches, wherever the allocator places it.
func newPadded[S any]() *S {
	var zero S
	if unsafe.Sizeof(zero) >= padUpTo {
		return new(S)
	}
	p := new(struct {
		_ [cacheLine]byte
		s S
		_ [cacheLine]byte
	})
	return &p.s
}

const (
	cacheLine = 64
	// padUpTo: larger states are not padded (their first and last lines
	// are a small part of them).
	padUpTo = 1024
)
