package dsm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/reliable"
)

// groupEnv runs a Node over a live reliable.Group. Updates are applied in
// the group's Deliver, on its event loop; a sender goroutine (the
// thesis's DSM thread, fig. 5.4) moves the outbox into Group.Send in
// order, so that neither Deliver (which may not call the group) nor a
// reply queued by it waits for the send window, and full update buffers
// leave while the program computes. Synchronisation calls send on the
// program's goroutine when the sender is idle (flush).
type groupEnv struct {
	n *Node
	g *reliable.Group

	// Channels: the mux over the node's link, the node's Config, and
	// the segment channels' groups (guarded by n.mu).
	mux      *mux.Mux
	cfg      Config
	channels map[core.Channel]*reliable.Group
	// loop takes the turns of every group of the node (nil: each group
	// runs its own loop; without channels, or with Auth).
	loop *reliable.Loop
	// members is the global group's member list (static or
	// registered), from which a channel's static list is taken.
	members []frame.MemberInfo

	// Guarded by n.mu: changedc is closed and replaced when something
	// changes while waiters > 0: the blocked calls parked on it, of which
	// barrierWaiters wait at a barrier (a signal wakes them all and
	// resets both).
	changedc       chan struct{}
	waiters        int
	barrierWaiters int

	sendMu sync.Mutex // held by whoever drains the outbox
	// noUnreliable: the group has no Unreliable level (Order Total);
	// unreliable writes go reliably (guarded by sendMu).
	noUnreliable bool
	kickc        chan struct{} // the outbox has messages
	stop         chan struct{} // ends the sender
	stopped      chan struct{} // closed when the sender has ended
	left         bool
	expect       bool // Barrier's hints reach the group (Config.NoExpect unset)
}

// Expect passes Barrier's hint to the group (reliable.Group.Expect).
func (e *groupEnv) Expect(from frame.MemberID, n int) {
	if e.expect {
		e.g.Expect(from, n)
	}
}

func (e *groupEnv) Kick() {
	select {
	case e.kickc <- struct{}{}:
	default:
	}
}

// onlyBarrier reports whether there are waiters and every one waits at
// a barrier (with n.mu held).
func (e *groupEnv) onlyBarrier() bool {
	return e.waiters > 0 && e.waiters == e.barrierWaiters
}

func (e *groupEnv) signal() {
	if e.waiters > 0 {
		e.n.wakeups++
		e.waiters, e.barrierWaiters = 0, 0
		close(e.changedc)
		e.changedc = make(chan struct{})
	}
}

func (e *groupEnv) Wait(ctx context.Context, w Wait) error {
	n := e.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for !n.ready(w) {
		if n.err != nil {
			return n.err
		}
		ch := e.changedc
		e.waiters++
		if w.kind == waitBarrier {
			e.barrierWaiters++
		}
		n.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-e.g.Done():
			err = ErrClosed
			if gerr := e.g.Err(); gerr != nil {
				err = fmt.Errorf("%w: %w", ErrClosed, gerr)
			}
		}
		n.mu.Lock()
		if ch == e.changedc { // not signalled: ctx or the group ended
			e.waiters--
			if w.kind == waitBarrier {
				e.barrierWaiters--
			}
		}
		if err != nil {
			if n.ready(w) {
				return nil
			}
			return err
		}
	}
	return n.err
}

// send is the sender goroutine.
func (e *groupEnv) send() {
	defer close(e.stopped)
	for {
		select {
		case <-e.kickc:
		case <-e.stop:
			return
		}
		e.sendMu.Lock()
		err := e.drain()
		e.sendMu.Unlock()
		if err != nil {
			return
		}
	}
}

// flush sends the outbox on the caller's goroutine unless the sender
// goroutine is at it: a barrier or lock message then leaves without a
// goroutine hand-off (called without n.mu). The caller sends the frames
// too (Group.SendNow; on a Loop Loop.SendBatch, whose Sends do not wake
// the Loop for frames it sends itself): with one P the loop's goroutine
// would send them only once the program blocks, after its next step's
// computation if the barrier is crossed at once.
func (e *groupEnv) Flush() {
	if !e.sendMu.TryLock() {
		e.Kick()
		return
	}
	if e.loop != nil {
		e.loop.SendBatch(func() { e.drain() })
		e.sendMu.Unlock()
		return
	}
	e.drain()
	e.sendMu.Unlock()
	if e.g != nil {
		e.g.SendNow()
	}
}

// drain moves the outbox into Group.Send in order (with sendMu held, so
// that one goroutine at a time takes messages from the outbox).
func (e *groupEnv) drain() error {
	n := e.n
	for {
		n.mu.Lock()
		msg, ok := n.core.Next()
		g, ch := e.g, n.core.NextChannel()
		if ch != core.Global {
			g = e.channels[ch]
		}
		n.mu.Unlock()
		if !ok {
			return nil
		}
		var err error
		if g == nil {
			err = fmt.Errorf("the channel of segment %d is not open", ch.Key())
		} else {
			// The core keeps msg untouched until Sent; Send copies it.
			err = e.sendMsg(g, msg)
		}
		n.mu.Lock()
		n.core.Sent()
		if err != nil {
			n.fail(fmt.Errorf("dsm: member %d: sending: %w", n.self, err))
		}
		// Room in the outbox, or the outbox drained, is what a
		// blocked Write or Exit waits for; a barrier waits for none.
		if !n.barrierWaits() {
			n.changed()
		}
		n.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// sendMsg sends one DSM message: the updates of unreliable writes
// (DSM_WRT_UNREL) at the group's Unreliable level, once, never
// acknowledged or repaired (a registered FIFO group has it); the rest, and
// those too in a group without the level (Order Total), reliably.
func (e *groupEnv) sendMsg(g *reliable.Group, msg []byte) error {
	if core.Unreliable(msg) && !e.noUnreliable {
		err := g.SendUnreliable(msg)
		if !errors.Is(err, reliable.ErrNoUnreliable) {
			return err
		}
		e.noUnreliable = true
	}
	return g.Send(context.Background(), msg)
}

func (e *groupEnv) Leave() error {
	if e.left {
		return nil
	}
	e.left = true
	close(e.stop)
	<-e.stopped
	// The segment channels first: a member that sees this one leave the
	// global group stops waiting for it, by then its last markers and
	// updates are delivered (Close waits for their acknowledgement).
	e.n.mu.Lock()
	chs := make([]*reliable.Group, 0, len(e.channels))
	for _, g := range e.channels {
		chs = append(chs, g)
	}
	e.n.mu.Unlock()
	var errs []error
	for _, g := range chs {
		errs = append(errs, g.Close())
	}
	errs = append(errs, e.g.Close())
	if e.loop != nil {
		e.loop.Close()
	}
	return errors.Join(errs...)
}

// Open joins segment key's channel: a reliable group of the segment's
// members on a view of the node's mux (with n.mu held; reliable.Join with
// a static member list returns at once).
func (e *groupEnv) Open(key uint32, members []frame.MemberID) error {
	if e.mux == nil {
		return errors.New("the node has no channels (Config.Channels)")
	}
	gcfg := e.cfg.ChannelConfig(key, e.members, members, e.n.self)
	ch := core.SegmentChannel(key)
	n := e.n
	gcfg.Deliver = func(from frame.MemberID, data []byte) { n.deliverOn(ch, from, data) }
	gcfg.OnEvent = func(ev reliable.Event) { n.channelEvent(ch, ev) }
	l, err := e.mux.Open(gcfg.Group)
	if err != nil {
		return err
	}
	// (A failed Join leaves the view open: the node fails with the
	// error and its link goes with it.)
	var g *reliable.Group
	if e.loop != nil {
		g, err = reliable.JoinLoop(context.Background(), e.loop, l, gcfg)
	} else {
		g, err = reliable.Join(context.Background(), l, gcfg)
	}
	if err != nil {
		return err
	}
	e.channels[ch] = g
	return nil
}

// ChannelStats are the reliable layer's counters of each segment channel
// (Stats.Channels).
func (e *groupEnv) ChannelStats() map[uint32]reliable.Stats {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	if len(e.channels) == 0 {
		return nil
	}
	out := map[uint32]reliable.Stats{}
	for ch, g := range e.channels {
		out[ch.Key()] = g.Stats()
	}
	return out
}

func (e *groupEnv) GroupStats() reliable.Stats { return e.g.Stats() }

// group is the group of channel ch (with n.mu held), nil if not open.
func (e *groupEnv) group(ch core.Channel) *reliable.Group {
	if ch == core.Global {
		return e.g
	}
	return e.channels[ch]
}

// HoldFrom holds from's deliveries on channel ch (Holder).
func (e *groupEnv) HoldFrom(ch core.Channel, from frame.MemberID) bool {
	g := e.group(ch)
	return g != nil && g.HoldFrom(from)
}

// SendLane sends a lock request at the global group's Unreliable level
// (Laner): at once, in no window, so that a hold of this member at a
// peer does not keep it. A group without the level (Order Total) has
// no holds either: the request's copy in the stream is enough.
func (e *groupEnv) SendLane(msg []byte) error {
	return e.g.SendUnreliable(msg)
}

// Holding reports whether ch's group holds from's messages now (Laner).
func (e *groupEnv) Holding(ch core.Channel, from frame.MemberID) bool {
	g := e.group(ch)
	return g != nil && g.Holding(from)
}

// ReleaseFrom ends HoldFrom (Holder).
func (e *groupEnv) ReleaseFrom(ch core.Channel, from frame.MemberID) {
	if g := e.group(ch); g != nil {
		g.ReleaseFrom(from)
	}
}
