package orca

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// State transfer to members that join a running group (Config.Views;
// docs/orca.md, "State transfer"). Every member with the objects' state
// keeps the same account of who still needs it (needState: a function of
// the views and the messages, like everything else a replica does). At
// each view that leaves someone without it, the donor — the member with
// the lowest id that has the state and was in the view before — takes a
// snapshot in OnEvent for that view, before the next delivery, and sends
// it to each such member through the total order in state parts. The
// joiner holds back every message from its view on, restores the
// snapshot when its last part arrives, and replays what it held. A view
// that comes before the last part starts the transfer over at its place.

// memberKey is a member's run: its id and incarnation.
type memberKey struct {
	id          frame.MemberID
	incarnation uint32
}

func (k memberKey) compare(l memberKey) int {
	return cmp.Or(cmp.Compare(k.id, l.id), cmp.Compare(k.incarnation, l.incarnation))
}

// heldMsg is a message a joiner holds until it has the state.
type heldMsg struct {
	from frame.MemberID
	data []byte
}

// The state part: msgState, view u32, to u16, incarnation u32, last u8,
// bytes of the snapshot.
const stateHeaderLen = 1 + 4 + 2 + 4 + 1

type statePart struct {
	view uint32
	to   memberKey
	last bool
	data []byte
}

func parseStatePart(b []byte) (statePart, error) {
	if len(b) < stateHeaderLen {
		return statePart{}, fmt.Errorf("orca: state part of %d bytes, shorter than its %d-byte header", len(b), stateHeaderLen)
	}
	return statePart{view: binary.BigEndian.Uint32(b[1:]),
		to:   memberKey{frame.MemberID(binary.BigEndian.Uint16(b[5:])), binary.BigEndian.Uint32(b[7:])},
		last: b[11] != 0, data: b[stateHeaderLen:]}, nil
}

// stateParts cuts a snapshot for member to, taken at view, into messages
// of at most maxMessage bytes.
func stateParts(snapshot []byte, view uint32, to memberKey, maxMessage int) [][]byte {
	chunk := maxMessage - stateHeaderLen
	var msgs [][]byte
	for off := 0; off < len(snapshot); off += chunk {
		end := min(off+chunk, len(snapshot))
		b := make([]byte, 0, stateHeaderLen+end-off)
		b = append(b, msgState)
		b = binary.BigEndian.AppendUint32(b, view)
		b = binary.BigEndian.AppendUint16(b, uint16(to.id))
		b = binary.BigEndian.AppendUint32(b, to.incarnation)
		last := byte(0)
		if end == len(snapshot) {
			last = 1
		}
		b = append(append(b, last), snapshot[off:end]...)
		msgs = append(msgs, b)
	}
	return msgs
}

func keysOf(v *reliable.ViewInfo) map[memberKey]bool {
	m := map[memberKey]bool{}
	for _, mi := range v.Members {
		m[memberKey{mi.ID, mi.Incarnation}] = true
	}
	return m
}

// viewInstalled takes a new view (n.mu held) and returns the state parts
// to send, if this member is the donor.
func (n *Node) viewInstalled(ev reliable.Event) [][]byte {
	v := ev.View
	if !n.cfg.Views || v == nil {
		return nil
	}
	prev := n.view
	n.view = v
	n.self = ev.Member
	n.members = n.members[:0]
	for _, m := range v.Members {
		n.members = append(n.members, m.ID)
	}
	slices.Sort(n.members)
	n.rank = slices.Index(n.members, n.self)
	for _, m := range v.Members {
		if m.ID == n.self {
			n.key = memberKey{m.ID, m.Incarnation}
		}
	}
	now := keysOf(v)
	switch {
	case prev == nil && reliable.ViewNumber(v.ID) == 1:
		// A founding view (its id numbers it first, whichever member
		// founded it): every member starts from the initial states.
		n.haveState()
		return nil
	case prev == nil:
		n.awaiting, n.firstView = true, now
		return nil
	case n.awaiting:
		// The transfer starts over at this view's place: what was held
		// and received of the state so far is from before it.
		n.held, n.stateBuf = nil, nil
		for k := range n.firstView {
			if k != n.key && now[k] {
				return nil
			}
		}
		n.failLocked(fmt.Errorf("orca: member %d joined in a view with %d others, and none of them is in view %d: no member is left to send it the objects' state", n.self, len(n.firstView)-1, v.ID))
		return nil
	}
	before := keysOf(prev)
	for k := range now {
		if !before[k] {
			n.needState[k] = true
		}
	}
	for k := range n.needState {
		if !now[k] {
			delete(n.needState, k)
		}
	}
	if len(n.needState) == 0 {
		return nil
	}
	donor := frame.NoMember
	for _, m := range v.Members { // by id
		k := memberKey{m.ID, m.Incarnation}
		if before[k] && !n.needState[k] {
			donor = m.ID
			break
		}
	}
	if donor != n.self {
		return nil
	}
	snap, err := n.snapshotLocked()
	if err != nil {
		n.failLocked(fmt.Errorf("orca: taking the snapshot for the members that joined in view %d: %w", v.ID, err))
		return nil
	}
	var msgs [][]byte
	for _, k := range slices.SortedFunc(keys(n.needState), memberKey.compare) {
		msgs = append(msgs, stateParts(snap, v.ID, k, n.maxMessage)...)
	}
	n.stats.StateSent++
	return msgs
}

// haveState marks the node as holding the objects' state (n.mu held):
// WaitState returns.
func (n *Node) haveState() {
	n.awaiting = false
	n.hasState = true
	n.updateWritable()
	if n.stateWake != nil {
		close(n.stateWake)
		n.stateWake = nil
	}
}

// statePartLocked takes a state part delivered at a member with the state
// (n.mu held): the transfer to its addressee is done at its last part of
// this view.
func (n *Node) statePartLocked(from frame.MemberID, data []byte) {
	p, err := parseStatePart(data)
	if err != nil {
		n.bad(from, err.Error())
		return
	}
	if p.last && n.view != nil && p.view == n.view.ID {
		delete(n.needState, p.to)
	}
}

// holdLocked takes a message delivered to a member that waits for the
// state (n.mu held): held, or the last part of its state, which it
// restores before replaying the held messages.
func (n *Node) holdLocked(from frame.MemberID, data []byte) {
	n.held = append(n.held, heldMsg{from: from, data: slices.Clone(data)})
	if len(data) == 0 || data[0] != msgState {
		return
	}
	p, err := parseStatePart(data)
	if err != nil || p.to != n.key || n.view == nil || p.view != n.view.ID {
		return
	}
	if len(n.stateBuf)+len(p.data) > maxState {
		n.failLocked(fmt.Errorf("orca: the state sent to member %d is longer than %d bytes", n.self, maxState))
		return
	}
	n.stateBuf = append(n.stateBuf, p.data...)
	if !p.last {
		return
	}
	if err := n.restoreLocked(n.stateBuf, false); err != nil {
		n.failLocked(fmt.Errorf("orca: the state member %d sent in view %d: %w", from, p.view, err))
		return
	}
	n.stats.StateReceived = uint64(len(n.stateBuf))
	held := n.held
	n.held, n.stateBuf = nil, nil
	n.haveState()
	for _, m := range held {
		n.deliverLocked(m.from, m.data)
	}
}

// maxState bounds a state transfer's snapshot at the joiner.
const maxState = 1 << 30

// WaitState blocks until the node holds the objects' state: at once in a
// static group or a founding view; in a member that joined a running
// group (Config.Views), until the state transfer is done. Join calls it;
// a node built with NewHosted calls it before its program runs. It
// returns ctx's error, or why the node stopped.
func (n *Node) WaitState(ctx context.Context) error {
	if err := n.env.Wait(ctx, stateWaiter{n}); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

type stateWaiter struct{ n *Node }

func (w stateWaiter) Ready() bool {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.n.hasState || w.n.err != nil
}

func (w stateWaiter) Wake() <-chan struct{} {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hasState || n.err != nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	if n.stateWake == nil {
		n.stateWake = make(chan struct{})
	}
	return n.stateWake
}

func (w stateWaiter) String() string {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if w.n.view == nil {
		return "waiting for its first view"
	}
	return fmt.Sprintf("waiting for the objects' state in view %d (%d messages held, %d bytes of state)", w.n.view.ID, len(w.n.held), len(w.n.stateBuf))
}
