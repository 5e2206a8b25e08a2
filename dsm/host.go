package dsm

import (
	"context"
	"fmt"

	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// Env is what a Node runs on. Join runs it on a live reliable.Group; a
// program that drives the reliable layer itself — the deterministic
// simulator in dsm/dsmsim, which steps reliable.Drivers in virtual time —
// implements Env and builds the node with NewHosted.
type Env interface {
	// Kick says the outbox has messages (Host.Next); called with the
	// node's lock held, it must not block or call the node.
	Kick()
	// Wait blocks until Host.Ready(w) reports true, or ctx ends (it
	// returns ctx.Err()), or the node stops (it returns the node's error).
	Wait(ctx context.Context, w Wait) error
	// Flush sends the outbox now if it can; called after a
	// synchronisation message was queued.
	Flush()
	// Leave leaves the group, once the node's outbox is empty (Node.Exit).
	Leave() error
	// GroupStats are the reliable layer's counters (Stats.Group).
	GroupStats() reliable.Stats
	// Open opens the channel of segment key among members (sorted,
	// this member included; Config.Channels): a reliable group whose
	// deliveries go to Host.DeliverOn(core.SegmentChannel(key)) and
	// events to Host.OnEventOn(core.SegmentChannel(key)) (a barrier
	// counts a member gone only once the channel removed it), and
	// which carries Next's messages for that channel. Called with the
	// node's lock held, when a barrier fixed the segment's membership;
	// it must not call the node. Envs of nodes without Channels may
	// return an error.
	Open(key uint32, members []frame.MemberID) error
}

// Host is the driving side of a node built by NewHosted: what its Env
// calls to feed the node the reliable layer's deliveries and events, to
// take the node's messages out of its outbox, and to learn whether a
// blocked call may go on.
type Host struct {
	n   *Node
	cfg Config
}

// NewHosted returns a node that runs on env, and the Host through which
// env drives it. Set the reliable layer's Config.Deliver and OnEvent to
// h.Deliver and h.OnEvent, then call h.Start before the node is used.
func NewHosted(env Env, cfg Config) (*Node, *Host) {
	n := &Node{env: env}
	return n, &Host{n: n, cfg: cfg}
}

// Start builds the node's protocol state once the group is known: self
// is this member's id, members every member's (self included; ranks
// follow their order), maxMessage the largest message the reliable layer
// carries (Driver.MaxMessage).
func (h *Host) Start(self frame.MemberID, members []frame.MemberID, maxMessage int) error {
	c, err := core.New(coreConfig(self, members, maxMessage, h.cfg))
	if err != nil {
		return err
	}
	h.n.mu.Lock()
	h.n.install(c, self, outboxLimit(h.cfg))
	h.n.mu.Unlock()
	return nil
}

// StartView is Start for a group with views (reliable.Config.Views): the
// node starts from v, the first view its group installed (the driver's
// first ViewInstalled, handed to OnEvent after StartView), as Join's node
// does: the computation's members are v's. A view that is not the group's
// founding one (FoundingView) may have admitted this process after the
// computation began: the node then crosses no barrier until a member
// confirms it, and fails with a *LateJoinError if a member refuses it.
func (h *Host) StartView(self frame.MemberID, v reliable.ViewInfo, maxMessage int) error {
	ids := make([]frame.MemberID, 0, len(v.Members))
	for _, m := range v.Members {
		ids = append(ids, m.ID)
	}
	c, err := core.New(coreConfigView(self, ids, maxMessage, h.cfg, !FoundingView(v.ID)))
	if err != nil {
		return err
	}
	h.n.mu.Lock()
	h.n.install(c, self, outboxLimit(h.cfg))
	h.n.firstView = v.ID
	h.n.mu.Unlock()
	return nil
}

// Deliver is the reliable layer's Config.Deliver: updates are applied
// from data straight into segment memory; data is not kept.
func (h *Host) Deliver(from frame.MemberID, data []byte) { h.n.deliver(from, data) }

// DeliverOn is Deliver for the group of channel ch (Env.Open).
func (h *Host) DeliverOn(ch core.Channel) func(from frame.MemberID, data []byte) {
	return func(from frame.MemberID, data []byte) { h.n.deliverOn(ch, from, data) }
}

// OnEventOn is OnEvent for the group of channel ch (Env.Open): a member
// that the channel removes is gone from it, which a barrier waits for
// (core.ChannelGone).
func (h *Host) OnEventOn(ch core.Channel) func(reliable.Event) {
	return func(ev reliable.Event) { h.n.channelEvent(ch, ev) }
}

// OnEvent is the reliable layer's Config.OnEvent: a member's leaving or
// failure releases what waits for it; reliable.SelfLeft completes
// WaitLeave.
func (h *Host) OnEvent(ev reliable.Event) {
	if ev.Kind == reliable.SelfLeft {
		h.n.mu.Lock()
		h.n.left = true
		h.n.mu.Unlock()
	}
	h.n.event(ev)
}

// Ready reports whether the call waiting for w may go on, and the
// node's error if it stopped (then ok is true too).
func (h *Host) Ready(w Wait) (ok bool, err error) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.n.ready(w), h.n.err
}

// Next is the outbox's first message, if there is one, and the channel
// it goes on (core.Global unless Config.Channels). It stays untouched,
// and first, until Sent.
func (h *Host) Next() ([]byte, core.Channel, bool) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	msg, ok := h.n.core.Next()
	return msg, h.n.core.NextChannel(), ok
}

// Sent removes Next's message from the outbox once the reliable layer
// has taken it (or dropped it: an unreliable write's loss). A non-nil err
// is why it could not be sent: the node stops with it.
func (h *Host) Sent(err error) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	h.n.core.Sent()
	if err != nil {
		h.n.fail(fmt.Errorf("dsm: member %d: sending: %w", h.n.self, err))
	}
	h.n.changed()
}

// Blocked says where a call waiting for w is stuck, for a deadlock
// report: w, or the barrier and the members it still waits for.
func (h *Host) Blocked(w Wait) string {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	if h.n.core != nil {
		if id, in := h.n.core.InBarrier(); in {
			if !h.n.core.Confirmed() {
				return fmt.Sprintf("at barrier %d waiting for a member to confirm it (its first view was not the group's founding one)", id)
			}
			return fmt.Sprintf("at barrier %d waiting for members %v", id, h.n.core.Waiting())
		}
	}
	return w.String()
}

// WaitLeave is what Env.Leave waits for when it starts the leave and
// returns before it is done: Host.OnEvent's reliable.SelfLeft.
func WaitLeave() Wait { return Wait{kind: waitLeft} }
