package invariant

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// IsSeqType reports the sequencer protocol's frame types.
func IsSeqType(t frame.Type) bool {
	switch t {
	case frame.SeqRequest, frame.SeqData, frame.SeqAccept, frame.SeqStatusRequest,
		frame.SeqStatusReply, frame.SeqRetransmit, frame.SeqElection, frame.SeqMember:
		return true
	}
	return false
}

// IsPBPType reports PBP's frame types.
func IsPBPType(t frame.Type) bool {
	switch t {
	case frame.Data, frame.Ack, frame.Nack, frame.Heartbeat, frame.Leave:
		return true
	}
	return false
}

type senderKey struct {
	id  frame.MemberID
	inc uint32
}

// acks is PBP's delivery-order check, the one a capture without delivery
// records allows: a member's ack vector entry for j is its exp_seqno[j],
// so it has delivered every seq of j before it, in order, which it can
// only have done if its interface received them. So every ack a member
// sends must be covered by what its own interface received, and never
// move backwards. It needs direction (a node's own interface).
type acks struct {
	window int
	// Baseline of member j's sequence: the lowest Data seq of j seen so
	// far (any incarnation), or a lower ack for j within maxJump (the
	// receivers' exp_seqno before their first delivery).
	dataLow, ackLow map[streamKey]uint32
	received        map[recvKey]*received
	state           map[ackKey]*ackState
	// seqSenders: members that sent sequencer frames so far; their Leave
	// carries a delivered cursor, not PBP acks.
	seqSenders bounded[senderKey, struct{}]
}

func (a *acks) init(window int) {
	a.window = window
	a.dataLow, a.ackLow = map[streamKey]uint32{}, map[streamKey]uint32{}
	a.received, a.state = map[recvKey]*received{}, map[ackKey]*ackState{}
	a.seqSenders = newBounded[senderKey, struct{}](window)
}

// streamKey is one member's stream of Data in one view (a group that
// changes runs each view with fresh sequence numbers; 0 for a group that
// never changes).
type streamKey struct {
	id   frame.MemberID
	view uint32
}

type recvKey struct {
	iface  int
	sender streamKey
}

// received is what one interface received of one member: the seqs not
// yet covered by an ack its member sent (covered ones are forgotten).
type received struct {
	seqs map[uint32]struct{}
	high uint32
	// forgot: the set outgrew the window and was dropped; seqs up to
	// forgotUpTo are not judged.
	forgot     bool
	forgotUpTo uint32
}

type ackKey struct {
	iface int
	me, j frame.MemberID
	view  uint32
}

type ackState struct {
	last    uint32
	frame   int
	has     bool
	bad     bool   // reported once per (member, sender)
	checked uint32 // every seq before it was judged
	hasChk  bool
}

func lower(m map[streamKey]uint32, id streamKey, q uint32) {
	if old, ok := m[id]; !ok || frame.SeqLess(q, old) {
		m[id] = q
	}
}

func (a *acks) baseOf(j streamKey) (uint32, bool) {
	b, ok := a.dataLow[j]
	if !ok {
		return 0, false
	}
	if m, ok := a.ackLow[j]; ok && frame.SeqLess(m, b) && frame.SeqDiff(b, m) < maxJump {
		b = m
	}
	return b, true
}

// isPBP reports a frame of PBP: one of its types, and not the Leave of a
// member that sent sequencer frames.
func (a *acks) isPBP(v frame.View) bool {
	if !IsPBPType(v.Type()) {
		return false
	}
	_, seq := a.seqSenders.get(senderKey{v.Sender(), v.Incarnation()})
	return v.Type() != frame.Leave || !seq
}

func (c *Checker) checkAcks(f *Frame, ifc *iface, report reportFunc, doubt func(string)) {
	v := f.View
	if IsSeqType(v.Type()) {
		c.seqSenders.put(senderKey{v.Sender(), v.Incarnation()}, struct{}{})
		return
	}
	if v.Type() == frame.ViewRelay && f.Dir == DirIn {
		// A relayed Data frame (a view change's, or a static group's
		// relay of a silent member's: pbp.Config.Relay) is received as
		// its sender's would be.
		if in := v.RelayFrame(); len(in) > 0 && in.Type() == frame.Data && in.Sender() != ifc.self {
			c.receive(f.Iface, ifc, streamKey{in.Sender(), in.ViewID()}, in.Seq())
		}
		return
	}
	if !c.isPBP(v) {
		return
	}
	me, view := v.Sender(), v.ViewID()
	if v.Type() == frame.Data {
		lower(c.dataLow, streamKey{me, view}, v.Seq())
	}
	for i := range v.AckCount() {
		if j := frame.MemberID(int(v.AckBase()) + i); j != me {
			lower(c.ackLow, streamKey{j, view}, v.Ack(i))
		}
	}
	switch f.Dir {
	case DirIn:
		if v.Type() == frame.Data && me != ifc.self {
			c.receive(f.Iface, ifc, streamKey{me, view}, v.Seq())
		}
		return
	case DirOut:
	default:
		return
	}
	if ifc.self == frame.NoMember || view != 0 && me != ifc.self {
		ifc.self = me // a group that changes: this process's id in this view
	}
	if me != ifc.self {
		return // judged for the interface's own member only
	}
	for i := range v.AckCount() {
		j := frame.MemberID(int(v.AckBase()) + i)
		if j == me {
			continue
		}
		ack := v.Ack(i)
		k := ackKey{f.Iface, me, j, view}
		st := c.state[k]
		if st == nil {
			st = &ackState{}
			c.state[k] = st
		}
		if st.has && frame.SeqLess(ack, st.last) {
			report(KindOrder, fmt.Sprintf("at %s: member %d's ack for member %d went back from %d to %d", ifc.name, me, j, st.last, ack), st.frame, f.N)
		}
		if !st.bad {
			c.covered(f, ifc, st, streamKey{j, view}, ack, report, doubt)
		}
		if !st.has || frame.SeqLess(st.last, ack) {
			st.last, st.frame, st.has = ack, f.N, true
		}
	}
}

// receive records that interface i received seq q of stream j.
func (c *Checker) receive(i int, ifc *iface, j streamKey, q uint32) {
	if st := c.state[ackKey{i, ifc.self, j.id, j.view}]; st != nil && st.hasChk && frame.SeqLess(q, st.checked) {
		return // already judged
	}
	k := recvKey{i, j}
	r := c.received[k]
	if r == nil {
		r = &received{seqs: map[uint32]struct{}{}, high: q}
		c.received[k] = r
	}
	if c.window > 0 && len(r.seqs) >= c.window {
		r.forgot, r.forgotUpTo, r.seqs = true, r.high, map[uint32]struct{}{}
	}
	r.seqs[q] = struct{}{}
	if frame.SeqLess(r.high, q) {
		r.high = q
	}
}

// covered judges the seqs of j before ack, which the member acknowledges.
func (c *Checker) covered(f *Frame, ifc *iface, st *ackState, j streamKey, ack uint32, report reportFunc, doubt func(string)) {
	from, known := c.baseOf(j)
	if st.hasChk && frame.SeqLess(from, st.checked) {
		from = st.checked
	}
	if !known || !frame.SeqLess(from, ack) {
		return
	}
	st.checked, st.hasChk = ack, true
	if frame.SeqDiff(ack, from) > maxJump {
		return // a new sequence space, not a range to walk
	}
	r := c.received[recvKey{f.Iface, j}]
	missing, has := uint32(0), false
	for q := from; q != ack; q++ {
		if r != nil {
			if _, ok := r.seqs[q]; ok {
				delete(r.seqs, q)
				continue
			}
			if r.forgot && !frame.SeqLess(r.forgotUpTo, q) {
				continue
			}
		}
		if !has {
			missing, has = q, true
		}
	}
	if !has {
		return
	}
	report(KindOrder, fmt.Sprintf("at %s: member %d acknowledges member %d up to seq %d%s, so it delivered seq %d, which its interface had not received", ifc.name, ifc.self, j.id, ack-1, inView(j.view), missing), f.N)
	if d := ifc.doubt(); d != "" {
		doubt(d)
		return
	}
	st.bad = true
}

// inView names a view in a message, for groups that change.
func inView(v uint32) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(" in view %d", v)
}
