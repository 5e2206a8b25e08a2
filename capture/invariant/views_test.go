package invariant

import (
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// vframe feeds one frame of a group that changes: sender id.inc in view w
// (its MAC names the id), at interface iface.
func (f *feed) vframe(iface int, dir Dir, id frame.MemberID, inc, w uint32, h frame.Header, b frame.Body) {
	f.t.Helper()
	h.Group, h.Sender, h.Incarnation, h.ViewID = 7, id, inc, w
	mac := [6]byte{2, 0, 0, 0, byte(inc), byte(id)}
	data := frame.AppendEthernet(nil, frame.Broadcast, mac, frame.EtherType)
	data, err := frame.Append(data, &h, b)
	if err != nil {
		f.t.Fatal(err)
	}
	_, body, err := frame.SplitEthernet(data, frame.EtherType)
	if err != nil {
		f.t.Fatal(err)
	}
	v, err := frame.Parse(body)
	if err != nil {
		f.t.Fatal(err)
	}
	f.n++
	f.got = append(f.got, f.c.Check(&Frame{N: f.n, Time: t0, Iface: iface, Dir: dir, Data: data, View: v})...)
}

func mi(id frame.MemberID, inc uint32) frame.MemberInfo {
	return frame.MemberInfo{ID: id, MAC: [6]byte{2, 0, 0, 0, byte(inc), byte(id)}, Incarnation: inc}
}

// commit feeds a ViewCommit of view next from base, sent by coord (a
// member of base) in base.
func (f *feed) commit(coord frame.MemberID, next, base uint32, members []frame.MemberInfo, cuts ...frame.Cut) {
	f.t.Helper()
	f.vframe(0, DirIn, coord, 1, base, frame.Header{}, &frame.ViewCommitBody{Next: next, Base: base, Members: members, Cuts: cuts})
}

func (f *feed) vdata(dir Dir, id frame.MemberID, inc, w, seq uint32) {
	f.t.Helper()
	f.vframe(0, dir, id, inc, w, frame.Header{Seq: seq, AckBase: 0, Acks: []uint32{0, 0, 0}}, &frame.Payload{T: frame.Data, Data: []byte{byte(seq)}})
}

func (f *feed) want(kind string, frames string, detail ...string) {
	f.t.Helper()
	if len(f.got) != 1 {
		f.t.Fatalf("violations %v, want one %s", f.got, kind)
	}
	v := f.got[0]
	if v.Kind != kind || !strings.Contains(v.String(), kind+" [frames "+frames+"]") {
		f.t.Fatalf("violation %v, want %s [frames %s]", v, kind, frames)
	}
	for _, d := range detail {
		if !strings.Contains(v.Detail, d) {
			f.t.Errorf("violation %q does not say %q", v.Detail, d)
		}
	}
	f.got = nil
}

func (f *feed) none() {
	f.t.Helper()
	if len(f.got) != 0 {
		f.t.Fatalf("violations %v in a correct sequence", f.got)
	}
}

// Two ViewCommits of one id with other members are two views with one id;
// the same commit repeated (the coordinator repeats it until every member
// is heard) is not.
func TestViewAgreement(t *testing.T) {
	f := newFeed(t, Options{}, "n1")
	three := []frame.MemberInfo{mi(0, 1), mi(1, 1), mi(2, 1)}
	f.commit(0, 5, 4, three, frame.Cut{Member: 0, Cut: 3}, frame.Cut{Member: 1, Cut: 2}, frame.Cut{Member: 2, Cut: 0})
	f.commit(0, 5, 4, three, frame.Cut{Member: 0, Cut: 3}, frame.Cut{Member: 1, Cut: 2}, frame.Cut{Member: 2, Cut: 0})
	f.none()
	f.commit(1, 5, 4, three[1:], frame.Cut{Member: 1, Cut: 2})
	f.want(KindViewAgreement, "1,3", "two views with one id: frame 1 commits view 5 with members [0.1 1.1 2.1] from view 4, frame 3 commits members [1.1 2.1] from view 4")
	f.commit(2, 5, 4, three[2:]) // reported once per id
	f.none()

	// Same members, other cuts: the members would not agree on what
	// view 4 delivered.
	f.commit(0, 7, 6, three, frame.Cut{Member: 0, Cut: 3})
	f.commit(0, 7, 6, three, frame.Cut{Member: 0, Cut: 4})
	f.want(KindViewAgreement, "5,6", "frame 6 commits cuts")
}

// A frame of a view from a sender its commit does not list is reported,
// whether the commit comes first in the capture or later; a restarted
// member's new incarnation is not its old one.
func TestViewMember(t *testing.T) {
	f := newFeed(t, Options{}, "n1")
	f.vdata(DirIn, 2, 9, 5, 0) // before the commit: judged when it comes
	f.commit(0, 5, 4, []frame.MemberInfo{mi(0, 1), mi(1, 1), mi(2, 1)})
	f.want(KindViewMember, "1,2", "frame 1 is Data of view 5 from member 2.9, which view 5's commit (frame 2) does not list: members [0.1 1.1 2.1]")
	f.vdata(DirIn, 1, 1, 5, 0)
	f.vframe(0, DirIn, 2, 1, 5, frame.Header{Seq: 0, AckBase: 0, Acks: []uint32{0, 0, 0}}, &frame.Empty{T: frame.Heartbeat})
	f.none()
	f.vframe(0, DirIn, 3, 1, 5, frame.Header{Seq: 0, AckBase: 0, Acks: []uint32{0, 0, 0}}, &frame.Empty{T: frame.Heartbeat})
	f.want(KindViewMember, "2,5", "frame 5 is Heartbeat of view 5 from member 3.1")
	// A static group (view 0) is not judged.
	f.vdata(DirIn, 9, 1, 0, 0)
	f.none()
}

// A process's view frames never go back to an older view; its data
// frames may be of its current view's base (the old core repairs) but
// of no older view. Only its own interface shows the order.
func TestViewOrder(t *testing.T) {
	f := newFeed(t, Options{}, "n1", "n2")
	f.commit(0, 5, 4, []frame.MemberInfo{mi(0, 1), mi(1, 1)})
	f.vframe(0, DirOut, 1, 1, 5, frame.Header{}, &frame.ViewFlushBody{Next: 6, Base: 5, Coord: 0, Sent: 0})
	f.vdata(DirOut, 1, 1, 4, 7) // view 5's base: the old core repairs
	f.vdata(DirOut, 1, 1, 5, 0)
	f.vframe(1, DirIn, 1, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 0}) // received late: not judged
	f.none()
	f.vdata(DirOut, 1, 1, 3, 7)
	f.want(KindViewOrder, "2,6", "sent Data of view 3 in frame 6, after a view frame of view 5 in frame 2; view 5 was formed from view 4 (commit in frame 1)")
	f.vframe(0, DirOut, 1, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 0})
	f.want(KindViewOrder, "2,7", "sent ViewFlush of view 4 in frame 7, after a view frame of view 5 in frame 2: its view went back")
	// Another incarnation of the same MAC is another process.
	f.vframe(0, DirOut, 1, 2, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 0})
	f.none()
}

// A member that stays in the next view sent nothing in the base past
// its cut, and flushed exactly its cut; a departing member's frames are
// relayed only below its cut. Judged in either order.
func TestViewCut(t *testing.T) {
	members := []frame.MemberInfo{mi(0, 1), mi(1, 1), mi(2, 7)} // 2 restarted: 2.1 departs
	cuts := []frame.Cut{{Member: 0, Cut: 4, Holder: 0, From: 4}, {Member: 1, Cut: 10, Holder: 1, From: 10}, {Member: 2, Cut: 3, Holder: 0, From: 1}}

	f := newFeed(t, Options{}, "n1")
	f.vdata(DirIn, 1, 1, 4, 9)
	f.vdata(DirIn, 2, 1, 4, 5) // departing: may have sent past its cut
	f.vframe(0, DirIn, 1, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 10})
	f.commit(0, 5, 4, members, cuts...)
	f.none()
	f.vdata(DirIn, 1, 1, 4, 10)
	f.want(KindViewCut, "4,5", "member 1.1 stays in view 5, whose commit (frame 4) cuts its messages of view 4 at seq 10, but frame 5 is its Data seq 10 of view 4")
	f.vdata(DirIn, 1, 1, 4, 11) // reported once per stream
	f.none()

	f = newFeed(t, Options{}, "n1")
	f.vframe(0, DirIn, 0, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 3})
	f.commit(0, 5, 4, members, cuts...)
	f.want(KindViewCut, "1,2", "cuts its messages of view 4 at 4, but its ViewFlush (frame 1) says it sent 3")

	f = newFeed(t, Options{}, "n1")
	f.vframe(0, DirIn, 1, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 10})
	f.vframe(0, DirIn, 1, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 6, Base: 4, Coord: 1, Sent: 11})
	f.want(KindViewCut, "1,2", "member 1.1 flushed view 4 twice with different counts of sent messages: 10 in frame 1, 11 in frame 2")

	relay := func(f *feed, seq uint32) {
		h := frame.Header{Group: 7, Sender: 2, Incarnation: 1, ViewID: 4, Seq: seq, Acks: []uint32{0, 0, 0}}
		in, err := frame.Append(nil, &h, &frame.Payload{T: frame.Data, Data: []byte("last words")})
		if err != nil {
			t.Fatal(err)
		}
		f.vframe(0, DirIn, 0, 1, 5, frame.Header{}, &frame.ViewRelayBody{Base: 4, Frame: in})
	}
	f = newFeed(t, Options{}, "n1")
	f.commit(0, 5, 4, members, cuts...)
	relay(f, 2)
	f.none()
	relay(f, 3)
	f.want(KindViewCut, "1,3", "member 2.1 leaves view 4 for view 5, whose commit (frame 1) cuts its messages at seq 3, but frame 3 relays its Data seq 3")
	f = newFeed(t, Options{}, "n1")
	relay(f, 3)
	f.commit(0, 5, 4, members, cuts...)
	f.want(KindViewCut, "1,2", "frame 1 relays its Data seq 3")
}

// A ViewFlush that says a member left the base cleanly: no commit from
// the base keeps that member, and one that leaves it out cuts its
// messages no lower than the Flush's sender, which stays, delivered them.
// Judged in either order; a restart of the leaver (a new incarnation with
// its id) is another member.
func TestViewLeft(t *testing.T) {
	base := []frame.MemberInfo{mi(0, 1), mi(1, 1), mi(2, 1)}
	stay := []frame.MemberInfo{mi(0, 1), mi(1, 1)}
	cuts := func(left uint32) []frame.Cut {
		return []frame.Cut{{Member: 0, Cut: 4, Holder: 0, From: 4}, {Member: 1, Cut: 10, Holder: 1, From: 10}, {Member: 2, Cut: left, Holder: 1, From: 5}}
	}
	flush := func(f *feed) {
		f.vframe(0, DirIn, 1, 1, 4, frame.Header{}, &frame.ViewFlushBody{Next: 5, Base: 4, Coord: 0, Sent: 10,
			Delivered: []frame.Delivered{{Member: 0, Next: 4}, {Member: 2, Gone: true, Left: true, Next: 6}}})
	}

	f := newFeed(t, Options{}, "n1")
	f.commit(0, 4, 3, base)
	flush(f)
	f.commit(0, 5, 4, stay, cuts(6)...)
	f.none()
	flush(f) // a repeat
	f.none()

	f = newFeed(t, Options{}, "n1")
	f.commit(0, 4, 3, base)
	flush(f)
	f.commit(0, 5, 4, base, cuts(6)...)
	f.want(KindViewLeft, "2,3", "member 2.1 left view 4 cleanly, as the ViewFlush of member 1.1 (frame 2) says, but the commit of view 5 from it (frame 3) keeps it")

	f = newFeed(t, Options{}, "n1")
	f.commit(0, 5, 4, stay, cuts(5)...)
	flush(f)
	f.want(KindViewLeft, "1,2", "member 2 left view 4 cleanly, as the ViewFlush of member 1.1 (frame 2) says, having delivered its messages up to 6; member 1.1 stays in view 5, whose commit (frame 1) cuts them at 5")

	// Member 2 restarted (incarnation 7) and admitted under its id: the
	// leaver, 2.1, departs; its cut is judged, not its id's presence.
	f = newFeed(t, Options{}, "n1")
	f.commit(0, 4, 3, base)
	flush(f)
	f.commit(0, 5, 4, append(stay, mi(2, 7)), cuts(6)...)
	f.none()
	// Without the base's commit the restart cannot be told from the
	// leaver: nothing is judged of it.
	f = newFeed(t, Options{}, "n1")
	flush(f)
	f.commit(0, 5, 4, append(stay, mi(2, 1)), cuts(5)...)
	f.none()
}

// A change as reliable/view makes it, frame by frame: a founding, a join,
// a crash with a relay, the old core repairing after the install. Nothing
// is reported.
func TestViewsClean(t *testing.T) {
	f := newFeed(t, Options{}, "n0", "n1")
	two := []frame.MemberInfo{mi(0, 1), mi(1, 1)}
	f.vframe(0, DirOut, frame.NoMember, 1, 0, frame.Header{}, &frame.ViewJoinBody{Requested: frame.NoMember, Nonce: 1, ConfigHash: 2, MTU: 1500})
	f.vframe(0, DirOut, frame.NoMember, 1, 0, frame.Header{}, &frame.ViewCommitBody{Next: 1, Members: two})
	for q := range uint32(3) {
		f.vdata(DirOut, 0, 1, 1, q)
		f.vframe(1, DirOut, 1, 1, 1, frame.Header{Seq: q, AckBase: 0, Acks: []uint32{0, 0}}, &frame.Payload{T: frame.Data, Data: []byte{1}})
	}
	three := append(two, mi(2, 5))
	f.vframe(0, DirOut, 0, 1, 1, frame.Header{}, &frame.ViewPrepareBody{Next: 2, Base: 1, Members: three})
	f.vframe(1, DirOut, 1, 1, 1, frame.Header{}, &frame.ViewFlushBody{Next: 2, Base: 1, Coord: 0, Sent: 3, Delivered: []frame.Delivered{{Member: 0, Next: 3}}})
	f.vframe(0, DirOut, 0, 1, 1, frame.Header{}, &frame.ViewCommitBody{Next: 2, Base: 1, Members: three, Cuts: []frame.Cut{{Member: 0, Cut: 3, Holder: 0, From: 3}, {Member: 1, Cut: 3, Holder: 1, From: 3}}})
	f.vdata(DirOut, 2, 5, 2, 0)
	f.vdata(DirOut, 0, 1, 1, 2) // a repair by view 2's base core
	f.vdata(DirOut, 0, 1, 2, 0)
	// Member 1 crashes; 0 and 2 go on, 0 relays 1's last frame to 2.
	f.vframe(0, DirOut, 0, 1, 2, frame.Header{}, &frame.ViewPrepareBody{Next: 3, Base: 2, Members: []frame.MemberInfo{mi(0, 1), mi(2, 5)}})
	h := frame.Header{Group: 7, Sender: 1, Incarnation: 1, ViewID: 2, Seq: 0, Acks: []uint32{0, 0, 0}}
	in, err := frame.Append(nil, &h, &frame.Payload{T: frame.Data, Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	f.vframe(0, DirOut, 0, 1, 2, frame.Header{}, &frame.ViewCommitBody{Next: 3, Base: 2, Members: []frame.MemberInfo{mi(0, 1), mi(2, 5)},
		Cuts: []frame.Cut{{Member: 0, Cut: 1, Holder: 0, From: 1}, {Member: 1, Cut: 1, Holder: 0, From: 0}, {Member: 2, Cut: 1, Holder: 2, From: 1}}})
	f.vframe(0, DirOut, 0, 1, 2, frame.Header{}, &frame.ViewRelayBody{Base: 2, Frame: in})
	f.vdata(DirOut, 0, 1, 3, 0)
	f.none()
}
