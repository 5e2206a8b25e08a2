// Package vtotal is the Agreed level over a group whose membership
// changes: one total order, the same at every member, on top of a
// view-synchronous FIFO group (reliable/view), as Isis ordered ABCAST
// over view-synchronous CBCAST (Birman, Schiper, Stephenson 1991) and as
// Liu's atomic multicast orders within a view (thesis §3.1, §4.1).
//
// In every view the member with the lowest id is the sequencer. Every
// member broadcasts its messages through the FIFO group; the sequencer
// broadcasts, through its own FIFO stream, order messages that name the
// others' data messages in the order it delivered them. Its own data
// messages need no naming: each takes its place in the order where it
// stands in the sequencer's FIFO stream, among its order messages. A
// member delivers a data message when an order message of its view's
// sequencer names it, or, the sequencer's own, when its FIFO group
// delivers it.
//
// At a view change virtual synchrony does the rest: the members that
// move from view V to the next delivered the same FIFO messages in V,
// data and order alike. Each of them first delivers what the order
// messages of V name and it holds (in their order; a named message that
// none of them holds, from a sender that failed, is skipped by all), then
// the data messages of V that no order message named, in one
// deterministic order (by sender id, then the sender's own order). So
// they all deliver the same sequence in V, and a message that an order
// message of V named is delivered in V at its place by everyone that
// completes V.
//
// Safe (NewSafe) delivers in the same order, but a message only once
// every member of the view holds it and its place: the frame that
// carried it and the sequencer's frame that placed it (its order
// message, or the sequencer's own data frame). That is read from the
// acknowledgement vectors every PBP frame carries (the acknowledgement
// matrix, view.Core.HeldByAll); Safe sends nothing of its own. A
// member's acks never go past what its flush reports (pbp's Freeze), so
// the view change's cut holds both frames at every survivor, which then
// delivers the message at the same place: what any member delivered,
// every member that completes the view delivers.
//
// The level is each message's (ProposeLevel; the group's, New or
// NewSafe, is Propose's), named by its kind byte: one order holds both,
// the order's head is delivered once it is here and, if it is Safe,
// stable, so a Safe message holds every message after it and an Agreed
// one waits for stability only behind a Safe one. A Safe message, and an
// order message that places one, ask the members to acknowledge their
// frame at once (prompter): in an Agreed group nothing else does.
//
// The layer is a deterministic core on the one core contract: it wraps
// the membership core and changes only what is delivered and when.
package vtotal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Inner is what the layer needs of the membership core (*view.Core).
type Inner interface {
	core.Core
	// OwnOut is how many of this member's messages went out, in the
	// order Propose accepted them, each in the view whose core numbered
	// it (view.Core.OwnOut).
	OwnOut() uint64
	// HeldByAll is how far every member of the installed view holds
	// member s's frames in it, as their acknowledgements say
	// (view.Core.HeldByAll): Safe's stability.
	HeldByAll(s frame.MemberID) (next uint32, ok bool)
	// SentInView is the next sequence number of this member's frames in
	// the installed view (view.Core.SentInView).
	SentInView() uint32
}

// pinner is what the layer uses of the membership core, where it has
// it (view.Core): a message held beyond the turn stays in the FIFO
// group's retained copy of its frame, pinned, instead of being copied.
type pinner interface {
	Pin(view uint32, id frame.MemberID, seq uint32, data []byte) bool
	Unpin(view uint32, id frame.MemberID, seq uint32)
}

// framer is what the layer uses of the membership core, where it has it
// (view.Core over PBP): this member's messages are written into their
// frame with the kind byte before them, and delivered here from that
// frame, pinned, instead of from a copy of their own.
type framer interface {
	ProposeFramed(now core.Time, head, msg []byte) error
	Own(view, seq uint32) (body []byte, bundled, ok bool)
}

// watcher is what Safe uses of the membership core, where it has it
// (view.Core): which member's acknowledgement holds stability back
// (view.Core.HeldByAllLow), and that member's alone (view.Core.HeldBy),
// so that a turn in which it did not move skips the drain.
type watcher interface {
	HeldByAllLow(s frame.MemberID) (next uint32, low frame.MemberID, ok bool)
	HeldBy(m, s frame.MemberID) (next uint32, ok bool)
}

// prompter is what the layer uses of the membership core, where it has
// it (view.Core over PBP): a Safe message, and an order message that
// places one, ask the members to acknowledge their frame at once
// (pbp.Core.ProposePrompt), so that in an Agreed group, whose members
// acknowledge other frames after PBP's ack timer, a Safe message is
// stable a round trip after its place is known, not AckDelay later.
type prompter interface {
	ProposePrompt(now core.Time, msg []byte) error
}

// pin names a pinned frame: view, sender, sequence number.
type pin struct {
	view uint32
	from frame.MemberID
	seq  uint32
}

// Message kinds, the first byte of every message through the FIFO group.
// Kind 3 was Safe's held report (revision 2); Safe now reads stability
// from the acknowledgement matrix and sends none.
const (
	kindData  = 1 // kind, then the payload: an Agreed data message
	kindOrder = 2 // kind, view u32, then entries: member u16, counter u32
	kindSafe  = 4 // kind, then the payload: a Safe data message (revision 4)
)

const (
	dataHeader  = 1
	orderHeader = 5
	orderEntry  = 6
)

// ErrBadMessage wraps what a malformed message from the FIFO group says.
var ErrBadMessage = errors.New("vtotal: malformed message")

// ErrWrongSkip is a drain skipped that would have delivered (VerifySkips).
var ErrWrongSkip = errors.New("vtotal: a drain skipped wrongly")

// msg is a data message held until the total order delivers it.
type msg struct {
	from frame.MemberID
	n    uint32 // the sender's count of its data messages in this view
	// safe: sent at the Safe level (kindSafe), delivered only once every
	// member holds it and its place.
	safe bool
	// next is one past the sequence number of the frame that carried it
	// in its sender's stream (this member's own: a bound, the next frame
	// after it); Safe delivers it once every member holds the frames
	// before next.
	next uint32
	data []byte
	// borrowed: data is the FIFO group's delivery, valid until Advance;
	// a message still held when Ready returns is pinned where it lies
	// (the membership core's retained copy of its frame) or, if it
	// cannot be, copied (own).
	borrowed bool
	pinned   bool
	// ownSeq is the frame of this member's own message, pinned (pinned
	// names that frame instead of next-1).
	ownSeq uint32
	// buf is the buffer of the layer's pool that data lies in (a held
	// copy, or this member's own framed message), back in the pool once
	// the delivery that hands it out is carried out; nil if none.
	buf []byte
}

// entry names one data message: its sender's id in the view and the
// sender's count of its data messages delivered in that view.
type entry struct {
	from frame.MemberID
	n    uint32
	// next: one past the sequence number of the sequencer's frame that
	// placed it (its order message, or the sequencer's own data message;
	// at the sequencer itself, a bound), for Safe as msg.next.
	next uint32
	// safe: a Safe message (the sequencer's entries to order: its order
	// message asks for prompt acks, prompter).
	safe bool
}

// own is one of this member's messages passed to the FIFO group, in
// order: a data message, or an order message (sequencer).
type own struct {
	order   bool
	framed  bool    // a data message in its frame only (framer)
	safe    bool    // a data message at the Safe level
	data    []byte  // payload of a data message
	buf     []byte  // the pool buffer data lies in, after the kind byte
	entries []entry // of an order message
	view    uint32  // the view an order message was made for
}

// Core is the layer.
type Core struct {
	in   Inner
	info core.Info

	poisonFreed bool // PoisonFreed

	view uint32
	self frame.MemberID
	seqr frame.MemberID // the sequencer: the view's lowest id

	// From others, per sender id in the current view: data delivered by
	// the FIFO group and not yet by the total order, in the sender's
	// order; count is how many data messages of the sender the FIFO
	// group delivered in this view (the next one's n).
	held  []queue[msg] // by sender id
	count []uint32     // by sender id
	// order is what the sequencer's order messages of this view named
	// (and the sequencer's own data messages, at their place) and the
	// total order has not delivered yet.
	order queue[entry]
	// borrowed counts held messages whose data is still the FIFO
	// group's (msg.borrowed).
	borrowed int
	// free holds buffers for held messages' copies and for this member's
	// data messages (framed by Propose, delivered here from the same
	// buffer); lent those handed out in deliveries of the current Ready,
	// cooling those carried out at Advance, which stay unchanged until
	// the next Step or Tick (core.Delivery) and are free from then on.
	// A held message is copied only where the membership core cannot
	// pin it (pinner).
	free, lent, cooling [][]byte
	// pinner is the membership core's pinning (nil without); unpin the
	// frames of the messages handed out in the current Ready, unpinned
	// at the next Step or Tick (their deliveries are valid until then),
	// and cooled those of the Ready before, unpinned now.
	pinner          pinner
	unpin, unpinNow []pin
	// framer is the membership core's framing (nil without); cur is
	// where this member's next message out lies in its frames of the
	// view: frame seq, and the offset in a bundled frame's body.
	framer framer
	// prompter is the membership core's (nil without).
	prompter prompter
	// dataHead is a data message's header, kindData (ProposeFramed).
	dataHead [1]byte
	cur      struct {
		seq uint32
		off int
	}

	// mine: this member's messages passed to the FIFO group and not yet
	// known to be out (OwnOut), in order; outMine: those known out in the
	// current view and not yet delivered here, with their n.
	mine     queue[own]
	outSeen  uint64 // OwnOut as last seen
	outMine  queue[msg]
	ownCount uint32 // this member's data messages out in this view
	// Sequencer: entries to name in the next order message, and the
	// order entries of its own order messages that went out (applied
	// here as the others apply them).
	toOrder []entry

	// Safe: the group's level, that of Propose (ProposeLevel chooses
	// per message). A Safe message is delivered only once every member
	// of the view holds it and its place: the frame that carried it and
	// the sequencer's frame that placed it, as the acknowledgement matrix
	// says (Inner.HeldByAll). No message of its own is sent for it. A
	// message behind it in the order, of either level, waits with it.
	safe bool
	// watch is the membership core's (nil without). wait: Safe's last
	// drain stopped at the order's head because member wait.m holds
	// sender wait.s's frames only before wait.next; while it still does,
	// nothing the head waits for moved (only drain and a view's end take
	// the head) and the next drain is skipped. drains counts the drains
	// run, skipped ones not.
	watch watcher
	wait  struct {
		on   bool
		m, s frame.MemberID
		next uint32
	}
	drains uint64
	verify bool // VerifySkips

	global uint32 // messages delivered in total order
	out    core.Ready
	dl     []core.Delivery
	ev     []core.Event
	kick   bool // an order message was proposed during Ready
	now    core.Time
	err    error
}

// New wraps the membership core in: the Agreed level.
func New(in Inner) *Core {
	info := in.Info()
	info.MaxMessage -= dataHeader
	info.SelfDelivery = true
	c := &Core{in: in, info: info, self: frame.NoMember, seqr: frame.NoMember}
	c.pinner, _ = in.(pinner)
	c.watch, _ = in.(watcher)
	c.prompter, _ = in.(prompter)
	if c.pinner != nil {
		c.framer, _ = in.(framer)
		c.dataHead[0] = kindData
	}
	return c
}

// kindOf is the kind byte a data message of the level goes out with.
func kindOf(safe bool) byte {
	if safe {
		return kindSafe
	}
	return kindData
}

// SkipCRC passes core.CRCSkipper on to the membership core.
func (c *Core) SkipCRC() {
	if s, ok := c.in.(core.CRCSkipper); ok {
		s.SkipCRC()
	}
}

// NewSafe wraps the membership core in: the Safe level, Agreed where a
// message is delivered only once every member of the view holds it, so
// that what any member delivered, even one that then fails, every member
// that completes the view delivers, at the same place.
func NewSafe(in Inner) *Core {
	c := New(in)
	c.safe = true
	return c
}

// Step hands a frame to the membership core.
func (c *Core) Step(now core.Time, src, dst [6]byte, v frame.View) error {
	return c.StepLent(now, src, dst, v, core.NoLoan)
}

// Tick runs the membership core's timers.
func (c *Core) Tick(now core.Time) {
	c.now = max(c.now, now)
	c.cool()
	c.in.Tick(now)
}

// ProposeUnreliable sends m at the Unreliable level, around the order:
// straight through the membership core (core.UnreliableCore).
func (c *Core) ProposeUnreliable(now core.Time, m []byte) error {
	c.now = max(c.now, now)
	if len(m) > c.info.MaxMessage {
		return &core.TooLargeError{Size: len(m), Max: c.info.MaxMessage}
	}
	u, ok := c.in.(core.UnreliableCore)
	if !ok {
		return core.ErrNoUnreliable
	}
	return u.ProposeUnreliable(now, m)
}

// Propose sends m in the total order, at the group's level.
func (c *Core) Propose(now core.Time, m []byte) error {
	return c.ProposeLevel(now, m, c.safe)
}

// ProposeLevel sends m in the total order at the Safe level (safe) or
// the Agreed level, whatever the group's (core.LevelCore): one order
// holds both, and a Safe message differs only in that it, and so every
// message after it, is delivered once every member of the view holds it
// and its place.
func (c *Core) ProposeLevel(now core.Time, m []byte, safe bool) error {
	c.now = max(c.now, now)
	if len(m) > c.info.MaxMessage {
		return &core.TooLargeError{Size: len(m), Max: c.info.MaxMessage}
	}
	if c.framer != nil && !safe {
		// The FIFO group writes the kind byte and m into its frame, and
		// this member delivers m from there (noteOut). Not under Safe:
		// there a message is delivered only once every member holds it,
		// after its frame became stable, so PBP would often have to give
		// the frame's history slot a new buffer while the pin lasts.
		if err := c.framer.ProposeFramed(now, c.dataHead[:], m); err != nil {
			return err
		}
		c.mine.push(own{framed: true})
		return nil
	}
	// The inner core copies b into its frame; this member delivers its
	// message from b, a pool buffer rather than a fresh allocation each
	// (allocated and zeroed per message, it was the sender's largest
	// cost over FIFO at MTU 9000).
	b := c.buffer(dataHeader + len(m))
	b[0] = kindOf(safe)
	copy(b[dataHeader:], m)
	if err := c.propose(b, safe); err != nil {
		c.release(b) // never handed out
		return err
	}
	c.mine.push(own{data: b[dataHeader:], buf: b, safe: safe})
	return nil
}

// Leave leaves the group.
func (c *Core) Leave(now core.Time) { c.in.Leave(now) }

// Ready is the membership core's output with the deliveries put in the
// total order.
func (c *Core) Ready() core.Ready {
	c.kick = false // what was proposed during the last Ready is in rd
	rd := c.in.Ready()
	c.out.Frames = rd.Frames
	for _, d := range rd.Deliveries {
		if d.Unreliable {
			c.dl = append(c.dl, d) // a datagram: in no order
			continue
		}
		c.fromGroup(d)
	}
	installed := false
	for _, ev := range rd.Events {
		if ev.Kind == core.ViewInstalled && ev.View != nil {
			c.noteOut(ev.View.OwnBefore)
			c.endView()
			c.startView(ev.Member, ev.View)
			installed = true
		}
		c.ev = append(c.ev, ev)
	}
	c.noteOut(c.in.OwnOut())
	if installed {
		// The deliveries of this Ready are the view before's, handed out
		// before its ViewInstalled event; the new view's (the
		// sequencer's own, already in order) wait for the next turn.
		c.kick = true
	} else {
		c.drain()
	}
	c.own()
	c.sendOrder()
	c.out.Deliveries, c.out.Events = c.dl, c.ev
	return c.out
}

// own copies the data of the messages still held that are the FIFO
// group's deliveries (valid only until Advance).
func (c *Core) own() {
	if c.borrowed == 0 {
		return
	}
	// The borrowed are what this Ready appended: the tail of each
	// sender's queue (under Safe tens of messages wait for acks, and
	// walking them all each turn cost more than the rest of the turn's
	// bookkeeping).
	for id := range c.held {
		h := c.held[id].items()
		for i := len(h) - 1; i >= 0 && c.borrowed > 0; i-- {
			m := &h[i]
			if !m.borrowed {
				break
			}
			c.borrowed--
			m.borrowed = false
			// Under Safe every message waits for acks beyond its turn,
			// and PBP's retained copy of its frame (kept for the view
			// change's relays) already holds it: no second copy.
			if c.pinner != nil && c.pinner.Pin(c.view, m.from, m.next-1, m.data) {
				m.pinned = true
				continue
			}
			m.data = c.copyOf(m.data)
			m.buf = m.data
		}
	}
}

// copyOf copies b into a buffer of the pool.
func (c *Core) copyOf(b []byte) []byte {
	buf := c.buffer(len(b))
	copy(buf, b)
	return buf
}

// buffer returns a buffer of n bytes from the pool, not zeroed. Every
// buffer of the pool holds a framed message of the largest size.
func (c *Core) buffer(n int) []byte {
	if k := len(c.free); k > 0 && cap(c.free[k-1]) >= n {
		buf := c.free[k-1][:n]
		c.free[k-1] = nil
		c.free = c.free[:k-1]
		return buf
	}
	return make([]byte, n, max(n, dataHeader+c.info.MaxMessage))
}

// cool frees the buffers of the deliveries carried out at the last
// Advance: a new Step or Tick ends their validity.
func (c *Core) cool() {
	for i, b := range c.cooling {
		c.release(b)
		c.cooling[i] = nil
	}
	c.cooling = c.cooling[:0]
	for _, p := range c.unpinNow {
		c.pinner.Unpin(p.view, p.from, p.seq)
	}
	c.unpinNow = c.unpinNow[:0]
}

// release puts b back in the pool (or drops it, past maxFree).
func (c *Core) release(b []byte) {
	if c.poisonFreed {
		b = b[:cap(b)]
		for i := range b {
			b[i] = 0xEE
		}
	}
	if len(c.free) < maxFree {
		c.free = append(c.free, b[:0])
	}
}

// VerifySkips sets whether every drain Safe skips while the member its
// order's head waits for holds no more (wait) is checked by a full one;
// a skip that one would not make is an error (Err, ErrWrongSkip). A
// debugging aid the simulation tests turn on (reliable/internal/viewsim).
// Call it before the first Step.
func (c *Core) VerifySkips(on bool) { c.verify = on }

// PoisonFreed sets whether every buffer that goes back to the layer's
// pool is filled with 0xEE, a debugging aid the simulation tests turn on
// (reliable/internal/viewsim, PoisonFreed): a delivery read after its
// buffer was freed, or a message whose buffer was freed while it was
// still held, then shows as corrupt. Call it before the first Step.
func (c *Core) PoisonFreed(on bool) { c.poisonFreed = on }

// maxFree bounds the buffers the pool keeps.
const maxFree = 1024

// Advance: the output was carried out.
func (c *Core) Advance() {
	c.in.Advance()
	c.cooling = append(c.cooling, c.lent...)
	clear(c.lent)
	c.lent = c.lent[:0]
	c.unpinNow = append(c.unpinNow, c.unpin...)
	c.unpin = c.unpin[:0]
	clear(c.dl)
	c.dl = c.dl[:0]
	c.ev = c.ev[:0]
	c.out = core.Ready{}
	// kick stays: the runtime asks for the Deadline after Advance, and the
	// order message proposed during Ready must go out in the next turn,
	// now, not at the inner core's next timer (up to PBP's 1 ms AckDelay
	// later: Agreed's latency was 1.3 ms on an idle group for it).
}

// Deadline is the membership core's, or now when an order message waits
// to go out.
func (c *Core) Deadline() core.Time {
	d := c.in.Deadline()
	if c.kick && (d == 0 || d > c.now) {
		return c.now
	}
	return d
}

// Blocked is the membership core's.
func (c *Core) Blocked() bool { return c.in.Blocked() }

// Done is the membership core's.
func (c *Core) Done() bool { return c.in.Done() }

// Info is the membership core's, with the layer's header taken from
// MaxMessage and this member's messages delivered here too.
func (c *Core) Info() core.Info { return c.info }

// Stats are the membership core's.
func (c *Core) Stats() core.Stats { return c.in.Stats() }

// Members are the membership core's.
func (c *Core) Members() []core.Member { return c.in.Members() }

// HeldBy is the membership core's (view.Core.HeldBy), where it has
// one: how far member m holds member s's frames in the installed view,
// as m's acknowledgements say.
func (c *Core) HeldBy(m, s frame.MemberID) (next uint32, ok bool) {
	if c.watch == nil {
		return 0, false
	}
	return c.watch.HeldBy(m, s)
}

// Repair is the membership core's.
func (c *Core) Repair(from frame.MemberID) (frame.MemberID, bool) { return c.in.Repair(from) }

// Err is why the layer stopped taking the group's messages (a malformed
// one), or nil.
func (c *Core) Err() error { return c.err }

// fromGroup takes one FIFO delivery of the current view.
func (c *Core) fromGroup(d core.Delivery) {
	if len(d.Data) == 0 {
		c.fail(fmt.Errorf("%w: an empty message from member %d", ErrBadMessage, d.From))
		return
	}
	switch d.Data[0] {
	case kindData, kindSafe:
		if int(d.From) >= len(c.held) {
			c.held = append(c.held, make([]queue[msg], int(d.From)+1-len(c.held))...)
			c.count = append(c.count, make([]uint32, int(d.From)+1-len(c.count))...)
		}
		n := c.count[d.From]
		c.count[d.From] = n + 1
		// Not copied yet: delivered in this Ready (the common case for
		// the sequencer's own messages under Agreed) it never is.
		c.held[d.From].push(msg{from: d.From, n: n, safe: d.Data[0] == kindSafe, next: d.Seq + 1, data: d.Data[dataHeader:], borrowed: true})
		c.borrowed++
		switch {
		case d.From == c.seqr:
			c.order.push(entry{from: d.From, n: n, next: d.Seq + 1}) // its place in the sequencer's stream
		case c.self == c.seqr:
			c.toOrder = append(c.toOrder, entry{from: d.From, n: n, safe: d.Data[0] == kindSafe})
		}
	case kindOrder:
		body := d.Data[1:]
		if len(body) < 4 || (len(body)-4)%orderEntry != 0 {
			c.fail(fmt.Errorf("%w: an order message of %d bytes from member %d", ErrBadMessage, len(d.Data), d.From))
			return
		}
		if binary.BigEndian.Uint32(body) != c.view || d.From != c.seqr {
			return // made for a view before, sent again in this one
		}
		for b := body[4:]; len(b) > 0; b = b[orderEntry:] {
			c.order.push(entry{from: frame.MemberID(binary.BigEndian.Uint16(b)), n: binary.BigEndian.Uint32(b[2:]), next: d.Seq + 1})
		}
	default:
		c.fail(fmt.Errorf("%w: kind %d from member %d", ErrBadMessage, d.Data[0], d.From))
	}
}

// stability is HeldByAll of the last two senders asked, for one drain
// (the acknowledgement matrix does not change meanwhile): one sender
// and the sequencer cost a walk of the view's members each, not two
// per message.
type stability struct {
	n    int
	from [2]frame.MemberID
	held [2]uint32
	low  [2]frame.MemberID // the member that sets held (watcher), or NoMember
	ok   [2]bool
}

// to reports whether every member of the view holds sender s's frames
// before next (Safe). If not, and the membership core names the member
// that holds them least, c.wait is set to wait for that member.
func (st *stability) to(c *Core, s frame.MemberID, next uint32) bool {
	i := 0
	for ; i < st.n && st.from[i] != s; i++ {
	}
	if i == st.n {
		i = min(st.n, 1)
		st.from[i] = s
		if c.watch != nil {
			st.held[i], st.low[i], st.ok[i] = c.watch.HeldByAllLow(s)
		} else {
			st.held[i], st.ok[i] = c.in.HeldByAll(s)
			st.low[i] = frame.NoMember
		}
		st.n = max(st.n, i+1)
	}
	if st.ok[i] && !frame.SeqLess(st.held[i], next) {
		return true
	}
	if st.ok[i] && st.low[i] != frame.NoMember {
		c.wait.on, c.wait.m, c.wait.s, c.wait.next = true, st.low[i], s, next
	}
	return false
}

// waiting reports whether the order's head still waits for the member
// c.wait names (so a drain would stop at once); it ends the wait if not.
func (c *Core) waiting() bool {
	if !c.wait.on {
		return false
	}
	if h, ok := c.watch.HeldBy(c.wait.m, c.wait.s); ok && frame.SeqLess(h, c.wait.next) {
		return true
	}
	c.wait.on = false
	return false
}

func (c *Core) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// noteOut moves this member's messages that went out into the view's
// order: data to outMine (and, at the sequencer, to the next order
// message), order messages of this view to the order applied here.
func (c *Core) noteOut(n uint64) {
	sent := c.in.SentInView() // each one went out in a frame before it
	for ; c.outSeen < n && c.mine.len() > 0; c.outSeen++ {
		m := c.mine.items()[0]
		c.mine.pop()
		var data []byte
		var seq uint32
		if c.framer != nil {
			// Every message of this member went out in its frames of the
			// view, in order: this one is the next there.
			var ok bool
			if data, seq, ok = c.nextOwn(); !ok {
				c.fail(fmt.Errorf("%w: this member's message %d of view %d is not in its frame %d", ErrBadMessage, c.outSeen, c.view, c.cur.seq))
				continue
			}
		}
		if m.order {
			if m.view == c.view && c.self == c.seqr {
				for _, e := range m.entries {
					e.next = sent
					c.order.push(e)
				}
			}
			continue
		}
		k := c.ownCount
		c.ownCount++
		mm := msg{from: c.self, n: k, safe: m.safe, next: sent, data: m.data, buf: m.buf}
		if m.framed {
			mm.data, mm.ownSeq = data[dataHeader:], seq
			if c.pinner.Pin(c.view, c.self, seq, mm.data) {
				mm.pinned = true
			} else {
				mm.data = c.copyOf(mm.data) // the view before's frame
				mm.buf = mm.data
			}
		}
		c.outMine.push(mm)
		if c.self == c.seqr {
			// Its place is where it went out in this stream, as every
			// member sees it.
			c.order.push(entry{from: c.self, n: k, next: sent})
		}
	}
}

// nextOwn returns this member's next message out in its frames of the
// view, kind byte included, and the frame's sequence number.
func (c *Core) nextOwn() ([]byte, uint32, bool) {
	seq := c.cur.seq
	body, bundled, ok := c.framer.Own(c.view, seq)
	if !ok {
		return nil, 0, false
	}
	if !bundled {
		c.cur.seq, c.cur.off = seq+1, 0
		return body, seq, true
	}
	b := body[c.cur.off:]
	if len(b) < 2 || 2+(int(b[0])<<8|int(b[1])) > len(b) {
		return nil, 0, false
	}
	n := int(b[0])<<8 | int(b[1])
	c.cur.off += 2 + n
	if c.cur.off >= len(body) {
		c.cur.seq, c.cur.off = seq+1, 0
	}
	return b[2 : 2+n], seq, true
}

// drain delivers what the order names, while the data is here (Safe:
// and every member of the view holds it and its place).
func (c *Core) drain() {
	if c.waiting() {
		if c.verify {
			c.verifySkip()
		}
		return
	}
	c.drains++
	var st stability
	for c.order.len() > 0 {
		e := &c.order.items()[0]
		m, q := c.peek(*e)
		if m == nil {
			return
		}
		if m.safe && !(st.to(c, c.seqr, e.next) && st.to(c, m.from, m.next)) {
			return
		}
		c.deliver(m)
		c.pop(q)
		c.order.pop()
	}
}

// verifySkip checks a skipped drain (VerifySkips): the order's head,
// which c.wait says waits, must be held and not yet stable.
func (c *Core) verifySkip() {
	if c.order.len() == 0 {
		c.fail(fmt.Errorf("%w: with the order empty (view %d)", ErrWrongSkip, c.view))
		return
	}
	e := c.order.items()[0]
	m, _ := c.peek(e)
	if m == nil {
		c.fail(fmt.Errorf("%w: the order's head %d:%d not held (view %d)", ErrWrongSkip, e.from, e.n, c.view))
		return
	}
	var st stability
	w := c.wait
	if !m.safe || (st.to(c, c.seqr, e.next) && st.to(c, m.from, m.next)) {
		c.fail(fmt.Errorf("%w: it would deliver %d:%d (view %d, waiting for member %d to hold %d of %d)", ErrWrongSkip, e.from, e.n, c.view, w.m, w.next, w.s))
	}
	c.wait = w
}

// peek returns the held message e names, in place at the head of its
// queue (valid until that queue changes), and the queue, if it is the
// next of its sender; nil if it has not arrived.
func (c *Core) peek(e entry) (*msg, *queue[msg]) {
	q := &c.outMine
	if e.from != c.self {
		if int(e.from) >= len(c.held) {
			return nil, nil
		}
		q = &c.held[e.from]
	}
	if q.len() == 0 || q.items()[0].n != e.n {
		return nil, nil
	}
	return &q.items()[0], q
}

// pop removes the message at q's head, which peek returned and deliver
// handed out.
func (c *Core) pop(q *queue[msg]) {
	if q.items()[0].borrowed {
		c.borrowed-- // only held messages are
	}
	q.pop()
}

func (c *Core) deliver(m *msg) {
	if m.buf != nil {
		c.lent = append(c.lent, m.buf)
	}
	if m.pinned {
		seq := m.next - 1
		if m.from == c.self {
			seq = m.ownSeq
		}
		c.unpin = append(c.unpin, pin{c.view, m.from, seq})
	}
	c.global++
	c.dl = append(c.dl, core.Delivery{From: m.from, Data: m.data, Seq: m.n, Global: c.global, Epoch: c.view})
}

// endView completes the view before a new one: what its order named
// and is held, in order; then what it did not name, by sender id and
// then the sender's order.
func (c *Core) endView() {
	c.wait.on = false
	if c.view == 0 {
		return
	}
	for _, e := range c.order.items() {
		if m, q := c.peek(e); m != nil {
			c.deliver(m)
			c.pop(q)
		}
	}
	c.order.reset()
	for id := range max(len(c.held), int(c.self)+1) {
		if frame.MemberID(id) == c.self {
			for i := range c.outMine.items() {
				c.deliver(&c.outMine.items()[i])
			}
			c.outMine.reset()
		}
		if id < len(c.held) {
			for i := range c.held[id].items() {
				c.deliver(&c.held[id].items()[i])
			}
			c.held[id].reset()
			c.count[id] = 0
		}
	}
	c.borrowed = 0 // all delivered
	c.toOrder = c.toOrder[:0]
	// This member's order messages not out yet were made for this view:
	// they go out in the next one, where everybody ignores them.
	c.ownCount = 0
}

// startView takes the new view's members; its lowest id orders.
func (c *Core) startView(self frame.MemberID, v *core.ViewInfo) {
	c.view, c.self = v.ID, self
	c.cur.seq, c.cur.off = 0, 0
	c.seqr = frame.NoMember
	for _, m := range v.Members {
		if c.seqr == frame.NoMember || m.ID < c.seqr {
			c.seqr = m.ID
		}
	}
}

// sendOrder sends the sequencer's order message for what it delivered
// and sent since the last one.
func (c *Core) sendOrder() {
	if c.self != c.seqr || len(c.toOrder) == 0 {
		return
	}
	most := (c.in.Info().MaxMessage - orderHeader) / orderEntry
	for len(c.toOrder) > 0 {
		k := min(len(c.toOrder), most)
		b := make([]byte, orderHeader+k*orderEntry)
		b[0] = kindOrder
		binary.BigEndian.PutUint32(b[1:], c.view)
		safe := false
		for i, e := range c.toOrder[:k] {
			binary.BigEndian.PutUint16(b[orderHeader+i*orderEntry:], uint16(e.from))
			binary.BigEndian.PutUint32(b[orderHeader+i*orderEntry+2:], e.n)
			safe = safe || e.safe
		}
		if err := c.propose(b, safe); err != nil {
			return // window full: the next Ready tries again
		}
		c.mine.push(own{order: true, entries: slices.Clone(c.toOrder[:k]), view: c.view})
		c.toOrder = c.toOrder[:copy(c.toOrder, c.toOrder[k:])] // kept at the array's front
		c.kick = true
	}
}

// propose passes b to the membership core; a message the layer waits
// for every member to hold (safe: a Safe message, or an order message
// that places one) asks for prompt acks where the core can.
func (c *Core) propose(b []byte, safe bool) error {
	if safe && c.prompter != nil {
		return c.prompter.ProposePrompt(c.now, b)
	}
	return c.in.Propose(c.now, b)
}

// StepLent implements core.Borrower, through to the membership core (a
// message held past the turn is not pinned in lent bytes: pbp.Core.Pin
// refuses, and the layer copies it).
func (c *Core) StepLent(now core.Time, src, dst [6]byte, v frame.View, loan core.Loan) error {
	c.now = max(c.now, now)
	c.cool()
	if b, ok := c.in.(core.Borrower); ok && loan != core.NoLoan {
		return b.StepLent(now, src, dst, v, loan)
	}
	return c.in.Step(now, src, dst, v)
}

// Loans implements core.Borrower, the membership core's.
func (c *Core) Loans(taken, returned []core.Loan) ([]core.Loan, []core.Loan) {
	if b, ok := c.in.(core.Borrower); ok {
		return b.Loans(taken, returned)
	}
	return taken, returned
}

// Borrows implements core.Borrower, the membership core's.
func (c *Core) Borrows() bool {
	b, ok := c.in.(core.Borrower)
	return ok && b.Borrows()
}

// Reclaim implements core.Borrower, the membership core's.
func (c *Core) Reclaim(before core.Loan, forget bool) {
	if b, ok := c.in.(core.Borrower); ok {
		b.Reclaim(before, forget)
	}
}
