package orca

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
)

// Env is what a Node runs on: the group's total order. Join runs a node
// on a live reliable.Group; a program that drives the reliable layer
// itself — the deterministic simulator in orca/orcasim, which steps
// reliable.Drivers in virtual time — implements Env and builds the node
// with NewHosted.
type Env interface {
	// Send broadcasts msg in the group's total order (this member
	// included); msg may be reused when Send returns. It blocks while
	// the send window is full, or returns ctx's error.
	Send(ctx context.Context, msg []byte) error
	// Wait blocks until w.Ready() reports true, or ctx ends (it returns
	// ctx.Err()), or the group stops (it returns why).
	Wait(ctx context.Context, w Waiter) error
	// Leave leaves the group once everything this member sent is held
	// by every live member (reliable's Stats.Protocol.Unsettled is 0):
	// under Resilience SafeSequencer a message delivered back to its
	// sender is held by the sequencer only, and would be lost if the
	// sender left and the sequencer then crashed.
	Leave() error
	// GroupStats are the reliable layer's counters (Stats.Group).
	GroupStats() reliable.Stats
}

// TrySender is an Env that can also send without waiting, from within
// Host.Deliver: TrySend takes msg at once or returns an error (a full
// send window, a stopped group) and does not keep it. A node on such an
// Env coalesces writes (docs/orca.md, "Batches"): while one of its
// messages is in flight, the writes its callers start go into one batch
// message, sent when it is full, or by Deliver once a message arrives.
type TrySender interface {
	TrySend(msg []byte) error
}

// Host is the driving side of a node built by NewHosted: what its Env
// calls to hand the node the group's deliveries and events.
type Host struct {
	n *Node
}

// NewHosted returns a node that runs on env, and the Host through which
// env drives it. Set the reliable layer's Config.Deliver and OnEvent to
// h.Deliver and h.OnEvent (with Config.Order reliable.Total), then call
// h.Start before the node is used.
func NewHosted(env Env, cfg Config) (*Node, *Host, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, nil, err
	}
	n := newNode(env, cfg)
	return n, &Host{n: n}, nil
}

func checkConfig(cfg Config) error {
	if cfg.Group.Deliver != nil || cfg.Group.OnEvent != nil {
		return fmt.Errorf("%w: orca sets Config.Group.Deliver and OnEvent itself; leave them nil", reliable.ErrConfig)
	}
	if cfg.Group.Views && !cfg.Views {
		return fmt.Errorf("%w: Config.Group.Views without orca's Config.Views: set Config.Views, which sets it and transfers the objects' state to members that join", reliable.ErrConfig)
	}
	if cfg.MaxWrite < 0 {
		return fmt.Errorf("orca: Config.MaxWrite is %d, want >= 0 (0 means %d)", cfg.MaxWrite, DefaultMaxWrite)
	}
	return nil
}

// Start sets the group once it is known: self is this member's id,
// members every member's (self included; ranks follow their order),
// maxMessage the largest message the reliable layer carries.
func (h *Host) Start(self frame.MemberID, members []frame.MemberID, maxMessage int) error {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.n.start(self, members, maxMessage)
}

// Deliver is the reliable layer's Config.Deliver: each message of the
// total order, applied to the replicas in its place; data is not kept.
func (h *Host) Deliver(from frame.MemberID, data []byte) { h.n.deliver(from, data) }

// OnEvent is the reliable layer's Config.OnEvent: reliable.SelfLeft
// completes the leave; reliable.SelfRemoved stops the node.
func (h *Host) OnEvent(ev reliable.Event) { h.n.event(ev) }

// Left reports whether this member's leave is done (SelfLeft seen).
func (h *Host) Left() bool {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.n.left
}

func (n *Node) deliver(from frame.MemberID, data []byte) {
	if h := n.testDeliver; h != nil {
		h(from, data, n.deliverNow)
		return
	}
	n.deliverNow(from, data)
}

func (n *Node) deliverNow(from frame.MemberID, data []byte) {
	n.mu.Lock()
	own := from == n.self && n.try != nil
	if own {
		n.out.sent(-1)
	}
	n.delivering = true
	n.deliverLocked(from, data)
	n.delivering = false
	n.unlockObject()
	wake1, wake := n.wake1, n.wakes
	n.wake1 = wakeUp{}
	if len(wake) > 0 {
		n.wakes = nil
	}
	n.mu.Unlock()
	if n.try != nil {
		n.flushFromDeliver(own, false)
	}
	// The callers of the writes just applied and the guarded reads of
	// the objects they changed, once the replica let go of the locks
	// they take next.
	if wake1.ch == nil {
		return
	}
	wake1.send()
	for i, w := range wake {
		w.send()
		wake[i] = wakeUp{}
	}
	if len(wake) > 0 {
		n.mu.Lock()
		if n.wakes == nil {
			n.wakes = wake[:0] // for the next delivery
		}
		n.mu.Unlock()
	}
}

func (n *Node) event(ev reliable.Event) {
	n.mu.Lock()
	var state [][]byte
	defer func() {
		n.mu.Unlock()
		if len(state) > 0 {
			n.sendState(state)
		}
		if n.try != nil {
			// A change of the group: what is in flight may come back
			// otherwise; send the batch rather than wait for it.
			n.flushFromDeliver(false, true)
		}
	}()
	switch ev.Kind {
	case reliable.ViewInstalled:
		state = n.viewInstalled(ev)
	case reliable.SelfLeft:
		n.left = true
	case reliable.SelfRemoved:
		n.failLocked(fmt.Errorf("%w: %w: %s", ErrClosed, reliable.ErrRemoved, ev.Reason))
	}
}

// sendState sends the state parts of a transfer, together (n.send's lock),
// after the handler of the view that called for them: on a goroutine of
// its own where the Env's Send may wait for the order (a live group's
// event loop must not wait for itself), else at once.
func (n *Node) sendState(msgs [][]byte) {
	send := func() {
		n.sendMu.Lock()
		defer n.sendMu.Unlock()
		for _, m := range msgs {
			n.out.sent(1)
			if err := n.env.Send(context.Background(), m); err != nil {
				n.mu.Lock()
				n.failLocked(fmt.Errorf("orca: sending the objects' state: %w", err))
				n.mu.Unlock()
				return
			}
			n.countSent(1, len(m), 1)
		}
	}
	if a, ok := n.env.(interface{ goSend(func()) }); ok {
		a.goSend(send)
		return
	}
	send()
}

// Join joins the reliable group described by cfg.Group over l, in total
// order (registration when cfg.Group.Members is empty, with exactly one
// member having cfg.Group.Server), and returns the member's node once the
// group has started.
func Join(ctx context.Context, l link.Link, cfg Config) (*Node, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	e := &groupEnv{}
	n := newNode(e, cfg)
	e.n = n
	gcfg := cfg.Group
	gcfg.Order = reliable.Total
	gcfg.Views = cfg.Views
	gcfg.Deliver = n.deliver
	gcfg.OnEvent = n.event
	// The group may deliver as soon as Join returns: deliveries wait for
	// n.mu until the node has started, so they come after, in order.
	n.mu.Lock()
	g, err := reliable.Join(ctx, l, gcfg)
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	e.g = g
	go e.watch()
	var ids []frame.MemberID
	for _, m := range g.Members() {
		ids = append(ids, m.ID)
	}
	err = n.start(g.Self(), ids, g.MaxMessage())
	n.mu.Unlock()
	if err != nil {
		g.Close()
		return nil, err
	}
	if err := n.WaitState(ctx); err != nil {
		g.Close()
		return nil, fmt.Errorf("orca: waiting for the objects' state: %w", err)
	}
	return n, nil
}

// Waiter is what a blocked call waits for (Env.Wait): a write's
// application here, or a read's guard.
type Waiter interface {
	// Ready reports whether the call may go on (or the node stopped). It
	// takes the node's locks itself: call it without them.
	Ready() bool
	// Wake returns a channel that becomes ready to receive from when
	// Ready may have become true: take it before calling Ready, wait on
	// it if Ready said no, and take it again after it fired (it may fire
	// while Ready is still false: check again). (A write's caller has a
	// channel of its own, kept for its next write, that receives one
	// value; a guarded read's is its object's, closed on every write to
	// it.)
	Wake() <-chan struct{}
	// String says what the call waits for, for a deadlock report.
	String() string
}

// groupEnv runs a node over a live reliable.Group: writes are sent on
// the caller's goroutine (Group.Send, with its back-pressure), messages
// are applied in the group's Deliver, on its event loop, and a waiting
// caller is woken by its Waiter's channel.
type groupEnv struct {
	n *Node
	g *reliable.Group
}

func (e *groupEnv) Send(ctx context.Context, msg []byte) error { return e.g.Send(ctx, msg) }

// TrySend is Group.TrySend: a batch sent from Deliver, on the event loop,
// which must not wait for its own send window.
func (e *groupEnv) TrySend(msg []byte) error { return e.g.TrySend(msg) }

// goSend runs a send the event loop calls for (a state transfer) on a
// goroutine of its own: Group.Send waits for the loop.
func (e *groupEnv) goSend(send func()) { go send() }

// Wait needs no case for the group's end: watch fails the node then,
// which wakes every waiter. A waiter whose ctx cannot end (a Call with
// context.Background, the common case) so blocks in a receive from its
// own channel: a select over it and the group's Done channel, which every
// waiter of the node shares, locked both channels at every wait.
func (e *groupEnv) Wait(ctx context.Context, w Waiter) error {
	done := ctx.Done()
	for {
		// Taken before Ready: a change from here on closes it.
		wake := w.Wake()
		if w.Ready() {
			return nil
		}
		if done == nil {
			<-wake
			if w.Ready() {
				// Woken for good: no second Wake, whose
				// bookkeeping a write's caller would pay
				// after its wake-up.
				return nil
			}
			continue
		}
		select {
		case <-wake:
			if w.Ready() {
				return nil
			}
			continue
		case <-done:
		}
		if w.Ready() {
			return nil
		}
		return ctx.Err()
	}
}

// watch fails the node when the group stops (Close, or the group's
// failure), so that its waiters return (failLocked wakes them all).
func (e *groupEnv) watch() {
	<-e.g.Done()
	err := ErrClosed
	if gerr := e.g.Err(); gerr != nil && !errors.Is(gerr, reliable.ErrClosed) {
		err = fmt.Errorf("%w: %w", ErrClosed, gerr)
	}
	e.n.mu.Lock()
	e.n.failLocked(err)
	e.n.mu.Unlock()
}

func (e *groupEnv) Leave() error {
	timeout := e.n.cfg.Group.CloseTimeout
	if timeout == 0 {
		timeout = reliable.DefaultCloseTimeout
	}
	for end := time.Now().Add(timeout); e.g.Err() == nil && time.Now().Before(end); time.Sleep(time.Millisecond) {
		if e.g.Stats().Protocol.Unsettled == 0 {
			break
		}
	}
	return e.g.Close()
}

func (e *groupEnv) GroupStats() reliable.Stats { return e.g.Stats() }
