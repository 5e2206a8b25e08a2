package replay

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	rview "github.com/rbcast/rbcast/reliable/view"
)

// When the application of a re-run process proposed its messages: the
// capture shows when each went out, not when it was proposed.

// ownStream is this process's messages through its FIFO group, in the
// order its Data frames' first transmissions carry them: the order in
// which they were proposed to its membership core. Under Agreed and Safe
// (layered) some are reliable/vtotal's own, order messages and held
// reports, which the re-run makes itself; the others are the
// application's, which the re-run proposes at the first transmission of
// their frame, or earlier when they waited to be sent (the capture does
// not say when the application proposed them):
//   - just before the layer makes a message that follows them in the
//     stream: they were proposed before it;
//   - when the core cannot send (its window is full, or a view change
//     froze it) and their frame goes out at the instant of the next turn:
//     they waited for that turn, with every message of the frames it
//     sends in one burst.
type ownStream struct {
	entries []ownEntry
	frames  []ownFrame
	// changes: when we froze for a change, by its base view (our first
	// ViewPrepare or ViewFlush leaving it).
	changes map[uint32]time.Time
	byN     map[int]int // frame number: index in frames
	layered []int       // the entries the layer makes, in order
	next    int         // the first entry not yet proposed (or made)
	unsent  int         // the first frame the re-run may not have sent
	made    int         // the layer's messages made so far
}

type ownEntry struct {
	app  bool
	safe bool   // sent at the Safe level (vtotal's kind byte said so)
	msg  []byte // the application's message (vtotal's kind byte taken off)
	raw  int    // its length in the frame
}

// proposeFunc hands one of the application's messages, at its level, to
// the re-run.
type proposeFunc func(m []byte, safe bool)

// ownFrame is one of our Data frames: its entries, when it was captured,
// and whether it was full (its successor's first message would not have
// fitted: pbp packs what it is given into the frame it is filling until
// the next message does not fit or the frame goes out).
type ownFrame struct {
	n          int
	view, seq  uint32
	at         time.Time
	start, end int
	full       bool
}

// newOwnStream collects the messages of our Data frames' first
// transmissions in steps; maxPayload is what one frame carries.
func newOwnStream(steps []simStep, ours func(*Record) bool, layered bool, maxPayload int) *ownStream {
	s := &ownStream{byN: map[int]int{}, changes: map[uint32]time.Time{}}
	for _, st := range steps {
		r := st.r
		v := r.View
		if !ours(r) {
			continue
		}
		if t := v.Type(); t == frame.ViewPrepare || t == frame.ViewFlush {
			if _, ok := s.changes[v.ViewBase()]; !ok && v.ViewBase() == v.ViewID() {
				s.changes[v.ViewBase()] = st.at
			}
		}
		if v.Type() != frame.Data || v.Retransmission() {
			continue
		}
		f := ownFrame{n: r.N, view: v.ViewID(), seq: v.Seq(), at: st.at, start: len(s.entries)}
		for _, m := range messagesOf(v) {
			switch {
			case !layered:
				s.entries = append(s.entries, ownEntry{app: true, msg: m, raw: len(m)})
			case len(m) > 0 && (m[0] == vtotalData || m[0] == vtotalSafe):
				s.entries = append(s.entries, ownEntry{app: true, safe: m[0] == vtotalSafe, msg: m[1:], raw: len(m)})
			default:
				s.layered = append(s.layered, len(s.entries))
				s.entries = append(s.entries, ownEntry{raw: len(m)})
			}
		}
		f.end = len(s.entries)
		if k := len(s.frames); k > 0 {
			prev := &s.frames[k-1]
			size := 0
			for _, e := range s.entries[prev.start:prev.end] {
				size += 2 + e.raw
			}
			prev.full = f.end > f.start && size+2+s.entries[f.start].raw > maxPayload
		}
		s.byN[r.N] = len(s.frames)
		s.frames = append(s.frames, f)
	}
	return s
}

// propose hands the application's messages up to the end of frame n's
// that are not proposed yet to propose; it reports whether there were any.
func (s *ownStream) propose(n int, propose proposeFunc) bool {
	i, ok := s.byN[n]
	if !ok {
		return false
	}
	return s.upTo(s.frames[i].end, propose)
}

// upTo proposes the application's messages before entry end not
// proposed yet; it reports whether there were any.
func (s *ownStream) upTo(end int, propose proposeFunc) bool {
	some := false
	for ; s.next < end; s.next++ {
		if e := s.entries[s.next]; e.app {
			propose(e.msg, e.safe)
			some = true
		}
	}
	return some
}

// generated is called as the layer makes its next message: the
// application's messages before it in the stream are proposed first.
func (s *ownStream) generated(propose proposeFunc) {
	if s.made >= len(s.layered) {
		return // more than the capture shows: the re-run diverges
	}
	at := s.layered[s.made]
	s.upTo(at, propose)
	s.next = max(s.next, at+1)
}

// freezing reports whether we froze view at instant at (our first
// ViewPrepare or ViewFlush leaving it went out then).
func (s *ownStream) freezing(view uint32, at time.Time) bool {
	t, ok := s.changes[view]
	return ok && t.Equal(at)
}

// heldAtFreeze reports whether frames of ours may have waited for room
// in view when a turn at instant at froze it (the core could not send
// before the turn): unless the turn sent frames of view — then the window
// opened, and the capture cannot tell whether anything still waited (the
// re-run takes it that nothing did).
func (s *ownStream) heldAtFreeze(view uint32, at time.Time) bool {
	for i := range s.frames {
		if s.frames[i].view == view && s.frames[i].at.Equal(at) {
			return false
		}
	}
	return true
}

// nextView proposes the messages of the frames a view after view sends
// first, in one burst (while each was full): what the core of view holds
// unsent when it freezes goes out there.
func (s *ownStream) nextView(view uint32, propose proposeFunc) {
	i := 0
	for i < len(s.frames) && !frame.SeqLess(view, s.frames[i].view) {
		i++
	}
	if i == len(s.frames) {
		return
	}
	at, end := s.frames[i].at, -1
	for ; i < len(s.frames) && s.frames[i].at.Equal(at); i++ {
		end = s.frames[i].end
		if !s.frames[i].full {
			break
		}
	}
	s.upTo(s.unmade(end), propose)
}

// hasApp reports whether our frame n carries application messages not
// proposed yet.
func (s *ownStream) hasApp(n int) bool {
	i, ok := s.byN[n]
	if !ok {
		return false
	}
	for k := max(s.next, s.frames[i].start); k < s.frames[i].end; k++ {
		if s.entries[k].app {
			return true
		}
	}
	return false
}

// full reports whether our frame n was full (see ownFrame).
func (s *ownStream) full(n int) bool {
	i, ok := s.byN[n]
	return ok && s.frames[i].full
}

// burst proposes, for a turn at instant at of a core that cannot send,
// the messages of the frames that went out at that instant in one burst:
// from the first frame the re-run has not sent (the one numbered sent in
// view, or the first of a later view), while each was full.
func (s *ownStream) burst(at time.Time, view, sent uint32, propose proposeFunc) {
	// The re-run's view and sent only grow: the frames it sent stay sent.
	for s.unsent < len(s.frames) && (s.frames[s.unsent].view == view && frame.SeqLess(s.frames[s.unsent].seq, sent) || frame.SeqLess(s.frames[s.unsent].view, view)) {
		s.unsent++
	}
	i := s.unsent
	end := -1
	for ; i < len(s.frames) && s.frames[i].at.Equal(at); i++ {
		end = s.frames[i].end
		if !s.frames[i].full {
			break
		}
	}
	if end >= 0 {
		s.upTo(s.unmade(end), propose)
	}
}

// unmade caps end at the first message of the layer's not made yet: what
// follows it was proposed after it.
func (s *ownStream) unmade(end int) int {
	if s.made < len(s.layered) {
		return min(end, s.layered[s.made])
	}
	return end
}

// proposeHook is the membership core as reliable/vtotal sees it in a
// re-run: before the layer proposes a message of its own (an order
// message or a held report), internal runs; accepted counts it once the
// core took it.
type proposeHook struct {
	*rview.Core
	internal func()
	accepted func()
}

func (h *proposeHook) Propose(now clock.Time, msg []byte) error {
	return h.propose(now, msg, h.Core.Propose)
}

// ProposePrompt is Propose for what the layer proposes with prompt acks
// (a Safe message, an order message that places one): the embedded
// core's would go around the hook.
func (h *proposeHook) ProposePrompt(now clock.Time, msg []byte) error {
	return h.propose(now, msg, h.Core.ProposePrompt)
}

func (h *proposeHook) propose(now clock.Time, msg []byte, propose func(clock.Time, []byte) error) error {
	if len(msg) > 0 && (msg[0] == vtotalData || msg[0] == vtotalSafe) || h.internal == nil {
		return propose(now, msg)
	}
	h.internal()
	err := propose(now, msg)
	if err == nil && h.accepted != nil {
		h.accepted()
	}
	return err
}

// waiting reports whether a message proposed to the membership core now
// would wait (ok): a change froze it, the view is not accepted yet, or
// its inner core's window is full.
// The next frame it sends is then seq sent of view (frozen: seq 0 of a
// view after it). A frame the layer made in the last Ready waits too, but
// only for the next turn, which sends it and nothing proposed after it;
// a joining process waits, but its application proposes nothing before
// it is in a view (Join returns then).
func waiting(vc *rview.Core) (view, sent uint32, ok bool) {
	in := vc.Inner()
	if in == nil || !vc.Installed() {
		return 0, 0, false
	}
	if f, ok := in.(interface{ Frozen() bool }); ok && f.Frozen() {
		return vc.View().ID + 1, 0, true
	}
	if vc.Unaccepted() {
		// Under a primary component a new view's messages wait in the
		// membership core's queue until a majority of its base is heard
		// in it (reliable/view, accept.go); they go out in that turn.
		return vc.View().ID, in.Sent(), true
	}
	st := in.Stats()
	return vc.View().ID, in.Sent(), st.Window > 0 && st.InFlight >= st.Window
}

// sentIndex finds the re-run's first transmissions of its data frames
// and datagrams by type, view and seq, parsing each sent frame once.
type sentIndex struct {
	etherType uint16
	done      int
	first     map[sentKey]frame.View
}

type sentKey struct {
	t         frame.Type
	view, seq uint32
}

func (x *sentIndex) find(sent []SimSent, t frame.Type, view, seq uint32) (frame.View, bool) {
	if x.first == nil {
		x.first = map[sentKey]frame.View{}
	}
	for ; x.done < len(sent); x.done++ {
		_, body, err := frame.SplitEthernet(sent[x.done].Data, x.etherType)
		if err != nil {
			continue
		}
		v, err := frame.Parse(body)
		if err != nil || v.Retransmission() || v.Type() != frame.Data && v.Type() != frame.Datagram {
			continue
		}
		k := sentKey{v.Type(), v.ViewID(), v.Seq()}
		if _, ok := x.first[k]; !ok {
			x.first[k] = v
		}
	}
	v, ok := x.first[sentKey{t, view, seq}]
	return v, ok
}
