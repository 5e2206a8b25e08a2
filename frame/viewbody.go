package frame

// The view protocol (version 4; reliable/view, docs/membership.md): a
// group's membership is a sequence of views, each run by a fresh protocol
// core; these frames change from one view to the next. Types 0x20–0x2F.

// Body sizes of the view protocol's fixed parts.
const (
	viewJoinLen    = 22 // requested (2), nonce (8), config hash (8), mtu (4)
	viewHeadLen    = 8  // next (4), base (4)
	viewRefuseLen  = 17 // nonce (8), reason (1), config hash (8)
	cutLen         = 12 // member (2), cut (4), holder (2), from (4)
	deliveredLen   = 7  // member (2), flags (1), delivered (4)
	groupRemoveLen = 4
)

// ViewJoinBody asks whoever coordinates a running group for admission
// (or, with no group running, announces the process for the founding).
// The header's Sender is NoMember, its Incarnation the joiner's.
type ViewJoinBody struct {
	Requested  MemberID // the id asked for; NoMember: no wish
	Nonce      uint64   // identifies this joiner's Joins
	ConfigHash uint64   // every setting members must share, hashed
	MTU        uint32
}

func (j *ViewJoinBody) FrameType() Type { return ViewJoin }
func (j *ViewJoinBody) Len() int        { return viewJoinLen }
func (j *ViewJoinBody) AppendBody(b []byte) []byte {
	b = be.AppendUint16(b, uint16(j.Requested))
	b = be.AppendUint64(b, j.Nonce)
	b = be.AppendUint64(b, j.ConfigHash)
	return be.AppendUint32(b, j.MTU)
}
func (j *ViewJoinBody) flags() Flags { return 0 }

// ViewPrepareBody proposes view Next, formed from view Base (0: the
// founding), with Members. The header's Sender is the coordinator.
type ViewPrepareBody struct {
	Next, Base uint32
	Members    []MemberInfo
}

func (p *ViewPrepareBody) FrameType() Type { return ViewPrepare }
func (p *ViewPrepareBody) Len() int        { return viewHeadLen + listHeaderLen + len(p.Members)*memberLen }
func (p *ViewPrepareBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, p.Next)
	b = be.AppendUint32(b, p.Base)
	return appendMembers(b, p.Members)
}
func (p *ViewPrepareBody) flags() Flags { return 0 }

// Delivered is how far a member delivered from one sender of a view: the
// next sequence number of that sender's stream it would deliver (under
// total order, the sequencer's global stream, named by the sequencer).
// Gone says the member's core removed that sender (failed, stalled or
// left): it delivers nothing more of it, so it must not stay. Left says
// more: the sender left cleanly (its core took the sender's Leave, with
// everything it sent before), so the coordinator and any member judging
// a majority count it as left, not as failed; Left implies Gone.
//
// On the wire Gone is bit 0 and Left bit 1 of the entry's flags byte, so
// the byte is 0, 1 or 3 (a Flush from before Left, whose byte is 0 or 1,
// decodes as it did).
type Delivered struct {
	Member MemberID
	Gone   bool
	Left   bool
	Next   uint32
}

// The bits of a Delivered entry's flags byte.
const (
	deliveredGone = 1 << 0
	deliveredLeft = 1 << 1
)

// ViewFlushBody is a member's answer to the ViewPrepare of coordinator
// Coord: it froze its core of view Base, sent Sent messages of its own
// stream in it, and delivered up to Delivered from each sender. Two
// members may prepare the same Next at once (each thinks the other
// failed); Coord tells their Flushes apart.
type ViewFlushBody struct {
	Next, Base uint32
	Coord      MemberID
	Sent       uint32
	Delivered  []Delivered
}

func (f *ViewFlushBody) FrameType() Type { return ViewFlush }
func (f *ViewFlushBody) Len() int {
	return viewHeadLen + flushFixed + listHeaderLen + len(f.Delivered)*deliveredLen
}

// flushFixed: a Flush's coordinator (2) and sent count (4).
const flushFixed = 6

func (f *ViewFlushBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, f.Next)
	b = be.AppendUint32(b, f.Base)
	b = be.AppendUint16(b, uint16(f.Coord))
	b = be.AppendUint32(b, f.Sent)
	b = be.AppendUint16(b, uint16(len(f.Delivered)))
	for _, d := range f.Delivered {
		b = be.AppendUint16(b, uint16(d.Member))
		var flags byte
		if d.Gone || d.Left {
			flags |= deliveredGone
		}
		if d.Left {
			flags |= deliveredLeft
		}
		b = append(b, flags)
		b = be.AppendUint32(b, d.Next)
	}
	return b
}
func (f *ViewFlushBody) flags() Flags { return 0 }

// Cut is where view Base ends for one sender: every member of the next
// view delivers that sender's stream up to (not including) Cut. From is
// the lowest next-to-deliver among the members, and Holder a member that
// delivered up to Cut: for a sender that does not stay, Holder relays
// From..Cut-1 to the others.
type Cut struct {
	Member MemberID
	Cut    uint32
	Holder MemberID
	From   uint32
}

// ViewCommitBody installs view Next, formed from Base, with Members, once
// each member has delivered up to Cuts in Base.
//
// Under a primary component Next is acted on only once a majority of
// BaseCount members of Base is heard in it (docs/membership.md, "Two
// coordinators at once"): BaseCount is how many members Base had (those
// that left it cleanly aside), FromBase the members of Next that count
// toward it (a member of Base, or its restart: the same MAC), as the
// coordinator reckoned them; every member of Next counts by these (a
// joiner knows Base only from them). On the wire FromBase is a bitmap over
// Members (bit 7 of the first byte is Members[0]); an id not in Members
// is not sent.
type ViewCommitBody struct {
	Next, Base uint32
	Members    []MemberInfo
	Cuts       []Cut
	BaseCount  uint16
	FromBase   []MemberID
}

func (c *ViewCommitBody) FrameType() Type { return ViewCommit }
func (c *ViewCommitBody) Len() int {
	return viewHeadLen + listHeaderLen + len(c.Members)*memberLen + listHeaderLen + len(c.Cuts)*cutLen + commitAcceptLen(len(c.Members))
}
func (c *ViewCommitBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, c.Next)
	b = be.AppendUint32(b, c.Base)
	b = appendMembers(b, c.Members)
	b = be.AppendUint16(b, uint16(len(c.Cuts)))
	for _, x := range c.Cuts {
		b = be.AppendUint16(b, uint16(x.Member))
		b = be.AppendUint32(b, x.Cut)
		b = be.AppendUint16(b, uint16(x.Holder))
		b = be.AppendUint32(b, x.From)
	}
	b = be.AppendUint16(b, c.BaseCount)
	var bits byte
	for i, m := range c.Members {
		for _, id := range c.FromBase {
			if id == m.ID {
				bits |= 0x80 >> (i % 8)
				break
			}
		}
		if i%8 == 7 || i == len(c.Members)-1 {
			b = append(b, bits)
			bits = 0
		}
	}
	return b
}

func (c *ViewCommitBody) flags() Flags { return 0 }

// commitAcceptLen is the size of a ViewCommit's acceptance part for a
// view of n members: the base count and the from-base bitmap.
func commitAcceptLen(n int) int { return 2 + (n+7)/8 }

// ViewRelayBody carries a frame of view Base verbatim (a departing
// sender's Data, which the relaying member delivered and others did not).
type ViewRelayBody struct {
	Base  uint32
	Frame []byte // a whole rbcast frame, as Parse accepts it
}

func (r *ViewRelayBody) FrameType() Type { return ViewRelay }
func (r *ViewRelayBody) Len() int        { return 4 + len(r.Frame) }
func (r *ViewRelayBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, r.Base)
	return append(b, r.Frame...)
}
func (r *ViewRelayBody) flags() Flags { return 0 }

// RefuseReason says why a coordinator refused a joiner.
type RefuseReason uint8

const (
	// RefuseConfig: the joiner's configuration hash differs.
	RefuseConfig RefuseReason = 1
	// RefuseFull: no member id is free.
	RefuseFull RefuseReason = 2
	// RefuseRemoved: the group was removed.
	RefuseRemoved RefuseReason = 3
)

func (r RefuseReason) valid() bool { return r >= RefuseConfig && r <= RefuseRemoved }

// ViewRefuseBody refuses one joiner, at its MAC.
type ViewRefuseBody struct {
	Nonce      uint64
	Reason     RefuseReason
	ConfigHash uint64 // the coordinator's
}

func (r *ViewRefuseBody) FrameType() Type { return ViewRefuse }
func (r *ViewRefuseBody) Len() int        { return viewRefuseLen }
func (r *ViewRefuseBody) AppendBody(b []byte) []byte {
	b = be.AppendUint64(b, r.Nonce)
	b = append(b, byte(r.Reason))
	return be.AppendUint64(b, r.ConfigHash)
}
func (r *ViewRefuseBody) flags() Flags { return 0 }

// GroupRemoveBody removes the group: every member stops, and joins are
// refused. View is the view the remover was in.
type GroupRemoveBody struct{ View uint32 }

func (g *GroupRemoveBody) FrameType() Type            { return GroupRemove }
func (g *GroupRemoveBody) Len() int                   { return groupRemoveLen }
func (g *GroupRemoveBody) AppendBody(b []byte) []byte { return be.AppendUint32(b, g.View) }
func (g *GroupRemoveBody) flags() Flags               { return 0 }

// ViewSuspectBody names the members of the sender's view that its core
// removed: the coordinator leaves them out of the next view.
type ViewSuspectBody struct{ Suspects []MemberID }

func (s *ViewSuspectBody) FrameType() Type { return ViewSuspect }
func (s *ViewSuspectBody) Len() int        { return listHeaderLen + 2*len(s.Suspects) }
func (s *ViewSuspectBody) AppendBody(b []byte) []byte {
	b = be.AppendUint16(b, uint16(len(s.Suspects)))
	for _, id := range s.Suspects {
		b = be.AppendUint16(b, uint16(id))
	}
	return b
}
func (s *ViewSuspectBody) flags() Flags { return 0 }

func appendMembers(b []byte, ms []MemberInfo) []byte {
	b = be.AppendUint16(b, uint16(len(ms)))
	for _, m := range ms {
		b = be.AppendUint16(b, uint16(m.ID))
		b = append(b, m.MAC[:]...)
		b = be.AppendUint32(b, m.Incarnation)
	}
	return b
}

// checkViewBody validates the view protocol's bodies (see checkBody).
func checkViewBody(t Type, body []byte, start int) error {
	need := func(field string, n int) error {
		if len(body) != n {
			return decodeErr(ErrBody, field, start, "%s body is %d bytes, must be %d", t, len(body), n)
		}
		return nil
	}
	atLeast := func(field string, n int) error {
		if len(body) < n {
			return decodeErr(ErrBody, field, start, "%s body is %d bytes, needs at least %d", t, len(body), n)
		}
		return nil
	}
	// members checks a member list at body[off:] and returns where it ends.
	members := func(off int, field string) (int, error) {
		if len(body) < off+listHeaderLen {
			return 0, decodeErr(ErrBody, field, start+off, "no room for the member count")
		}
		n := int(be.Uint16(body[off:]))
		end := off + listHeaderLen + n*memberLen
		if n == 0 || len(body) < end {
			return 0, decodeErr(ErrBody, field, start+off, "%d members need %d bytes, %d left", n, listHeaderLen+n*memberLen, len(body)-off)
		}
		// A view names each member once: a list naming an id twice has
		// no meaning (and would not re-encode as it came, FuzzBody).
		var seen [1 << 16 / 64]uint64
		idAt := func(i int) MemberID { return MemberID(be.Uint16(body[off+listHeaderLen+i*memberLen:])) }
		for i := range n {
			id := idAt(i)
			if id == NoMember {
				return 0, decodeErr(ErrBody, field, start+off+listHeaderLen+i*memberLen, "member %d has id 0x%04x, reserved for 'no member'", i, uint16(NoMember))
			}
			if seen[id/64]&(1<<(id%64)) != 0 {
				first := 0
				for idAt(first) != id {
					first++
				}
				return 0, decodeErr(ErrBody, field, start+off+listHeaderLen+i*memberLen, "member %d has id %d, as member %d does", i, id, first)
			}
			seen[id/64] |= 1 << (id % 64)
		}
		return end, nil
	}
	switch t {
	case ViewJoin:
		return need("viewjoin", viewJoinLen)
	case ViewPrepare:
		if err := atLeast("prepare", viewHeadLen); err != nil {
			return err
		}
		end, err := members(viewHeadLen, "prepare.members")
		if err != nil {
			return err
		}
		if end != len(body) {
			return decodeErr(ErrBody, "prepare", start+end, "%d bytes after the member list", len(body)-end)
		}
		return nil
	case ViewFlush:
		if err := atLeast("flush", viewHeadLen+flushFixed+listHeaderLen); err != nil {
			return err
		}
		n := int(be.Uint16(body[viewHeadLen+flushFixed:]))
		if len(body) != viewHeadLen+flushFixed+listHeaderLen+n*deliveredLen {
			return decodeErr(ErrBody, "flush.delivered", start+viewHeadLen+flushFixed, "%d entries need %d bytes, body has %d", n, viewHeadLen+flushFixed+listHeaderLen+n*deliveredLen, len(body))
		}
		for i := range n {
			off := viewHeadLen + flushFixed + listHeaderLen + i*deliveredLen + 2
			if g := body[off]; g != 0 && g != deliveredGone && g != deliveredGone|deliveredLeft {
				return decodeErr(ErrBody, "flush.delivered.flags", start+off, "entry %d: flags are %#02x, want 0 (live), 1 (gone) or 3 (gone, left)", i, g)
			}
		}
		return nil
	case ViewCommit:
		if err := atLeast("commit", viewHeadLen); err != nil {
			return err
		}
		end, err := members(viewHeadLen, "commit.members")
		if err != nil {
			return err
		}
		if len(body) < end+listHeaderLen {
			return decodeErr(ErrBody, "commit.cuts", start+end, "no room for the cut count")
		}
		n := int(be.Uint16(body[end:]))
		m := int(be.Uint16(body[viewHeadLen:]))
		if len(body) < end+listHeaderLen+n*cutLen {
			return decodeErr(ErrBody, "commit.cuts", start+end, "%d cuts need %d bytes, %d left", n, listHeaderLen+n*cutLen, len(body)-end)
		}
		end += listHeaderLen + n*cutLen
		if len(body) != end+commitAcceptLen(m) {
			return decodeErr(ErrBody, "commit.accept", start+end, "a view of %d members needs %d bytes (base count, from-base bitmap), %d left", m, commitAcceptLen(m), len(body)-end)
		}
		if r := m % 8; r != 0 && body[len(body)-1]&(0xff>>r) != 0 {
			return decodeErr(ErrBody, "commit.accept.from_base", start+len(body)-1, "bits set past member %d of %d: 0x%02x", m-1, m, body[len(body)-1])
		}
		return nil
	case ViewRelay:
		if err := atLeast("relay", 4+Overhead); err != nil {
			return err
		}
		f, err := Parse(body[4:])
		if err != nil {
			return decodeErr(ErrBody, "relay.frame", start+4, "relayed frame: %v", err)
		}
		// Parse drops bytes past a frame's length (an Ethernet frame's
		// padding); in a relay they would be dropped on re-encoding.
		if len(f) != len(body)-4 {
			return decodeErr(ErrBody, "relay.frame", start+4+len(f), "relayed frame of %d bytes, %d bytes follow it", len(f), len(body)-4-len(f))
		}
		return nil
	case ViewRefuse:
		if err := need("refuse", viewRefuseLen); err != nil {
			return err
		}
		if r := RefuseReason(body[8]); !r.valid() {
			return decodeErr(ErrBody, "refuse.reason", start+8, "reason %d (want 1..3)", r)
		}
		return nil
	case GroupRemove:
		return need("remove", groupRemoveLen)
	case ViewSuspect:
		if err := atLeast("suspect", listHeaderLen); err != nil {
			return err
		}
		n := int(be.Uint16(body))
		if n == 0 || len(body) != listHeaderLen+2*n {
			return decodeErr(ErrBody, "suspect.members", start, "%d suspects need %d bytes, body has %d", n, listHeaderLen+2*n, len(body))
		}
		for i := range n {
			if MemberID(be.Uint16(body[listHeaderLen+2*i:])) == NoMember {
				return decodeErr(ErrBody, "suspect.members", start+listHeaderLen+2*i, "suspect %d has id 0x%04x, reserved for 'no member'", i, uint16(NoMember))
			}
		}
		return nil
	}
	return decodeErr(ErrType, "type", offType, "type 0x%02x", uint8(t))
}

// Accessors of the view protocol's bodies (on a validated View).

// ViewJoin reads a ViewJoin body.
func (v View) ViewJoin() ViewJoinBody {
	b := v.Body()
	return ViewJoinBody{Requested: MemberID(be.Uint16(b)), Nonce: be.Uint64(b[2:]), ConfigHash: be.Uint64(b[10:]), MTU: be.Uint32(b[18:])}
}

// ViewNext and ViewBase read the next and base view ids of a ViewPrepare,
// ViewFlush or ViewCommit.
func (v View) ViewNext() uint32 { return be.Uint32(v.Body()) }
func (v View) ViewBase() uint32 { return be.Uint32(v.Body()[4:]) }

// ViewMembers is the member list of a ViewPrepare or ViewCommit.
func (v View) ViewMembers() MemberList { return MemberList(v.Body()[viewHeadLen:]) }

// FlushCoord is the coordinator whose ViewPrepare a ViewFlush answers.
func (v View) FlushCoord() MemberID { return MemberID(be.Uint16(v.Body()[viewHeadLen:])) }

// FlushSent is a ViewFlush's count of the sender's own messages.
func (v View) FlushSent() uint32 { return be.Uint32(v.Body()[viewHeadLen+2:]) }

// FlushDelivered is a ViewFlush's delivered list.
func (v View) FlushDelivered() DeliveredList {
	return DeliveredList(v.Body()[viewHeadLen+flushFixed:])
}

// DeliveredList is a view of a ViewFlush's entries.
type DeliveredList []byte

func (d DeliveredList) Len() int { return int(be.Uint16(d)) }
func (d DeliveredList) At(i int) Delivered {
	b := d[listHeaderLen+i*deliveredLen:]
	return Delivered{Member: MemberID(be.Uint16(b)), Gone: b[2]&deliveredGone != 0, Left: b[2]&deliveredLeft != 0, Next: be.Uint32(b[3:])}
}

// CommitCuts is a ViewCommit's cut list.
func (v View) CommitCuts() CutList {
	b := v.Body()
	return CutList(b[viewHeadLen+listHeaderLen+int(be.Uint16(b[viewHeadLen:]))*memberLen:])
}

// CutList is a view of a ViewCommit's cuts.
type CutList []byte

func (c CutList) Len() int { return int(be.Uint16(c)) }
func (c CutList) At(i int) Cut {
	b := c[listHeaderLen+i*cutLen:]
	return Cut{Member: MemberID(be.Uint16(b)), Cut: be.Uint32(b[2:]), Holder: MemberID(be.Uint16(b[6:])), From: be.Uint32(b[8:])}
}

// CommitBaseCount is how many members of a ViewCommit's base count
// toward accepting its view (ViewCommitBody.BaseCount).
func (v View) CommitBaseCount() uint16 {
	b := v.Body()
	cl := v.CommitCuts()
	return be.Uint16(b[len(b)-len(cl)+listHeaderLen+cl.Len()*cutLen:])
}

// CommitFromBase reports whether member i of a ViewCommit's member list
// counts toward accepting its view (ViewCommitBody.FromBase).
func (v View) CommitFromBase(i int) bool {
	b := v.Body()
	n := v.ViewMembers().Len()
	return b[len(b)-(n+7)/8+i/8]&(0x80>>(i%8)) != 0
}

// RelayBase and RelayFrame read a ViewRelay: the view the relayed frame
// belongs to, and the frame (validated when the relay was).
func (v View) RelayBase() uint32 { return be.Uint32(v.Body()) }
func (v View) RelayFrame() View {
	f, _ := Parse(v.Body()[4:])
	return f
}

// ViewRefuse reads a ViewRefuse body.
func (v View) ViewRefuse() ViewRefuseBody {
	b := v.Body()
	return ViewRefuseBody{Nonce: be.Uint64(b), Reason: RefuseReason(b[8]), ConfigHash: be.Uint64(b[9:])}
}

// RemovedView reads a GroupRemove body.
func (v View) RemovedView() uint32 { return be.Uint32(v.Body()) }

// Suspects reads a ViewSuspect body.
func (v View) Suspects() []MemberID {
	b := v.Body()
	ids := make([]MemberID, be.Uint16(b))
	for i := range ids {
		ids[i] = MemberID(be.Uint16(b[listHeaderLen+2*i:]))
	}
	return ids
}

// MaxViewMembers is the most members a view may have for its frames to
// fit an MTU of mtu bytes: a ViewCommit lists every member and, for
// every member of the view before, its cut, and a bit per member.
func MaxViewMembers(mtu int) int {
	n := (mtu - Overhead - viewHeadLen - 2*listHeaderLen - 2) / (memberLen + cutLen)
	for n > 0 && Overhead+viewHeadLen+2*listHeaderLen+n*(memberLen+cutLen)+commitAcceptLen(n) > mtu {
		n--
	}
	return max(0, min(n, int(NoMember)))
}
