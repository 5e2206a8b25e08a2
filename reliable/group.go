package reliable

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/member"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/reliable/vtotal"
)

// ErrClosed is returned by Send and Recv once the group is closed (or this
// member has left), and by Recv once every message delivered before that
// has been taken.
var ErrClosed = errors.New("reliable: group closed")

// Message is one delivered message. Data belongs to the caller.
type Message struct {
	From frame.MemberID
	Data []byte
}

// Group is this process's membership of a reliable broadcast group. Its
// methods are safe for concurrent use.
//
// It is a thin shell around its core's stepper, in the manner of
// etcd-raft's Node over RawNode (DESIGN.md, decision 8): one event loop
// goroutine takes the stepper's turns — it waits on the link, steps the
// core with what arrived, runs its timers, sends its frames in one batch
// and hands out its deliveries and events. Send and Leave post to it:
// Send hands its message to the core (Propose only queues and copies it)
// and wakes the loop, which sends it. A lone Send on a quiet group (the
// loop waiting on the link, no Send in the last 20 µs) sends its frame
// itself instead, excluding the loop's turns meanwhile (sendNow, not
// with Config.Deliver or OnEvent). Deliveries and events are handed out
// after the loop has let go of the group's lock, so Config.Deliver and
// OnEvent may call the Group's methods. With a link that stages
// (link.Stager), the loop only copies frames into the link's transmit
// queue; a kicker goroutine has the kernel send them.
//
// Copies: a message handed to Send is copied once into the core's history
// (kept until every member acknowledged it). A received in-order frame is
// decoded in place from the link's ring. A message of 1 KB or more is
// queued as a view into the ring (or the core's buffer), and Recv (into a
// new slice) or RecvAppend (into the caller's buffer) copies it from
// there, once, if it takes it before the loop's turn ends; the loop waits
// up to 1 ms for a reader that is taking messages, then copies what is
// left into the receive queue, as it does for smaller messages: a copy in
// and one out. Config.Deliver skips the queue. Out-of-order frames are
// copied once more, by the core, to wait for the gap to fill.
type Group struct {
	cfg   settings
	l     link.Link
	self  frame.MemberID
	max   int // largest message
	queue *msgQueue
	// viewed (Config.Views) is closed by the loop when the first view is
	// installed, after it set self; views is the membership core.
	viewed chan struct{}
	views  *view.Core

	// started is the member list the group started with (static or
	// registered; nil with Views).
	started []frame.MemberInfo

	mu sync.Mutex // guards n's stepper (and so the core) and the fields below
	n  *node
	// due: a Send proposed, or Leave was asked, since the loop's last
	// turn began: the loop turns again at once instead of sleeping.
	due          bool
	room         windowWaiters // Sends waiting for room in the send window
	leaving      bool          // Leave was asked
	leaveStarted bool          // the loop has started the core's Leave
	ownProposed  uint64        // messages Send handed to the core
	stop         bool          // Close gave up waiting: the loop ends at its next wake-up
	err          error         // why the group stopped, once it has
	// sleepUntil is the deadline the loop waits on the link towards (zero:
	// it is not waiting, or was woken already). With a link that can be
	// woken (link.Waker), the loop sleeps until the core's next timer, and
	// whoever changes what it must do (Send, Leave, a stop) wakes it
	// (wakeLoop); with any other link it polls every MaxWait.
	sleepUntil time.Time
	waker      Waker
	woken      chan struct{} // wakeLoop's signal to a loop waiting for queue room
	hosted     bool          // a Loop takes the group's turns (JoinLoop)
	loop       *Loop         // that Loop: its kicker kicks what the group staged
	// wakeHeld: a Send inside its Loop's SendBatch left the wake to the
	// batch's end, which sends for the group or wakes the Loop.
	wakeHeld bool
	// A Send on a quiet group sends its frame itself (sendNow) while
	// the loop waits on the link: inline says such a send is under way
	// (g.mu is let go while the frame goes out), and the loop waits on
	// inlineDone before its next turn; lastPropose is when Send last
	// handed the core a message, read from now (time.Now; a test sets
	// its own to place Sends around quietSend).
	inline      bool
	inlineDone  sync.Cond
	turning     bool // the loop takes a turn (g.mu is let go within it)
	turned      bool // the loop has taken the first turn (the core's clocks run)
	lastPropose time.Time
	now         func() time.Time
	// lastRead (the loop's own) is when a wait on the link last read
	// frames. While frames flow the loop waits at most MaxWait (1 ms) at
	// a time: a wait that ends at its deadline lets the ring's next Recv
	// sleep without spinning, and loops that spin less leave the CPU to
	// the others; sleeping to the next timer after each empty wait cost
	// 10 % at 7 receivers (docs/benchmarks-history.md, "Measurements
	// formerly in code comments"). Once nothing was read for quietAfter,
	// the loop sleeps until the core's next timer, at most quietMaxWait.
	lastRead time.Time

	events chan Event
	lost   uint64 // events not taken from the channel in time
	done   chan struct{}
	rx     []link.Frame
	// first are the frames registration read after the group started
	// (registration.rest), for the loop's first turn: still views into
	// the link, which nobody reads before that turn.
	first []link.Frame

	// With a link that stages (link.Stager), the loop copies frames into
	// its transmit queue and the kicker goroutine has the kernel send
	// them: kick wakes it, kickStop ends it after a last Kick, kicked is
	// closed when it has ended. lastKick is that last Kick's error,
	// written by the kicker before it closes kicked.
	kick, kickStop, kicked chan struct{}
	lastKick               error
	// datagram: SendUnreliable proposed a datagram while the loop slept
	// and left it to the kicker, which sends it as a quiet Send does
	// (sendNow) instead of the loop being woken for it.
	datagram atomic.Bool

	// The event loop's own state (no lock): since when the receive queue
	// has been full, and the timer bounding a wait for room in it.
	// pauseFor is how long the loop stops reading while it is full
	// (pauseReading), fixed at Join.
	fullSince time.Time
	roomTimer *time.Timer
	pauseFor  time.Duration
}

// Join joins the group described by cfg over l and returns once the group
// has started: at once with static Config.Members, or when registration has
// completed (every Config.Size member registered with the server). If ctx
// ends first, Join returns ctx.Err().
//
// With static Members nobody waits for anybody: this member's clocks start
// now, and it hears nothing the others sent before. Joining within
// FailureTimeout of the others loses nothing (their windows wait for this
// member, which asks for what it missed and gets every message from the
// first). Joining later, the others have removed it (MemberFailed there)
// and ignore it; Join still succeeds, and it finds out from the first frame
// of each that has sent more than a window in all, removing that member as
// MemberStalled with Reason StalledRemovedUs; from one that has sent less
// it hears nothing and asks for its gap unanswered. See docs/protocols.md,
// "Static member lists and a late start".
//
// The Group does not own l: close l after Close has returned.
func Join(ctx context.Context, l link.Link, cfg Config) (*Group, error) {
	return join(ctx, l, cfg, nil)
}

// join is Join; with a Loop, the group's turns are taken by the Loop's
// event loop instead of one of its own.
func join(ctx context.Context, l link.Link, cfg Config, lp *Loop) (*Group, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if lp != nil {
		if err := lp.admit(&s); err != nil {
			return nil, err
		}
	}
	if l, err = withAuth(l, &s); err != nil {
		return nil, err
	}
	mtu := l.MTU()
	self, members := s.Self, s.Members
	clk := wall.Clock{Epoch: time.Now()}
	var reg *registration
	var views *view.Core
	if s.Views {
		if views, err = newViewCore(&s, l); err != nil {
			return nil, err
		}
		self = frame.NoMember
	} else if len(members) == 0 {
		reg, err = register(ctx, l, &s)
		if err != nil {
			return nil, err
		}
		// The registrar keeps running in the loop, on its clock.
		self, members, clk = reg.self, reg.members, reg.clk
	}
	var c core.Core = views
	if views != nil && s.Order == Total {
		c = vtotal.New(views) // Agreed: one order over the views
		if s.Safe {
			c = vtotal.NewSafe(views)
		}
	}
	if views == nil {
		if c, err = s.newCore(self, members, mtu); err != nil {
			return nil, err
		}
	}
	if reg != nil {
		c = member.Attach(reg.r, c)
	}
	g := &Group{cfg: s, l: l, self: self, started: members, queue: newMsgQueue(s.RecvQueue),
		events: make(chan Event, 64), done: make(chan struct{}), rx: make([]link.Frame, 64)}
	g.inlineDone.L = &g.mu
	g.now = time.Now
	g.n = newNode(l, &s, c, clk)
	g.max = g.n.info.MaxMessage
	g.pauseFor = pauseLimit(&s, mtu)
	if w, ok := link.WakerOf(l); ok {
		g.waker, g.woken = w, make(chan struct{}, 1)
	}
	g.hosted = lp != nil
	g.loop = lp
	if lp == nil {
		g.n.lendFrames(l) // its own loop is the link's only reader
	}
	if lp != nil {
		// The Loop's wait is on the shared link: a wake of the group's
		// loop must end that wait.
		g.waker, g.woken = nil, make(chan struct{}, 1)
		if lp.waker != nil {
			g.waker = groupWake{lp}
		}
	}
	if st, ok := link.StagerOf(l); ok {
		g.n.out.stage = st
		if ns, ok := link.NowSenderOf(l); ok {
			g.n.out.now = ns
		}
		if lp == nil {
			g.kick, g.kickStop, g.kicked = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
			go g.kicker(st)
		}
	}
	g.n.deliver = g.enqueue
	if s.Deliver != nil {
		g.n.deliver = s.Deliver
	}
	g.n.event = g.event
	if reg != nil {
		g.first = reg.rest
	}
	// The loop's first turn starts the core's clocks: deliveries and
	// events are handed out on the loop's goroutine only, never on the
	// goroutine calling Join.
	g.due = true
	if views != nil {
		g.views, g.viewed = views, make(chan struct{})
	}
	if lp != nil {
		if err := lp.add(g); err != nil {
			g.end()
			return nil, err
		}
	} else {
		go g.run()
	}
	if views != nil {
		return g.awaitView(ctx)
	}
	return g, nil
}

// awaitView waits until the loop installed the first view (Config.Views):
// the group was found or founded. If the group stops first (refused), or
// ctx ends, Join fails.
func (g *Group) awaitView(ctx context.Context) (*Group, error) {
	select {
	case <-g.viewed:
		return g, nil
	case <-g.done:
		return nil, g.Err()
	case <-ctx.Done():
	}
	g.abort()
	<-g.done
	select {
	case <-g.viewed:
		return g, nil // installed just as ctx ended
	default:
	}
	st := g.views.Counters()
	return nil, fmt.Errorf("reliable: joining group %d: no view after %d Joins (no running group admitted this process; founding waits for Size=%d processes): %w", g.cfg.Group, st.Joins, g.cfg.Size, ctx.Err())
}

// Self is this member's id.
func (g *Group) Self() frame.MemberID { return g.self }

// MemberList is the member list the group started with: Config.Members,
// or the one registration agreed on (ids, MACs, incarnations), so that a
// registered group's members can start further groups with a static list
// (dsm's segment channels). Nil with Views. The caller must not change it.
func (g *Group) MemberList() []frame.MemberInfo { return g.started }

// MaxMessage is the largest message Send accepts: what one frame carries
// at the link's MTU (or Config.MaxPayload).
func (g *Group) MaxMessage() int { return g.max }

// enqueue is the node's deliver with the receive queue (the loop hands
// it out without g.mu; the queue has its own lock, so that Recv never
// waits for the loop). A large message is queued as a view, for Recv to
// copy straight out of the ring or the core's buffer: the loop settles
// the queue before it Advances the core, and until then neither the ring
// slots nor the core's buffers it points into are reused.
func (g *Group) enqueue(from frame.MemberID, data []byte) {
	q := g.queue
	q.mu.Lock()
	if len(data) >= viewMin {
		q.pushViewLocked(from, data)
	} else {
		q.pushLocked(from, data)
	}
	wake := q.waiting > 0
	q.mu.Unlock()
	if wake {
		q.signal()
	}
}

func (g *Group) event(ev Event) {
	if ev.Kind == ViewInstalled && g.viewed != nil {
		select {
		case <-g.viewed:
		default:
			g.self = ev.Member // the loop's; Join reads it after viewed
			close(g.viewed)
		}
	}
	if g.cfg.OnEvent != nil {
		g.cfg.OnEvent(ev)
	}
	select {
	case g.events <- ev:
	default:
		g.mu.Lock()
		g.lost++
		g.mu.Unlock()
	}
}

// Events delivers membership events (members removed as failed, stalled
// or left; this member's own leave; at the registration server, refused
// joins) and, under Order Total, changes of the sequencer. The channel
// holds 64; events the application does not take in time are counted in
// Stats.EventsLost, and still listed in Stats.Events while they are among
// the last EventTail (Stats.EventCounts counts every one). It is closed
// when the group stops.
func (g *Group) Events() <-chan Event { return g.events }

// run is the event loop.
func (g *Group) run() {
	defer g.end()
	runLoop(&groupLoop{g: g}, g.rx)
}

// end is what the group's event loop does once it has ended: release
// the waiters, stop the kicker, close the queue, Events and Done.
func (g *Group) end() {
	{
		g.queue.mu.Lock()
		g.queue.detachLocked() // the link may be closed once we are done
		g.queue.mu.Unlock()
		g.mu.Lock()
		err := g.err
		g.room.release()
		// The core runs no more: the link gets its lent frames back.
		g.n.settleLoans(true)
		g.mu.Unlock()
		if kerr := g.stopKicker(); kerr != nil {
			// The last frames (the Leave repeats) did not go out: Close
			// and Leave must not report a clean leave. (A link closed
			// under the group has said so already: g.err wraps ErrClosed.)
			g.mu.Lock()
			if g.err == nil || g.err == ErrClosed {
				g.err = fmt.Errorf("reliable: group %d member %d: link send failed on the last frames staged before stopping (the Leave repeats): %w", g.cfg.Group, g.self, kerr)
			}
			err = g.err
			g.mu.Unlock()
		}
		g.queue.close(err)
		close(g.events)
		close(g.done)
	}
}

// groupLoop is the Group as the host of the live loop (runLoop); pause
// is its plan for the wait (pauseReading: leave the link unread).
type groupLoop struct {
	g     *Group
	pause bool
}

func (h *groupLoop) lock()   { h.g.lockLoop() }
func (h *groupLoop) unlock() { h.g.mu.Unlock() }

// plan: a Group that was closed stops; otherwise the wait ends at the
// core's next deadline, MaxWait away at most while frames flow (the
// quiet wait once none came for quietAfter, with a link.Waker), at once
// if a Send or Leave posted, or when a pause in reading ends.
func (h *groupLoop) plan(now time.Time) (time.Time, bool) {
	g := h.g
	if g.stop {
		g.finish(ErrClosed)
		return time.Time{}, true
	}
	longest := g.cfg.maxWait
	if g.waker != nil && now.Sub(g.lastRead) >= quietAfter {
		longest = g.cfg.quietWait
	}
	wait := g.n.waitUntil(now, longest)
	if g.due {
		wait = now // what a Send or Leave posted goes out at once
	}
	h.pause = g.pauseReading(now)
	if h.pause {
		if end := g.fullSince.Add(g.pauseFor); end.Before(wait) {
			wait = end
		}
	}
	g.sleepUntil = wait
	return wait, false
}

// receive: the frames registration read after the group started come
// first; while reading pauses, it waits for room in the receive queue.
func (h *groupLoop) receive(wait time.Time, rx []link.Frame) (int, error) {
	g := h.g
	switch {
	case len(g.first) > 0:
		var n int
		n, g.first = copy(rx, g.first), nil
		return n, nil
	case h.pause:
		g.waitRoom(wait)
		return 0, nil
	}
	n, err := g.l.Recv(wait, rx)
	if n > 0 {
		g.lastRead = time.Now()
	}
	return n, err
}

func (h *groupLoop) failed(err error) {
	g := h.g
	g.mu.Lock()
	if errors.Is(err, net.ErrClosed) {
		err = fmt.Errorf("%w: the link was closed under it (%v)", ErrClosed, err)
	} else {
		err = fmt.Errorf("reliable: group %d member %d: link receive failed: %w", g.cfg.Group, g.self, err)
	}
	g.finish(err)
	g.mu.Unlock()
}

func (h *groupLoop) turn(frames []link.Frame) bool {
	g := h.g
	g.lockLoop()
	g.sleepUntil = time.Time{}
	g.turning = true
	g.turn(frames)
	g.turning, g.turned = false, true
	stopped := g.err != nil
	g.mu.Unlock()
	return stopped
}

// lockLoop takes g.mu for the loop, once no Send is sending its frame
// itself (sendNow).
func (g *Group) lockLoop() {
	g.mu.Lock()
	for g.inline {
		g.inlineDone.Wait()
	}
}

// turn is one turn of the loop: step the frames, run the timers, send
// the core's frames, hand out its deliveries and events, Advance. It is
// entered and left with g.mu held, and lets go of it while it sends and
// hands out: Send only Proposes, which a core takes between Ready and
// Advance, and Deliver may call the Group's methods.
func (g *Group) turn(frames []link.Frame) error {
	g.due = false
	now := g.n.clk.Core(time.Now())
	if g.leaving && !g.leaveStarted {
		g.leaveStarted = true
		g.n.st.Leave(now)
	}
	g.n.st.Hold = g.cfg.Deliver == nil && g.queue.full()
	g.n.input(now, frames)
	err := g.carryOut(g.n.st.Ready(), kickLater)
	g.n.settleLoans(false)
	return err
}

// kickBy says who has the kernel send what a carry-out staged.
type kickBy uint8

const (
	kickLater  kickBy = iota // the group's kicker, or its Loop after the round
	kickHere                 // carryOut, at once
	kickCaller               // carryOut's caller, which takes n.out.staged (Loop.SendNow)
)

// carryOut is the second half of a turn: send rd's frames, hand out its
// deliveries and events, Advance (g.mu is held, and let go meanwhile).
// kick says who kicks the frames staged.
func (g *Group) carryOut(rd core.Ready, kick kickBy) error {
	g.mu.Unlock()
	err := g.n.out.send(rd.Frames)
	switch {
	case kick == kickHere && g.n.out.staged:
		g.n.out.staged = false
		// Kick returns at once if the kicker is kicking: it sends these too.
		if kerr := g.n.out.stage.Kick(); err == nil {
			err = kerr
		}
	case kick == kickCaller:
	default:
		g.kickStaged()
	}
	g.n.handOut(rd)
	// The messages queued as views point into the ring and the core's
	// buffers: let Recv take them, or copy them, before either is reused.
	g.queue.settle()
	g.mu.Lock()
	g.n.st.Advance()
	g.wakeSenders()
	switch {
	case err != nil:
		g.finish(fmt.Errorf("reliable: group %d member %d: link send failed: %w", g.cfg.Group, g.self, err))
	case g.n.st.Done():
		g.finish(g.finishErr()) // left, and the Leave repeats are out; or removed
	}
	return err
}

// pauseReading says whether the loop should leave the link unread for
// now: the receive queue is full, and has been for less than
// FailureTimeout/20 (100 ms by default). Frames then wait in the kernel's
// ring (16 MB), so a reader that falls behind for a moment costs no
// retransmission: before, every Data frame read while the queue was full
// was dropped unstepped and had to be repaired, and a sender whose whole
// window was dropped so waited for its resend probe (10 ms or more) to
// learn of it. Past the bound the loop reads again and holds Data frames
// back unstepped (core.Stepper.Hold), so that acknowledgements and
// liveness keep flowing and nobody is removed for our slowness.
func (g *Group) pauseReading(now time.Time) bool {
	if g.cfg.Deliver != nil || !g.queue.full() {
		g.fullSince = time.Time{}
		return false
	}
	if g.fullSince.IsZero() {
		g.fullSince = now
	}
	return now.Sub(g.fullSince) < g.pauseFor
}

// pauseLimit is FailureTimeout/20, the protocol's default timeout when
// s has none: worked out once, at Join, as the protocol's shared
// configuration is built anew (and boxed) on every call.
func pauseLimit(s *settings, mtu int) time.Duration {
	ft := s.FailureTimeout
	if ft == 0 {
		ft = time.Duration(s.protocol.shared(s, mtu).failureTimeout)
	}
	return ft / 20
}

// waitRoom waits until Recv makes room in the queue, or until deadline.
func (g *Group) waitRoom(deadline time.Time) {
	d := time.Until(deadline)
	if d <= 0 || !g.queue.startRoomWait() {
		return
	}
	if g.roomTimer == nil {
		g.roomTimer = time.NewTimer(d)
	} else {
		g.roomTimer.Reset(d)
	}
	select {
	case <-g.queue.room:
	case <-g.roomTimer.C:
	case <-g.woken: // nil without a link.Waker: the wait is MaxWait at most
	}
	g.queue.endRoomWait()
	g.roomTimer.Stop()
}

// kickStaged wakes the kicker if frames were staged since it last ran
// (called by the loop only).
func (g *Group) kickStaged() {
	if !g.n.out.staged {
		return
	}
	g.n.out.staged = false
	if g.loop != nil {
		g.loop.kickAfter(g.n.out.stage) // once the round's turns are taken
		return
	}
	select {
	case g.kick <- struct{}{}:
	default: // a wake-up is pending already; its Kick sends these too
	}
}

// kicker has the kernel transmit the frames the loop staged (Kick), so
// that the loop stages the next frames and steps acknowledgements while
// the kernel transmits: on a veth bridge the kernel's transmit (the
// bridge's flood and the receivers' ring copies) costs as much CPU as
// everything the sender does (docs/benchmarks-history.md, "Why the
// comparisons fall the way they do"), and it runs on a goroutine of its
// own. A link that cannot send stops the group, as a failed Send does.
func (g *Group) kicker(st link.Stager) {
	defer close(g.kicked)
	for {
		select {
		case <-g.kick:
		case <-g.kickStop:
			g.lastKick = st.Kick() // what the last turn staged (the Leave repeats)
			return
		}
		if g.datagram.Swap(false) {
			g.mu.Lock()
			if !g.sendNow(true) {
				g.due = true
				g.wakeLoop()
			}
			g.mu.Unlock()
		}
		if err := st.Kick(); err != nil {
			// If the loop has just finished (g.err is ErrClosed), these
			// were the last frames: run's ending reports it.
			g.lastKick = err
			g.mu.Lock()
			g.finish(fmt.Errorf("reliable: group %d member %d: link send failed: %w", g.cfg.Group, g.self, err))
			g.mu.Unlock()
			<-g.kickStop
			return
		}
	}
}

// stopKicker ends the kicker after a last Kick, waits for it and returns
// that Kick's error.
func (g *Group) stopKicker() error {
	if g.loop != nil && g.n.out.stage != nil {
		// Hosted: the Loop's kicker may not run again; what the last
		// turn staged (the Leave repeats) goes out now.
		return g.n.out.stage.Kick()
	}
	if g.kickStop == nil {
		return nil
	}
	close(g.kickStop)
	<-g.kicked
	return g.lastKick
}

// finish records why the group stopped; g.mu is held.
func (g *Group) finish(err error) {
	if g.err == nil {
		g.err = err
		g.wakeLoop()
	}
}

// wakeLoop ends the event loop's wait early (g.mu is held): at most one
// wake per wait, it clears sleepUntil. Without a link.Waker the loop
// polls every MaxWait instead.
func (g *Group) wakeLoop() {
	if g.hosted {
		// A Loop takes this group's turn only when it is due: every
		// wake is a turn, as for a loop of its own.
		g.due = true
	}
	if g.waker == nil || g.sleepUntil.IsZero() {
		return
	}
	g.sleepUntil = time.Time{}
	g.waker.Wake()
	select {
	case g.woken <- struct{}{}:
	default:
	}
}

// wakeSenders releases Sends waiting for window room once the core takes
// messages again (g.mu is held).
func (g *Group) wakeSenders() {
	if len(g.room.waiting) > 0 && !g.n.st.Blocked() && !g.ownQueueFull() {
		g.room.release()
	}
}

// windowWaiters are the Sends waiting for window room, each on a channel
// (buffered, one token) that release signals; spare keeps the channels
// for the next waits, so that a wait allocates nothing. g.mu guards it.
type windowWaiters struct{ waiting, spare []chan struct{} }

// add returns the channel a new waiter waits on.
func (w *windowWaiters) add() chan struct{} {
	var ch chan struct{}
	if n := len(w.spare); n > 0 {
		ch, w.spare = w.spare[n-1], w.spare[:n-1]
	} else {
		ch = make(chan struct{}, 1)
	}
	w.waiting = append(w.waiting, ch)
	return ch
}

// done takes a waiter's channel back; woken says it received its token.
func (w *windowWaiters) done(ch chan struct{}, woken bool) {
	if !woken {
		if i := slices.Index(w.waiting, ch); i >= 0 {
			w.waiting = slices.Delete(w.waiting, i, i+1)
		} else {
			<-ch // released meanwhile: take its token
		}
	}
	w.spare = append(w.spare, ch)
}

// release wakes every waiter.
func (w *windowWaiters) release() {
	for _, ch := range w.waiting {
		ch <- struct{}{}
	}
	w.waiting = w.waiting[:0]
}

// ownQueueFull: where this member's own messages are delivered here too
// (Order Total, core.Info.SelfDelivery), Send waits while the receive
// queue and this member's messages on their way into it fill it, or an
// application that sends and does not read would grow the queue without
// bound (g.mu is held).
func (g *Group) ownQueueFull() bool {
	if !g.n.info.SelfDelivery || g.cfg.Deliver != nil {
		return false
	}
	coming := g.ownProposed - g.n.st.DeliveredFrom(g.self)
	return uint64(g.queue.len())+coming >= uint64(g.cfg.RecvQueue)
}

// Send broadcasts payload to every other member (under Order Total, to
// every member, this one included: it is delivered here too, in its place
// in the group's order). It returns once the message is accepted (copied;
// payload may be reused at once); accepted messages are never dropped
// while this member and a receiver stay live (under Order Total, an
// accepted message is resubmitted to every new sequencer until it is
// sequenced; see docs/protocols.md, "Sequencer", for the guarantee). When
// the send window is full it blocks (back-pressure) until room frees, or
// returns ctx.Err(); under Order Total (without Config.Deliver) it also
// blocks while this member's receive queue is full, since its own messages
// are delivered to it. A payload larger than MaxMessage is refused with a
// *TooLargeError stating both sizes.
//
// Room in the window frees as the event loop steps acknowledgements, so a
// Send from Config.Deliver or OnEvent (which run on that loop) that finds
// the window full waits until ctx ends: use TrySend there.
func (g *Group) Send(ctx context.Context, payload []byte) error {
	return g.send(ctx, payload, LevelGroup)
}

// SendLevel is Send at a reliable level of the message's own
// (docs/membership.md, "Delivery levels"): LevelGroup, or the group's
// own level, is Send; in a group with Views under Order Total,
// LevelAgreed and LevelSafe send the message at that level whatever the
// group's (Config.Safe), both in the group's one total order. A Safe
// message is delivered only once every member of the view holds it and
// its place, and every message after it in the order, of either level,
// waits for it; an Agreed message waits for nothing but the order and
// the Safe messages before it. Any other level is refused with a
// *LevelError (errors.Is ErrLevel) before anything is sent.
func (g *Group) SendLevel(ctx context.Context, level Level, payload []byte) error {
	return g.sendLevel(ctx, level, payload)
}

// TrySend is Send without the wait: when the send window is full (or,
// under Order Total, the receive queue) it returns ErrWindowFull at once.
// It is the Send for Config.Deliver and OnEvent.
func (g *Group) TrySend(payload []byte) error {
	return g.send(nil, payload, LevelGroup)
}

// TrySendLevel is SendLevel without the wait, as TrySend is Send's: the
// same refusals as SendLevel (a *LevelError, before anything is sent)
// and as TrySend (ErrWindowFull at once when the window is full).
func (g *Group) TrySendLevel(level Level, payload []byte) error {
	return g.sendLevel(nil, level, payload)
}

// sendLevel is SendLevel, or with a nil ctx TrySendLevel: the group's own
// level is LevelGroup's send, another levelAllowed refuses or lets through.
func (g *Group) sendLevel(ctx context.Context, level Level, payload []byte) error {
	if level != LevelGroup && level == g.level() {
		level = LevelGroup
	}
	if err := g.levelAllowed(level); err != nil {
		return err
	}
	return g.send(ctx, payload, level)
}

// send is Send, or with a nil ctx TrySend, at the level (LevelGroup, or
// one levelAllowed let through).
func (g *Group) send(ctx context.Context, payload []byte, level Level) error {
	if len(payload) > g.max {
		return &TooLargeError{Size: len(payload), Max: g.max}
	}
	for {
		g.mu.Lock()
		if g.err != nil || g.leaving {
			err := g.err
			g.mu.Unlock()
			if err == nil || errors.Is(err, ErrClosed) {
				return ErrClosed
			}
			return err
		}
		err := ErrWindowFull
		now := g.now() // one clock read a message: the core's and the quiet test's
		if !g.ownQueueFull() {
			if level == LevelGroup {
				err = g.n.st.Propose(g.n.clk.Core(now), payload)
			} else {
				err = g.n.st.ProposeLevel(g.n.clk.Core(now), payload, level == LevelSafe)
			}
		}
		if err == nil {
			g.ownProposed++
			quiet := now.Sub(g.lastPropose) >= quietSend
			g.lastPropose = now
			if quiet && g.sendNow(true) {
				g.mu.Unlock()
				return nil
			}
			g.due = true
			if g.loop != nil && g.loop.batches.Load() > 0 {
				g.wakeHeld = true // SendBatch's end sends it or wakes the Loop
			} else {
				g.wakeLoop()
			}
			g.mu.Unlock()
			return nil
		}
		if g.wakeHeld {
			// What this batch proposed before must go out for the window
			// to open: the Loop sends it.
			g.wakeHeld = false
			g.wakeLoop()
		}
		if !errors.Is(err, ErrWindowFull) || ctx == nil {
			err = g.sendErr(err) // finishes the group, which needs g.mu
			g.mu.Unlock()
			return err
		}
		if err := g.waitSendable(ctx); err != nil {
			return err
		}
	}
}

// quietSend: a Send that comes this long or more after the one before
// sends its frame itself when it can (sendNow); Sends closer together
// leave it to the loop, which sends what they proposed in one batch. A
// stream's Sends come a few µs apart and batch; a request and its reply
// (a ping-pong through two daemons: 40–50 µs) are quiet (docs/local-api-history.md,
// "The Send's hand-off").
const quietSend = 20 * time.Microsecond

// sendNow sends what Send just proposed on the calling goroutine, when
// the loop waits on the link with nothing else to do, instead of waking
// the loop to send it: a lone message then goes out without waiting for
// the loop's thread to be woken and scheduled, nor the kicker's (12-17
// and 2-3 µs on a busy 2-vCPU machine, docs/local-api-history.md,
// "Latency"). It carries out the core's Ready as a turn would (a core may
// deliver on Propose: a sequencer its own message), excluding the loop's
// turns meanwhile, so only where deliveries and events go to the queue
// and the Events channel: with Config.Deliver or OnEvent they are
// handed out on the loop alone, and sendNow reports false. Timers stay
// the loop's: if the core's next deadline is now before the loop's
// wake-up, the loop is woken once the frames went out. With kickNow the
// frames staged are kicked here too. g.mu is held, and let go while the
// frames go out.
func (g *Group) sendNow(kickNow bool) bool {
	if !g.canSendNow() {
		return false
	}
	kick := kickLater
	if kickNow {
		kick = kickHere
	}
	g.inline = true
	g.carryOut(g.n.st.Ready(), kick) // an error stops the group (finish)
	g.inline = false
	g.inlineDone.Broadcast()
	if d := g.n.clk.Wall(g.n.st.Deadline()); !d.IsZero() && d.Before(g.sleepUntil) {
		g.wakeLoop()
	}
	return true
}

// SendNow sends, on the calling goroutine, what Sends proposed since the
// group's loop last took its turn; on a Loop it is the Loop's SendNow. It
// is for a group with Config.Deliver or OnEvent, whose Sends leave their
// frames to the loop, and a caller about to wait for the answer (dsm's
// barrier over one group): with one P (GOMAXPROCS=1) the loop's
// goroutine, which the Sends woke, runs only once the caller blocks, so a
// caller whose wait is over at once would compute its next step first,
// and its frames would wait for that. The frames are sent only where the
// core has nothing but frames to carry out (deliveries and events are
// handed out on the loop alone) and the loop has had its first turn;
// the loop's turns wait meanwhile, as for a lone Send's sendNow, and what
// is left, and the timers, stay the loop's, which the Sends woke.
func (g *Group) SendNow() {
	if g.loop != nil {
		g.loop.SendNow()
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.due || !g.turned || g.turning || g.inline || g.leaving || g.stop || g.err != nil || len(g.first) > 0 {
		return
	}
	// Ready again before Advance returns the same: what is not frames
	// alone is left to the loop's turn.
	rd := g.n.st.Ready()
	if len(rd.Frames) == 0 || len(rd.Deliveries) > 0 || len(rd.Events) > 0 {
		return
	}
	g.inline = true
	g.carryOut(rd, kickHere) // an error stops the group (finish)
	g.inline = false
	g.inlineDone.Broadcast()
}

// canSendNow says whether sendNow may carry out the core's Ready off the
// loop: the loop waits on the link with nothing due, no other sendNow is
// under way, and the loop alone does not hand out (g.mu is held).
func (g *Group) canSendNow() bool {
	return !g.sleepUntil.IsZero() && !g.due && !g.inline && !g.leaving && g.err == nil &&
		g.cfg.Deliver == nil && g.cfg.OnEvent == nil
}

// SendUnreliable broadcasts payload at the Unreliable level
// (docs/membership.md, "Delivery levels"; Liu's weak groups): once, to the
// members of this member's current view (a registered group: its live
// members), never acknowledged or repaired. Each of them receives it at
// most once and uncorrupted, or not at all — a lost frame is lost, a
// member that is in another view when it arrives (a change under way)
// drops it, and so does one whose application is not reading (its
// receive queue full) — in no order with the group's other messages
// (under Order Total too). It is not delivered to this member. It never
// blocks and takes no window room. A group with views has this level,
// once a view is installed (before, the error says so), and so does a
// registered group under Order FIFO; a registered group under Order
// Total does not (the error wraps core.ErrNoUnreliable). A payload
// larger than MaxMessage is refused with a *TooLargeError.
func (g *Group) SendUnreliable(payload []byte) error {
	if len(payload) > g.max {
		return &TooLargeError{Size: len(payload), Max: g.max}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil || g.leaving {
		if g.err == nil || errors.Is(g.err, ErrClosed) {
			return ErrClosed
		}
		return g.err
	}
	if err := g.n.st.ProposeUnreliable(g.n.clk.Core(time.Now()), payload); err != nil {
		return g.sendErr(err)
	}
	// While the loop sleeps, the kicker sends the datagram (sendNow): its
	// wake is a channel's, where the loop's is a deadline set in the
	// link's poller, which cost this call more than the rest of it and
	// varied most (docs/benchmarks-history.md, "Liu's tables: machine C idle,
	// 2026-11-29 12:15–12:17 UTC").
	if g.kick != nil && g.canSendNow() {
		g.datagram.Store(true)
		select {
		case g.kick <- struct{}{}:
		default: // a wake-up is pending already; the kicker looks at datagram after it
		}
		return nil
	}
	g.due = true
	g.wakeLoop()
	return nil
}

// waitSendable waits, with g.mu held on entry and released on return,
// until wakeSenders says a Send may proceed, or ctx ends.
func (g *Group) waitSendable(ctx context.Context) error {
	room := g.room.add()
	g.mu.Unlock()
	var err error
	select {
	case <-room:
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	g.room.done(room, err == nil)
	g.mu.Unlock()
	return err
}

// Recv returns the next delivered message: in its sender's order (FIFO),
// or in the group's one order, the same at every member (Total). It
// blocks until one arrives or ctx ends (ctx.Err()); after Close, and once
// every message delivered before has been taken, it returns ErrClosed (or
// the error that stopped the group).
func (g *Group) Recv(ctx context.Context) (Message, error) {
	from, data, err := g.recv(ctx, nil)
	return Message{From: from, Data: data}, err
}

// RecvAppend is Recv appending the message to buf, so a caller reusing
// buf receives without allocating.
func (g *Group) RecvAppend(ctx context.Context, buf []byte) (from frame.MemberID, data []byte, err error) {
	return g.recv(ctx, buf)
}

func (g *Group) recv(ctx context.Context, buf []byte) (frame.MemberID, []byte, error) {
	if g.cfg.Deliver != nil {
		return 0, buf, errors.New("reliable: Recv is not available when Config.Deliver is set")
	}
	for {
		from, data, ok, freed, err := g.queue.popFreed(buf)
		if ok {
			if freed {
				// The queue was full: a Send waiting for room in it
				// (Order Total, ownQueueFull) may go on. The loop would
				// release it at its next turn, but unless it is waiting
				// for this room (pauseReading) it may be asleep until its
				// next timer (link.Waker): a heartbeat, at most a second.
				g.mu.Lock()
				g.wakeSenders()
				g.mu.Unlock()
			}
			return from, data, nil
		}
		if err != nil {
			return 0, buf, err
		}
		if !g.queue.startWait() {
			continue
		}
		select {
		case <-g.queue.ready:
		case <-ctx.Done():
			g.queue.endWait()
			return 0, buf, ctx.Err()
		}
		g.queue.endWait()
	}
}

// Close leaves the group cleanly: no new messages are accepted, everything
// Send accepted is delivered to (acknowledged by) every live member, then
// a Leave frame announces the departure. It returns when that is done, or
// after Config.CloseTimeout with an error; either way the event loop has
// ended. If the link failed to send the last frames (the Leave repeats),
// Close returns the link's error. Messages delivered before remain
// available to Recv.
func (g *Group) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.CloseTimeout)
	defer cancel()
	return g.Leave(ctx)
}

// Leave is Close bounded by ctx instead of Config.CloseTimeout.
func (g *Group) Leave(ctx context.Context) error {
	g.mu.Lock()
	if !g.leaving && g.err == nil {
		g.leaving, g.due = true, true // the loop starts the core's Leave
		g.wakeLoop()
	}
	g.mu.Unlock()
	select {
	case <-g.done:
	case <-ctx.Done():
		g.abort()
		g.mu.Lock()
		n := g.n.st.Core().Stats().InFlight
		g.mu.Unlock()
		<-g.done
		return fmt.Errorf("reliable: group %d member %d: leave not finished (%d %s): %w", g.cfg.Group, g.self, n, g.n.info.InFlight, ctx.Err())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil && !errors.Is(g.err, ErrClosed) {
		return g.err
	}
	return nil
}

// abort has the event loop end at once, without the Leave's wait (its
// end is Done).
func (g *Group) abort() {
	g.mu.Lock()
	g.stop = true
	g.wakeLoop()
	g.mu.Unlock()
}

// Done is closed when the event loop has ended.
func (g *Group) Done() <-chan struct{} { return g.done }

// Err says why the group stopped (nil while it runs).
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// MemberStatus is one member as this member sees it: its id, whether it
// is this one, live, missing messages here (Order Total: numbered
// messages missing, counted against the sequencer), the sequencer this
// member follows (Order Total).
type MemberStatus = core.Member

// Members lists the group's members by id, this one included. Under
// Order Total the sequencer decides who is live (members talk to it, not
// to each other) and numbers each removal and readmission in the global
// stream: every member lists a member live unless it left or a removal of
// it was delivered here (MemberFailed, with no MemberReturned since), and
// a follower also lists its sequencer not live once silent past
// FailureTimeout.
func (g *Group) Members() []MemberStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n.st.Core().Members()
}

// ErrRemoved is wrapped by the error a Group stops with when the group
// went on without this member (Order Total: it was left out of an
// election, being cut off or believed dead).
var ErrRemoved = errors.New("reliable: removed from the group")

// finishErr is why a finished core stopped (g.mu is held).
func (g *Group) finishErr() error {
	if g.views != nil && g.views.Err() != nil {
		return g.viewErr(g.views.Err())
	}
	if ev, ok := g.n.st.Removed(); ok {
		return fmt.Errorf("%w: group %d member %d: %s", ErrRemoved, g.cfg.Group, ev.Member, ev.Reason)
	}
	return ErrClosed
}

// sendErr maps a core's refusal to Send's errors (g.mu is held). A
// membership core that stopped (removed, a minority, the group removed)
// refuses with its own error before the loop's turn has finished the
// group: the refusal finishes it, so that Send returns what the group
// ends with (ErrRemoved, ...) and Err reports the same from then on
// (rbcastd tells a rejoin from either; a Send that went inline, sendNow,
// made that window wider; TestNetnsRejoin met the bare view error, and
// then an Err still nil after Send's ErrRemoved). The loop's turn under
// way still hands out its deliveries and events, and Recv drains the
// queue, as when the turn finishes the group itself. g.mu is held.
func (g *Group) sendErr(err error) error {
	if errors.Is(err, core.ErrHalted) || g.views != nil && g.views.Err() != nil {
		g.finish(g.finishErr())
		return g.err
	}
	return err
}
