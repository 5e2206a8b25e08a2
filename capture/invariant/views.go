package invariant

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rbcast/rbcast/frame"
)

// The view protocol's invariants (reliable/view, docs/membership.md), as
// the frames of a group that changes show them. Every one is judged from
// what frames say of themselves and of each other, in whatever order a
// capture holds them (a commit captured after the frames of its view
// judges them when it comes), except the order of one process's own
// frames, which only its own interface shows (DirOut, or a capture
// without direction: one point on the wire, where frames of one sender
// keep their order).

// IsViewType reports the view protocol's frame types (0x20–0x27; a Datagram, 0x28, is judged as data).
func IsViewType(t frame.Type) bool {
	switch t {
	case frame.ViewJoin, frame.ViewPrepare, frame.ViewFlush, frame.ViewCommit,
		frame.ViewRelay, frame.ViewRefuse, frame.GroupRemove, frame.ViewSuspect:
		return true
	}
	return false
}

// IsViewFrame reports whether v belongs to the view protocol: a frame of
// a view type, except a ViewRelay of view 0, which a static group's
// members send to relay a silent member's frames (pbp.Config.Relay).
func IsViewFrame(v frame.View) bool {
	return IsViewType(v.Type()) && !(v.Type() == frame.ViewRelay && v.ViewID() == 0)
}

// views finds view-agreement, view-member, view-order and view-cut.
type views struct {
	// commits: the first ViewCommit of each view id; byBase: the ids
	// committed from each base.
	commits bounded[uint32, commitRec]
	byBase  bounded[uint32, []uint32]
	// pending: frames of views whose commit the capture has not shown
	// yet, judged when it does.
	pending bounded[uint32, []pendingFrame]
	// sent: the highest Data seq of each sender incarnation in each view;
	// relayed: the same of the frames relayed for departing members.
	sent, relayed bounded[viewSender, seqSeen]
	// flushed: each sender incarnation's count of sent messages in a
	// base, as its first ViewFlush for that base said.
	flushed bounded[viewSender, seqSeen]
	// procs: what one process (MAC, incarnation) sent, as its own
	// interface saw it.
	procs bounded[procKey, procState]
	// left: per base view and member id, the ViewFlushes that say the
	// member left the base cleanly (one per reporting sender).
	left bounded[leftKey, []leftReport]
}

func (w *views) init(window int) {
	w.commits = newBounded[uint32, commitRec](window)
	w.byBase = newBounded[uint32, []uint32](window)
	w.pending = newBounded[uint32, []pendingFrame](window)
	w.sent = newBounded[viewSender, seqSeen](window)
	w.relayed = newBounded[viewSender, seqSeen](window)
	w.flushed = newBounded[viewSender, seqSeen](window)
	w.procs = newBounded[procKey, procState](window)
	w.left = newBounded[leftKey, []leftReport](window)
}

// Violation kinds of the view protocol.
const (
	// KindViewAgreement: two ViewCommits of one view id that differ in
	// the members, the base or the cuts: two views with one id.
	KindViewAgreement = "view-agreement"
	// KindViewMember: a frame of a view from a sender (id, incarnation)
	// that the view's commit does not list.
	KindViewMember = "view-member"
	// KindViewOrder: a process's view protocol frames go back to an
	// older view, or it sends a data protocol frame of a view older than
	// the one before its latest (a member runs its current view's core
	// and the previous one's, while the others complete it, and no
	// other).
	KindViewOrder = "view-order"
	// KindViewCut: a frame that contradicts a ViewCommit's cut: a member
	// that stays sent Data past its cut in the base view, or flushed
	// another count of sent messages than its cut; a relayed frame of a
	// departing member at or past its cut.
	KindViewCut = "view-cut"
	// KindViewLeft: a ViewFlush says a member left the base cleanly (its
	// Leave taken, with everything it sent before), and a commit from
	// that base keeps the member, or cuts its messages below what the
	// Flush's sender, which stays, delivered of them.
	KindViewLeft = "view-left"
)

type leftKey struct {
	view uint32
	id   frame.MemberID
}

// leftReport: a ViewFlush (frame) of sender id.inc saying a member left,
// delivered up to next; reported: a violation was reported for it.
type leftReport struct {
	id       frame.MemberID
	inc      uint32
	next     uint32
	frame    int
	reported bool
}

type commitRec struct {
	frame    int
	base     uint32
	members  []frame.MemberInfo
	cuts     []frame.Cut
	reported bool
}

type viewSender struct {
	view uint32
	id   frame.MemberID
	inc  uint32
}

type seqSeen struct {
	seq      uint32
	frame    int
	reported bool
}

type pendingFrame struct {
	id    frame.MemberID
	inc   uint32
	typ   frame.Type
	frame int
}

type procKey struct {
	iface int
	mac   [6]byte
	inc   uint32
}

// procState: the highest view of the process's view protocol frames;
// whether a view frame, or a data frame, of it was reported.
type procState struct {
	view                   uint32
	frame                  int
	has                    bool
	reported, reportedData bool
}

// member reports whether the commit lists member id with incarnation inc.
func (r *commitRec) member(id frame.MemberID, inc uint32) bool {
	for _, m := range r.members {
		if m.ID == id && m.Incarnation == inc {
			return true
		}
	}
	return false
}

// cut returns the commit's cut for member id of its base.
func (r *commitRec) cut(id frame.MemberID) (uint32, bool) {
	for _, x := range r.cuts {
		if x.Member == id {
			return x.Cut, true
		}
	}
	return 0, false
}

func memberList(ms []frame.MemberInfo) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d.%d", m.ID, m.Incarnation)
	}
	b.WriteByte(']')
	return b.String()
}

// checkViews checks f against the view protocol's invariants.
func (c *Checker) checkViews(f *Frame, report reportFunc) {
	v := f.View
	t, w := v.Type(), v.ViewID()
	if w == 0 && !IsViewFrame(v) {
		return // a group that never changes
	}
	c.checkOrder(f, report)
	if w != 0 && v.Sender() != frame.NoMember {
		c.checkMember(f.N, w, v.Sender(), v.Incarnation(), t, report)
	}
	switch t {
	case frame.ViewCommit:
		c.commit(f, report)
	case frame.Data:
		c.checkSent(streamSent, f.N, viewSender{w, v.Sender(), v.Incarnation()}, v.Seq(), report)
	case frame.ViewFlush:
		c.checkFlush(f, report)
	case frame.ViewRelay:
		in := v.RelayFrame()
		if in == nil || in.Type() != frame.Data || in.ViewID() == 0 {
			return
		}
		c.checkMember(f.N, in.ViewID(), in.Sender(), in.Incarnation(), frame.ViewRelay, report)
		c.checkSent(streamRelayed, f.N, viewSender{in.ViewID(), in.Sender(), in.Incarnation()}, in.Seq(), report)
	}
}

// checkMember: the sender of a frame of view w is a member of w.
func (c *Checker) checkMember(n int, w uint32, id frame.MemberID, inc uint32, t frame.Type, report reportFunc) {
	r, ok := c.commits.get(w)
	if !ok {
		ps, _ := c.pending.get(w)
		for _, p := range ps {
			if p.id == id && p.inc == inc {
				return
			}
		}
		c.pending.put(w, append(ps, pendingFrame{id, inc, t, n}))
		return
	}
	if !r.member(id, inc) {
		report(KindViewMember, memberDetail(w, id, inc, t, n, &r), r.frame, n)
	}
}

func memberDetail(w uint32, id frame.MemberID, inc uint32, t frame.Type, n int, r *commitRec) string {
	what := fmt.Sprintf("%v", t)
	if t == frame.ViewRelay {
		what = "a relayed Data"
	}
	return fmt.Sprintf("frame %d is %s of view %d from member %d.%d, which view %d's commit (frame %d) does not list: members %s",
		n, what, w, id, inc, w, r.frame, memberList(r.members))
}

// commit records a ViewCommit, compares it with an earlier one of the
// same id, and judges what was waiting for it.
func (c *Checker) commit(f *Frame, report reportFunc) {
	_, b := f.View.Decode()
	body, ok := b.(*frame.ViewCommitBody)
	if !ok {
		return
	}
	old, seen := c.commits.get(body.Next)
	if seen {
		if old.reported || old.base == body.Base && slices.Equal(old.members, body.Members) && slices.Equal(old.cuts, body.Cuts) {
			return
		}
		old.reported = true
		c.commits.put(body.Next, old)
		what := fmt.Sprintf("members %s from view %d, frame %d commits members %s from view %d", memberList(old.members), old.base, f.N, memberList(body.Members), body.Base)
		if old.base == body.Base && slices.Equal(old.members, body.Members) {
			what = fmt.Sprintf("cuts %v, frame %d commits cuts %v", old.cuts, f.N, body.Cuts)
		}
		report(KindViewAgreement, fmt.Sprintf("two views with one id: frame %d commits view %d with %s", old.frame, body.Next, what), old.frame, f.N)
		return
	}
	r := commitRec{frame: f.N, base: body.Base, members: body.Members, cuts: body.Cuts}
	c.commits.put(body.Next, r)
	nexts, _ := c.byBase.get(body.Base)
	c.byBase.put(body.Base, append(nexts, body.Next))
	if ps, ok := c.pending.get(body.Next); ok {
		for _, p := range ps {
			if !r.member(p.id, p.inc) {
				report(KindViewMember, memberDetail(body.Next, p.id, p.inc, p.typ, p.frame, &r), p.frame, f.N)
			}
		}
		c.pending.put(body.Next, nil)
	}
	if body.Base == 0 {
		return // founded: no base
	}
	for _, x := range body.Cuts {
		for _, m := range body.Members {
			if m.ID == x.Member {
				c.againstCut(streamSent, viewSender{body.Base, m.ID, m.Incarnation}, body.Next, &r, report)
				c.againstCut(streamFlushed, viewSender{body.Base, m.ID, m.Incarnation}, body.Next, &r, report)
			}
		}
	}
	c.judgeLeft(body.Base, body.Next, &r, report)
	// Relayed frames of a sender that departs: of any incarnation the
	// commit does not keep.
	var gone []viewSender
	for k := range c.relayed.m {
		if k.view == body.Base && !r.member(k.id, k.inc) {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(a, b viewSender) int { return int(a.id) - int(b.id) })
	for _, k := range gone {
		c.againstCut(streamRelayed, k, body.Next, &r, report)
	}
}

// streamKind names what checkSent and againstCut judge of a stream.
type streamKind uint8

const (
	streamSent    streamKind = iota // its Data frames
	streamFlushed                   // its ViewFlushes' count of sent messages
	streamRelayed                   // the frames relayed for it
)

func (c *Checker) stream(kind streamKind) *bounded[viewSender, seqSeen] {
	switch kind {
	case streamFlushed:
		return &c.flushed
	case streamRelayed:
		return &c.relayed
	}
	return &c.sent
}

// againstCut judges what was recorded of stream k (sent, flushed or
// relayed) against commit r of view next.
func (c *Checker) againstCut(kind streamKind, k viewSender, next uint32, r *commitRec, report reportFunc) {
	m := c.stream(kind)
	s, ok := m.get(k)
	if !ok || s.reported {
		return
	}
	cut, ok := r.cut(k.id)
	if !ok {
		return
	}
	var detail string
	switch kind {
	case streamSent:
		if frame.SeqLess(s.seq, cut) {
			return
		}
		detail = fmt.Sprintf("member %d.%d stays in view %d, whose commit (frame %d) cuts its messages of view %d at seq %d, but frame %d is its Data seq %d of view %d",
			k.id, k.inc, next, r.frame, k.view, cut, s.frame, s.seq, k.view)
	case streamFlushed:
		if s.seq == cut {
			return
		}
		detail = fmt.Sprintf("member %d.%d stays in view %d, whose commit (frame %d) cuts its messages of view %d at %d, but its ViewFlush (frame %d) says it sent %d",
			k.id, k.inc, next, r.frame, k.view, cut, s.frame, s.seq)
	case streamRelayed:
		if frame.SeqLess(s.seq, cut) {
			return
		}
		detail = fmt.Sprintf("member %d.%d leaves view %d for view %d, whose commit (frame %d) cuts its messages at seq %d, but frame %d relays its Data seq %d",
			k.id, k.inc, k.view, next, r.frame, cut, s.frame, s.seq)
	}
	s.reported = true
	m.put(k, s)
	report(KindViewCut, detail, r.frame, s.frame)
}

// checkSent records a Data frame's seq (the highest per stream) and
// judges it against the commits from its view.
func (c *Checker) checkSent(kind streamKind, n int, k viewSender, seq uint32, report reportFunc) {
	m := c.stream(kind)
	s, ok := m.get(k)
	switch {
	case !ok:
		s = seqSeen{seq: seq, frame: n}
	case s.reported || !frame.SeqLess(s.seq, seq):
		return
	default:
		s.seq, s.frame = seq, n
	}
	m.put(k, s)
	c.judgeBase(kind, k, report)
}

// judgeBase judges stream k against every commit from its view.
func (c *Checker) judgeBase(kind streamKind, k viewSender, report reportFunc) {
	nexts, _ := c.byBase.get(k.view)
	for _, next := range nexts {
		r, ok := c.commits.get(next)
		if !ok {
			continue
		}
		stays := r.member(k.id, k.inc)
		if stays == (kind == streamRelayed) {
			continue
		}
		c.againstCut(kind, k, next, &r, report)
	}
}

// checkFlush: every ViewFlush of a member for one base says the same
// count of sent messages (it froze before the first), and that count is
// the cut of every commit from the base that keeps the member.
func (c *Checker) checkFlush(f *Frame, report reportFunc) {
	v := f.View
	k := viewSender{v.ViewBase(), v.Sender(), v.Incarnation()}
	c.recordLeft(f, report)
	sent := v.FlushSent()
	s, ok := c.flushed.get(k)
	if !ok {
		c.flushed.put(k, seqSeen{seq: sent, frame: f.N})
		c.judgeBase(streamFlushed, k, report)
		return
	}
	if s.seq != sent && !s.reported {
		s.reported = true
		c.flushed.put(k, s)
		report(KindViewCut, fmt.Sprintf("member %d.%d flushed view %d twice with different counts of sent messages: %d in frame %d, %d in frame %d (it sends nothing after it froze)",
			k.id, k.inc, k.view, s.seq, s.frame, sent, f.N), s.frame, f.N)
	}
}

// recordLeft records the entries of a ViewFlush that say a member left
// the base cleanly, and judges them against the commits from the base.
func (c *Checker) recordLeft(f *Frame, report reportFunc) {
	v := f.View
	base, from, inc := v.ViewBase(), v.Sender(), v.Incarnation()
	dl := v.FlushDelivered()
	for i := range dl.Len() {
		d := dl.At(i)
		if !d.Left {
			continue
		}
		k := leftKey{base, d.Member}
		rs, _ := c.left.get(k)
		if slices.ContainsFunc(rs, func(r leftReport) bool { return r.id == from && r.inc == inc }) {
			continue // a repeat (a member that froze reports the same)
		}
		c.left.put(k, append(rs, leftReport{id: from, inc: inc, next: d.Next, frame: f.N}))
		nexts, _ := c.byBase.get(base)
		for _, next := range nexts {
			if r, ok := c.commits.get(next); ok {
				c.judgeLeft(base, next, &r, report)
			}
		}
	}
}

// judgeLeft judges commit r of view next, from base, against the
// ViewFlushes that say a member left base cleanly. A member that sent its
// Leave takes part in nothing more of the base (it flushes no more, so no
// commit from the base can keep it), and a clean leave's messages reach
// every member that goes on: the cut is at least what any member that
// took the Leave and stays delivered of them.
func (c *Checker) judgeLeft(base, next uint32, r *commitRec, report reportFunc) {
	b, haveBase := c.commits.get(base)
	for _, x := range r.cuts {
		k := leftKey{base, x.Member}
		rs, ok := c.left.get(k)
		if !ok {
			continue
		}
		// The leaver's incarnation: the base's commit lists it; without
		// it, a member of the new view with this id may be its restart.
		var inc uint32
		known := false
		if haveBase {
			for _, m := range b.members {
				if m.ID == x.Member {
					inc, known = m.Incarnation, true
				}
			}
		}
		kept := known && r.member(x.Member, inc)
		departs := known && !kept || !slices.ContainsFunc(r.members, func(m frame.MemberInfo) bool { return m.ID == x.Member })
		for i := range rs {
			l := &rs[i]
			if l.reported {
				continue
			}
			switch {
			case kept:
				report(KindViewLeft, fmt.Sprintf("member %d.%d left view %d cleanly, as the ViewFlush of member %d.%d (frame %d) says, but the commit of view %d from it (frame %d) keeps it",
					x.Member, inc, base, l.id, l.inc, l.frame, next, r.frame), l.frame, r.frame)
			case departs && r.member(l.id, l.inc) && frame.SeqLess(x.Cut, l.next):
				report(KindViewLeft, fmt.Sprintf("member %d left view %d cleanly, as the ViewFlush of member %d.%d (frame %d) says, having delivered its messages up to %d; member %d.%d stays in view %d, whose commit (frame %d) cuts them at %d",
					x.Member, base, l.id, l.inc, l.frame, l.next, l.id, l.inc, next, r.frame, x.Cut), l.frame, r.frame)
			default:
				continue
			}
			l.reported = true
		}
		c.left.put(k, rs)
	}
}

// checkOrder judges the order of a process's own frames.
func (c *Checker) checkOrder(f *Frame, report reportFunc) {
	if f.Dir == DirIn || len(f.Data) < 12 {
		return
	}
	v := f.View
	k := procKey{f.Iface, [6]byte(f.Data[6:12]), v.Incarnation()}
	p, _ := c.procs.get(k)
	w := v.ViewID()
	if IsViewType(v.Type()) {
		switch {
		case !p.has || frame.SeqLess(p.view, w):
			p.view, p.frame, p.has = w, f.N, true
			c.procs.put(k, p)
		case frame.SeqLess(w, p.view) && !p.reported:
			p.reported = true
			c.procs.put(k, p)
			report(KindViewOrder, fmt.Sprintf("the process %s incarnation %d sent %v of view %d in frame %d, after %s of view %d in frame %d: its view went back",
				macString(k.mac), k.inc, v.Type(), w, f.N, "a view frame", p.view, p.frame), p.frame, f.N)
		}
		return
	}
	if !p.has || !frame.SeqLess(w, p.view) || p.reportedData {
		return
	}
	r, ok := c.commits.get(p.view)
	if !ok || r.base == w {
		return // not known; or the view before, whose core still repairs
	}
	p.reportedData = true
	c.procs.put(k, p)
	report(KindViewOrder, fmt.Sprintf("the process %s incarnation %d sent %v of view %d in frame %d, after a view frame of view %d in frame %d; view %d was formed from view %d (commit in frame %d), and a member runs no older core",
		macString(k.mac), k.inc, v.Type(), w, f.N, p.view, p.frame, p.view, r.base, r.frame), p.frame, f.N)
}

func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}
