package reliable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/link"
)

// Loop is one event loop for several groups of a process that share one
// link (dsm's global group and its segment channels over link/mux): one
// goroutine reads the shared link, hands each frame to its group's
// stepper and takes every group's turn — the same turn (groupLoop) a
// Group's own loop takes, so a hosted group behaves as one of its own,
// with the same Group API. What it saves is the hand-off: with a loop
// per group, the loop that read a frame of another group woke that
// group's loop for it (link/mux), and a Send on each group woke its own.
//
// A group joins a Loop with JoinLoop over its own link (a mux view: it
// sends on it, and the kernel filter passes its frames), while the Loop
// receives for all of them from the source it was made with. Each group
// keeps its lock, timers and kicker; the Loop takes a group's turn when
// frames of it arrived, when it posted work (a Send, Leave, a release),
// or when its next deadline has come.
type Loop struct {
	src   LoopSource
	waker Waker // nil: the source cannot be woken; a wait lasts MaxWait at most

	mu      sync.Mutex // guards hosts, closed and adding
	hosts   []*hosted
	closed  bool
	started bool

	done chan struct{}
	err  error // the source's receive failed (the Loop's own; read after done)
	// waiting: the loop plans a wait on its source or waits; the first
	// hosted group's wake of that wait wakes the source, the others (a
	// barrier's Sends on a channel and on the global group) need not.
	waiting atomic.Bool

	// batches counts the SendBatch calls under way: their Sends do not
	// wake the Loop (Group.wakeHeld).
	batches atomic.Int32

	// The loop's own.
	rx   []link.Frame
	live []*hosted
	// toKick is a link the round's turns staged frames on (every hosted
	// group's stages on the same shared link): the kicker kicks it once,
	// after the round, for all of them.
	toKick link.Stager

	// The kicker: kick hands it a link to Kick; kickStop ends it.
	kick     chan link.Stager
	kickStop chan struct{}
	kicked   chan struct{}
}

// LoopSource is what a Loop receives from: every hosted group's frames
// (link/mux's Mux.RecvAll). Its Recv follows link.Link's (frames are
// valid until the next Recv; os.ErrDeadlineExceeded at the deadline or
// when woken).
type LoopSource interface {
	Recv(deadline time.Time, frames []link.Frame) (int, error)
}

// LoopSourceFunc is a function as a LoopSource.
type LoopSourceFunc func(deadline time.Time, frames []link.Frame) (int, error)

// Recv calls f.
func (f LoopSourceFunc) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	return f(deadline, frames)
}

// hosted is one group on a Loop: its turn (the groupLoop its own loop
// would run), its frames of this round, and the wait its plan asked for.
type hosted struct {
	h      groupLoop
	group  uint32
	frames []link.Frame
	wait   time.Time
}

// NewLoop returns a Loop receiving from src; waker, if not nil, ends a
// wait on src (a hosted group's Send or Leave wakes it). Its goroutine
// starts with the first group.
func NewLoop(src LoopSource, waker Waker) *Loop {
	return &Loop{src: src, waker: waker, done: make(chan struct{}), rx: make([]link.Frame, 64),
		kick: make(chan link.Stager, 1), kickStop: make(chan struct{}), kicked: make(chan struct{})}
}

// kickAfter asks for a Kick of st once the round's turns are taken (the
// loop's goroutine only).
func (lp *Loop) kickAfter(st link.Stager) { lp.toKick = st }

// kickRound has the kicker Kick what the round's turns staged.
func (lp *Loop) kickRound() {
	if lp.toKick == nil {
		return
	}
	select {
	case lp.kick <- lp.toKick:
	default: // a Kick is pending already: it sends these too
	}
	lp.toKick = nil
}

// kicker has the kernel send what the hosted groups staged (Kick), on a
// goroutine of its own as a Group's kicker does, one Kick for all of a
// round's groups. A link that cannot send stops every hosted group.
func (lp *Loop) kicker() {
	defer close(lp.kicked)
	for {
		var st link.Stager
		select {
		case st = <-lp.kick:
		case <-lp.kickStop:
			return
		}
		if err := st.Kick(); err != nil {
			lp.kickFailed(err)
		}
	}
}

// kickFailed stops every hosted group: the shared link cannot send.
func (lp *Loop) kickFailed(err error) {
	lp.mu.Lock()
	hosts := append([]*hosted(nil), lp.hosts...)
	lp.mu.Unlock()
	for _, h := range hosts {
		g := h.h.g
		g.mu.Lock()
		g.finish(fmt.Errorf("reliable: group %d member %d: link send failed: %w", g.cfg.Group, g.self, err))
		g.mu.Unlock()
	}
}

// SendNow sends, on the calling goroutine, what Sends on the hosted
// groups proposed since the Loop last took their turns: each such
// group's frames are staged, then kicked once for all of them, before it
// returns. It is for a caller about to wait for the answer (dsm's
// barrier): with one P (GOMAXPROCS=1) the Loop's goroutine, which the
// Sends woke, runs only once the caller blocks, so a caller whose wait
// is over at once (its peers' messages have come) would compute its
// next step first, and its frames would wait for that. A group is sent
// for only where its core has nothing but frames to carry out (its
// deliveries and events are handed out on the Loop alone) and that has
// had its first turn (which starts the core's clocks), and while it
// does, the Loop's turns of that group wait (as for a lone Send's
// sendNow); what is left, and each group's timers, stay the Loop's, which
// the Sends woke. A link that cannot send stops every hosted group.
func (lp *Loop) SendNow() {
	var buf [8]*hosted
	lp.mu.Lock()
	hosts := append(buf[:0], lp.hosts...)
	lp.mu.Unlock()
	var st link.Stager
	for _, h := range hosts {
		g := h.h.g
		g.mu.Lock()
		sent := false
		if g.due && g.turned && !g.turning && !g.inline && !g.leaving && !g.stop && g.err == nil && len(g.first) == 0 {
			// Ready again before Advance returns the same: what is not
			// frames alone is left to the Loop's turn.
			if rd := g.n.st.Ready(); len(rd.Frames) > 0 && len(rd.Deliveries) == 0 && len(rd.Events) == 0 {
				g.inline = true
				g.carryOut(rd, kickCaller) // an error stops the group (finish)
				g.inline = false
				g.inlineDone.Broadcast()
				if g.n.out.staged {
					g.n.out.staged = false
					st = g.n.out.stage
				}
				sent = true
			}
		}
		if g.wakeHeld {
			// A SendBatch's Send left the wake to us: the Loop is woken
			// only if its turn has more to do than these frames, or the
			// core's next timer (the resend timer of the frames just
			// sent) now falls more than MaxWait before the Loop's wait.
			g.wakeHeld = false
			if d := g.n.clk.Wall(g.n.st.Deadline()); !sent || (!d.IsZero() && d.Before(g.sleepUntil.Add(-g.cfg.maxWait))) {
				g.wakeLoop()
			}
		}
		g.mu.Unlock()
	}
	if st != nil {
		if err := st.Kick(); err != nil {
			lp.kickFailed(err)
		}
	}
}

// SendBatch runs send, whose Sends on the hosted groups do not wake the
// Loop, then SendNow: the frames go out on the calling goroutine, and the
// Loop is woken only for a group whose frames SendNow could not send (its
// turn is under way, or has deliveries or events to hand out) or whose
// core's next timer now falls more than the group's MaxWait before the
// Loop's wait. A timer closer to it than that fires at the Loop's wake-up,
// at most MaxWait late: while frames flow the Loop waits MaxWait at most,
// and a peer's frame (the answer the caller waits for) usually wakes it
// first; on a quiet link (a wait of up to a second) the Loop is woken. It
// is dsm's barrier flush on channels: each Send woke the Loop, whose turn
// then found the frames sent already, and whose link's Recv ended its
// spin or its sleep to read and plan again for nothing. A Send that must
// wait for window room inside send wakes the Loop first (what the batch
// proposed before must go out for the window to open). Sends of other
// goroutines while a batch runs leave their wakes to it too.
func (lp *Loop) SendBatch(send func()) {
	lp.batches.Add(1)
	defer func() {
		lp.batches.Add(-1)
		lp.SendNow()
	}()
	send()
}

// ErrLoopConfig is wrapped by JoinLoop's refusal of a group a Loop
// cannot host.
var ErrLoopConfig = errors.New("reliable: a group a Loop cannot host")

// JoinLoop is Join for a group whose turns lp takes: it sends on l, and
// receives what lp's source reads of its group. A hosted group must hand
// its messages to Config.Deliver (a Loop cannot leave the shared link
// unread for one group whose receive queue is full) and have no
// Config.Auth (the Loop receives past the group's link, where its tags
// would be checked).
func JoinLoop(ctx context.Context, lp *Loop, l link.Link, cfg Config) (*Group, error) {
	return join(ctx, l, cfg, lp)
}

// admit says why lp cannot host a group of settings s, if it cannot.
func (lp *Loop) admit(s *settings) error {
	switch {
	case s.Deliver == nil:
		return fmt.Errorf("%w: group %d has no Config.Deliver", ErrLoopConfig, s.Group)
	case s.Auth != nil:
		return fmt.Errorf("%w: group %d has Config.Auth", ErrLoopConfig, s.Group)
	}
	return nil
}

// add hosts g: the loop takes its turns from now on.
func (lp *Loop) add(g *Group) error {
	lp.mu.Lock()
	if lp.closed {
		lp.mu.Unlock()
		return fmt.Errorf("reliable: group %d: %w", g.cfg.Group, ErrLoopClosed)
	}
	for _, h := range lp.hosts {
		if h.group == g.cfg.Group {
			lp.mu.Unlock()
			return fmt.Errorf("%w: group %d is on the Loop already", ErrLoopConfig, g.cfg.Group)
		}
	}
	lp.hosts = append(lp.hosts, &hosted{h: groupLoop{g: g}, group: g.cfg.Group})
	start := !lp.started
	lp.started = true
	lp.mu.Unlock()
	if start {
		go lp.kicker()
		go lp.run()
	} else {
		lp.wake()
	}
	return nil
}

func (lp *Loop) wake() {
	if lp.waker != nil {
		lp.waker.Wake()
	}
}

// groupWake is how a hosted group wakes the Loop: once per wait.
type groupWake struct{ lp *Loop }

func (w groupWake) Wake() {
	if w.lp.waiting.Swap(false) {
		w.lp.waker.Wake()
	}
}

// Close ends the Loop once its groups have ended (each by its Close or
// Leave): a group that joins it afterwards is refused. It returns at
// once if no group ever joined.
func (lp *Loop) Close() {
	lp.mu.Lock()
	lp.closed = true
	started := lp.started
	lp.mu.Unlock()
	if !started {
		return
	}
	lp.wake()
	<-lp.done
}

// Err is why the Loop's receive failed, once it has ended (nil: it
// ended after Close, or it still runs).
func (lp *Loop) Err() error {
	select {
	case <-lp.done:
		return lp.err
	default:
		return nil
	}
}

// loopIdleWait bounds the Loop's wait when it hosts no group.
const loopIdleWait = 10 * time.Millisecond

// run is the event loop: plan every hosted group's wait, read the
// source until the earliest, hand each group its frames and take the
// turns that are due.
func (lp *Loop) run() {
	defer func() {
		close(lp.kickStop)
		<-lp.kicked
		close(lp.done)
	}()
	for {
		// From here a hosted group's wake ends the coming wait: one
		// posted after its plan read the group finds waiting set (the
		// source keeps a wake until its next Recv); one before, the plan
		// sees (due).
		lp.waiting.Store(true)
		now := time.Now()
		lp.mu.Lock()
		live := append(lp.live[:0], lp.hosts...)
		closed := lp.closed
		lp.mu.Unlock()
		wait := now.Add(loopIdleWait)
		if lp.waker != nil {
			wait = now.Add(quietMaxWait)
		}
		k := 0
		for _, h := range live {
			g := h.h.g
			g.lockLoop()
			w, stop := h.h.plan(now)
			g.mu.Unlock()
			if stop {
				lp.remove(h)
				continue
			}
			if len(g.first) > 0 {
				w = now // registration's leftover frames: a turn now
			}
			h.wait = w
			if w.Before(wait) {
				wait = w
			}
			live[k] = h
			k++
		}
		live = live[:k]
		lp.live = live
		if closed && len(live) == 0 {
			return
		}
		n, err := lp.src.Recv(wait, lp.rx)
		lp.waiting.Store(false)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			for _, h := range live {
				h.h.failed(err)
				lp.remove(h)
			}
			lp.err = fmt.Errorf("reliable: the Loop's receive failed: %w", err)
			lp.mu.Lock()
			lp.closed = true
			lp.mu.Unlock()
			return
		}
		lp.dispatch(live, lp.rx[:n])
		now = time.Now()
		for _, h := range live {
			g := h.h.g
			if len(g.first) > 0 {
				first := g.first
				g.first = nil
				if h.h.turn(first) {
					lp.remove(h)
					continue
				}
			}
			if len(h.frames) == 0 && now.Before(h.wait) {
				continue // not due: no frames, no post, no deadline
			}
			if len(h.frames) > 0 {
				g.lastRead = now
			}
			stop := h.h.turn(h.frames)
			clear(h.frames)
			h.frames = h.frames[:0]
			if stop {
				lp.remove(h)
			}
		}
		lp.kickRound()
		clear(lp.rx[:n])
	}
}

// dispatch hands each frame to its hosted group; frames of no hosted
// group are dropped (the source passes the frames of its open groups).
func (lp *Loop) dispatch(live []*hosted, frames []link.Frame) {
	for i := range frames {
		grp, ok := link.FrameGroup(frames[i].Data)
		if !ok {
			continue
		}
		for _, h := range live {
			if h.group == grp {
				h.frames = append(h.frames, frames[i])
				break
			}
		}
	}
}

// remove ends hosted group h's loop: it is dropped from the Loop, and
// what its own loop does once it ends is done (Group.end).
func (lp *Loop) remove(h *hosted) {
	lp.mu.Lock()
	for i, x := range lp.hosts {
		if x == h {
			lp.hosts = append(lp.hosts[:i], lp.hosts[i+1:]...)
			break
		}
	}
	lp.mu.Unlock()
	h.h.g.end()
}

// Waker ends a wait on a Loop's source (link/mux's Mux, a link.Waker).
type Waker interface{ Wake() }
