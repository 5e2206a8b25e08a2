package core

import (
	"errors"
	"slices"

	"github.com/rbcast/rbcast/frame"
)

// Stepper drives a Core: received Ethernet frames in (decoded, the bad
// ones counted and dropped), the core stepped and ticked, its Ready out
// with per-member counters kept, Advance. Every driver of a core uses it:
// the live runtime, the simulator's Driver, pcap-replay's re-run, the
// in-memory segment and the simulation tests. It does no I/O: the driver
// sends Ready's frames and hands its deliveries and events on. Not safe
// for concurrent use.
type Stepper struct {
	c         Core
	unrel     UnreliableCore // c's Unreliable level (Find), nil without one
	level     LevelCore      // c's level per message (Find), nil without one
	borrow    Borrower       // c as a Borrower (Find), nil if it is not one or does not borrow
	info      Info
	group     uint32
	etherType uint16

	// Hold leaves frames that deliver (Info.Delivers, and datagrams of
	// the Unreliable level) unstepped, as a runtime whose application is
	// not reading must (see Info.Delivers). They are counted in
	// Counters.Held. HoldFrom holds one sender's.
	Hold bool
	// holds are the senders held one by one (HoldFrom); replay the
	// frames kept from those released, to step at the next Tick.
	holds, replay []senderHold

	bad     BadFrames
	held    uint64
	base    frame.MemberID
	peers   []peerCounters // by id - base; nil entries are not members
	events  eventLog       // what the events so far leave known (events.go)
	readied bool           // Ready was called since the last Advance
	now     Time           // of the last input (Step, Tick, Propose): when Ready's deliveries happen
	self    selfLatency    // Info.SelfDelivery only (latency.go)
}

// peerCounters is what the stepper measures per member.
type peerCounters struct {
	member      bool
	delivered   uint64
	bytes       uint64
	repairs     uint64
	repairSince Time // 0: not repairing
	latency     latencyRing
	repairHist  Histogram
}

// latencyRing keeps the most recent repair latencies for percentiles.
type latencyRing struct {
	d [256]Duration
	n int
}

func (r *latencyRing) add(d Duration) {
	r.d[r.n%len(r.d)] = d
	r.n++
}

func (r *latencyRing) samples() []Duration {
	return append([]Duration(nil), r.d[:min(r.n, len(r.d))]...)
}

// NewStepper returns a stepper of c for the frames of group, on
// etherType (0 means frame.EtherType).
func NewStepper(c Core, group uint32, etherType uint16) *Stepper {
	if etherType == 0 {
		etherType = frame.EtherType
	}
	s := &Stepper{c: c, info: c.Info(), group: group, etherType: etherType}
	// A core's chain of wrappers is fixed: found once here, not at every
	// ProposeUnreliable (Find's assertion on a type parameter looks the
	// itab up in the runtime's table each time).
	s.unrel, _ = Find[UnreliableCore](c)
	s.level, _ = Find[LevelCore](c)
	if b, ok := Find[Borrower](c); ok && b.Borrows() {
		s.borrow = b
	}
	ms := c.Members()
	ids := make([]frame.MemberID, 0, len(ms))
	for _, m := range ms {
		if m.ID != frame.NoMember {
			ids = append(ids, m.ID)
		}
	}
	s.setMembers(ids)
	return s
}

// adopt makes a view's members the ones counted (ViewInstalled): the
// counters of a member id carry over from view to view; an id no longer
// in the view is not listed.
func (s *Stepper) adopt(ms []frame.MemberInfo) {
	ids := make([]frame.MemberID, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	s.setMembers(ids)
}

func (s *Stepper) setMembers(ids []frame.MemberID) {
	for i := range s.peers {
		s.peers[i].member = false
	}
	if len(ids) == 0 {
		return
	}
	lo, hi := ids[0], ids[0]
	for _, id := range ids {
		lo, hi = min(lo, id), max(hi, id)
	}
	if len(s.peers) > 0 {
		lo, hi = min(lo, s.base), max(hi, s.base+frame.MemberID(len(s.peers)-1))
	}
	if len(s.peers) == 0 || lo < s.base || int(hi-lo)+1 > len(s.peers) {
		peers := make([]peerCounters, int(hi-lo)+1)
		if len(s.peers) > 0 {
			copy(peers[s.base-lo:], s.peers)
		}
		s.base, s.peers = lo, peers
	}
	for _, id := range ids {
		s.peers[id-s.base].member = true
	}
}

// SkipCRC has the core encode its frames without a CRC (CRCSkipper), for
// a driver whose link writes every frame's CRC itself (link.SealsCRC),
// and reports whether the core can.
func (s *Stepper) SkipCRC() bool {
	c, ok := s.c.(CRCSkipper)
	if ok {
		c.SkipCRC()
	}
	return ok
}

// Core returns the core the stepper drives.
func (s *Stepper) Core() Core { return s.c }

// Info returns the core's Info.
func (s *Stepper) Info() Info { return s.info }

func (s *Stepper) peer(id frame.MemberID) *peerCounters {
	i := int(id) - int(s.base)
	if i < 0 || i >= len(s.peers) || !s.peers[i].member {
		return nil
	}
	return &s.peers[i]
}

// ErrHeld is Step's answer for a frame left unstepped under Hold.
var ErrHeld = errors.New("frame held back: the application is not reading")

// Step decodes one received Ethernet frame and steps the core with it.
// A frame that does not decode (another EtherType or group, a bad
// checksum, ...) is counted in Counters.Bad and its error returned; so is
// the core's refusal, which the core counts itself. Deliveries may alias
// eth: keep its bytes unchanged until Advance.
func (s *Stepper) Step(now Time, eth []byte) error { return s.step(now, eth, true, NoLoan) }

// StepVerified is Step for a frame whose authentication tag verified
// (link.Frame.Authenticated): it is decoded without its CRC32C
// (frame.ParseNoCRC), which the tag makes redundant and which no longer
// matches a body decrypted in place. Every other check stays.
func (s *Stepper) StepVerified(now Time, eth []byte) error { return s.step(now, eth, false, NoLoan) }

// StepLent is Step (verified: StepVerified) for a frame whose bytes the
// link lends under loan (link.Lender): a core that borrows (Borrower)
// may keep them past Advance instead of copying them. Loans and Reclaim
// say what it took and gave back.
func (s *Stepper) StepLent(now Time, eth []byte, verified bool, loan Loan) error {
	return s.step(now, eth, !verified, loan)
}

// Borrows reports whether the core can keep lent bytes (Borrower): a
// driver whose link lends (link.Lender) then steps with StepLent.
func (s *Stepper) Borrows() bool { return s.borrow != nil }

// Loans is the core's Borrower.Loans (nothing if it does not borrow).
func (s *Stepper) Loans(taken, returned []Loan) ([]Loan, []Loan) {
	if s.borrow == nil {
		return taken, returned
	}
	return s.borrow.Loans(taken, returned)
}

// Reclaim is the core's Borrower.Reclaim (nothing if it does not borrow).
func (s *Stepper) Reclaim(before Loan, forget bool) {
	if s.borrow != nil {
		s.borrow.Reclaim(before, forget)
	}
}

func (s *Stepper) step(now Time, eth []byte, crc bool, loan Loan) error {
	e, body, err := frame.SplitEthernet(eth, s.etherType)
	if err != nil {
		s.bad.count(err)
		return err
	}
	var v frame.View
	if crc {
		v, err = frame.ParseGroup(body, s.group)
	} else {
		v, err = frame.ParseGroupNoCRC(body, s.group)
	}
	if err != nil {
		s.bad.count(err)
		return err
	}
	if loan != NoLoan && s.borrow != nil {
		return s.StepViewLent(now, e.Src(), e.Dst(), v, loan)
	}
	return s.StepView(now, e.Src(), e.Dst(), v)
}

// StepView steps the core with a frame decoded already (v validated by
// frame.Parse), from src to dst.
func (s *Stepper) StepView(now Time, src, dst [6]byte, v frame.View) error {
	s.now = now
	if (s.Hold || len(s.holds) > 0) && s.holdsFrame(src, dst, v) {
		s.held++
		return ErrHeld
	}
	if err := s.c.Step(now, src, dst, v); err != nil {
		return err
	}
	// Repair latency: from the Step that revealed a gap to the one that
	// filled it. Only a frame of a stream changes its repair state.
	stream, repairing := s.c.Repair(v.Sender())
	if p := s.peer(stream); p != nil && repairing != (p.repairSince != 0) {
		p.repairMoved(now, repairing)
	}
	return nil
}

// StepViewLent is StepView for a frame whose bytes the link lends under
// loan (StepLent). (StepView is not a wrapper of it: the memory segment
// of the benchmarks calls StepView, and a wrapper copied its arguments
// once more.)
func (s *Stepper) StepViewLent(now Time, src, dst [6]byte, v frame.View, loan Loan) error {
	if loan == NoLoan || s.borrow == nil {
		return s.StepView(now, src, dst, v)
	}
	s.now = now
	if (s.Hold || len(s.holds) > 0) && s.holdsFrame(src, dst, v) {
		s.held++
		return ErrHeld
	}
	if err := s.borrow.StepLent(now, src, dst, v, loan); err != nil {
		return err
	}
	stream, repairing := s.c.Repair(v.Sender())
	if p := s.peer(stream); p != nil && repairing != (p.repairSince != 0) {
		p.repairMoved(now, repairing)
	}
	return nil
}

// holdsFrame reports whether v is left unstepped: under Hold a frame that
// delivers, and a datagram (the Unreliable level), which is so lost:
// nothing repairs it, and the application is not reading; or a frame of
// a sender held (HoldFrom).
func (s *Stepper) holdsFrame(src, dst [6]byte, v frame.View) bool {
	return (s.Hold && (s.info.Delivers(v.Type()) || v.Type() == frame.Datagram)) || (len(s.holds) > 0 && s.holdsBack(src, dst, v))
}

// repairMoved notes that the repair of the stream of p began (repairing)
// or ended, at now.
func (p *peerCounters) repairMoved(now Time, repairing bool) {
	if repairing {
		p.repairSince = now
		return
	}
	p.latency.add(now.Sub(p.repairSince))
	p.repairHist.Observe(now.Sub(p.repairSince))
	p.repairs++
	p.repairSince = 0
}

// Tick runs the core's timers.
func (s *Stepper) Tick(now Time) {
	s.now = now
	if len(s.replay) > 0 {
		s.stepReleased()
	}
	s.c.Tick(now)
}

// Propose offers the core a message (see Core.Propose).
func (s *Stepper) Propose(now Time, msg []byte) error {
	s.now = now
	err := s.c.Propose(now, msg)
	if err == nil && s.info.SelfDelivery {
		s.self.propose(now)
	}
	return err
}

// ProposeLevel is Propose at the Safe level (safe) or the Agreed, to a
// core with a level per message (LevelCore, found through wrappers:
// Find), or returns ErrNoLevel.
func (s *Stepper) ProposeLevel(now Time, msg []byte, safe bool) error {
	if s.level == nil {
		return ErrNoLevel
	}
	s.now = now
	err := s.level.ProposeLevel(now, msg, safe)
	if err == nil && s.info.SelfDelivery {
		s.self.propose(now)
	}
	return err
}

// ProposeUnreliable hands msg to a core with the Unreliable level
// (UnreliableCore, found through wrappers: Find), or returns
// ErrNoUnreliable.
func (s *Stepper) ProposeUnreliable(now Time, msg []byte) error {
	if s.unrel == nil {
		return ErrNoUnreliable
	}
	s.now = now
	return s.unrel.ProposeUnreliable(now, msg)
}

// Leave starts the core's clean departure. The frames kept for senders
// released since (HoldFrom) are stepped first, as the next Tick would:
// a core that left takes no more input.
func (s *Stepper) Leave(now Time) {
	s.now = now
	if len(s.replay) > 0 {
		s.stepReleased()
	}
	s.c.Leave(now)
}

// Deadline is when Tick must next run (0: nothing pending).
func (s *Stepper) Deadline() Time {
	if len(s.replay) > 0 {
		return max(s.now, 1) // a frame kept by HoldFrom waits for Tick
	}
	return s.c.Deadline()
}

// Blocked reports whether Propose may refuse for want of window room.
func (s *Stepper) Blocked() bool { return s.c.Blocked() }

// Done reports whether the core is finished.
func (s *Stepper) Done() bool { return s.c.Done() }

// Ready returns the core's Ready and counts its deliveries and events.
// Calling it again before Advance returns the same output without
// counting it twice.
func (s *Stepper) Ready() Ready {
	rd := s.c.Ready()
	if s.readied {
		return rd
	}
	s.readied = true
	for i := range rd.Deliveries {
		if p := s.peer(rd.Deliveries[i].From); p != nil {
			p.delivered++
			p.bytes += uint64(len(rd.Deliveries[i].Data))
		}
		if s.info.SelfDelivery && rd.Deliveries[i].From == s.info.Self {
			s.self.delivered(s.now)
		}
	}
	for _, ev := range rd.Events {
		s.events.add(ev)
		if ev.Kind == ViewInstalled && ev.View != nil {
			s.adopt(ev.View.Members)
			continue
		}
		// A removed member's repair ends unfinished, uncounted.
		if p := s.peer(ev.Member); p != nil && ev.Kind != SequencerChanged {
			p.repairSince = 0
		}
	}
	return rd
}

// Advance says the last Ready was carried out.
func (s *Stepper) Advance() {
	s.readied = false
	s.c.Advance()
}

// DeliveredFrom is the number of messages from member id handed out so
// far (in Ready).
func (s *Stepper) DeliveredFrom(id frame.MemberID) uint64 {
	if p := s.peer(id); p != nil {
		return p.delivered
	}
	return 0
}

// Counters are what the stepper measured.
type Counters struct {
	// Bad are received frames dropped before the core, by decode error.
	Bad BadFrames
	// Held counts frames left unstepped under Hold or HoldFrom, and the
	// frames that deliver of a sender a Holder core holds (HoldFrom).
	Held uint64
	// Peers are per member, by id, this one included.
	Peers []PeerCounters
	// RepairP50 and RepairP99 are over the recent repairs of all members.
	RepairP50, RepairP99 Duration
}

// PeerCounters is what was delivered from one member and how long its
// repairs took: from detecting a gap (the Step that revealed it) to
// filling it, over the most recent 256 repairs.
type PeerCounters struct {
	ID                   frame.MemberID
	Delivered            uint64 // messages
	DeliveredBytes       uint64
	Repairs              uint64
	RepairP50, RepairP99 Duration
}

// Counters returns what the stepper measured (it allocates).
func (s *Stepper) Counters() Counters {
	c := Counters{Bad: s.bad, Held: s.held}
	var all []Duration
	for i := range s.peers {
		p := &s.peers[i]
		if !p.member {
			continue
		}
		d := p.latency.samples()
		all = append(all, d...)
		p50, p99 := Percentiles(d)
		c.Peers = append(c.Peers, PeerCounters{ID: s.base + frame.MemberID(i), Delivered: p.delivered,
			DeliveredBytes: p.bytes, Repairs: p.repairs, RepairP50: p50, RepairP99: p99})
	}
	c.RepairP50, c.RepairP99 = Percentiles(all)
	return c
}

// Percentiles returns the 50th and 99th percentile of d (nearest rank),
// sorting d.
func Percentiles(d []Duration) (p50, p99 Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	rank := func(p int) Duration { return d[max(0, (p*len(d)+99)/100-1)] }
	return rank(50), rank(99)
}

// BadFrames counts received frames dropped before the core saw them, by
// what was wrong (the frame package's decode error kinds).
type BadFrames struct {
	NotRbcast uint64 // wrong EtherType or truncated Ethernet header
	Short     uint64
	Length    uint64
	Version   uint64
	Type      uint64
	Flags     uint64
	Group     uint64 // another group's frames
	Checksum  uint64
	AckVector uint64
	Auth      uint64
	Body      uint64
	Other     uint64
}

func (b *BadFrames) count(err error) {
	switch {
	case errors.Is(err, frame.ErrEthernet):
		b.NotRbcast++
	case errors.Is(err, frame.ErrShort):
		b.Short++
	case errors.Is(err, frame.ErrLength):
		b.Length++
	case errors.Is(err, frame.ErrVersion):
		b.Version++
	case errors.Is(err, frame.ErrType):
		b.Type++
	case errors.Is(err, frame.ErrFlags):
		b.Flags++
	case errors.Is(err, frame.ErrGroup):
		b.Group++
	case errors.Is(err, frame.ErrChecksum):
		b.Checksum++
	case errors.Is(err, frame.ErrAckVector):
		b.AckVector++
	case errors.Is(err, frame.ErrAuth):
		b.Auth++
	case errors.Is(err, frame.ErrBody):
		b.Body++
	default:
		b.Other++
	}
}

// Total is the number of frames dropped for any reason.
func (b BadFrames) Total() uint64 {
	return b.NotRbcast + b.Short + b.Length + b.Version + b.Type + b.Flags + b.Group + b.Checksum +
		b.AckVector + b.Auth + b.Body + b.Other
}

// Find returns the first core in c's chain of wrappers (each one's
// Unwrap, as registration's attached core has; a wrapper's Unwrap always
// returns the same core, so a chain found once stays) that implements T: a
// wrapper that embeds a core hides the inner core's optional methods
// (UnreliableCore, PBP's Expect) from a type assertion on it.
func Find[T any](c Core) (T, bool) {
	for {
		if t, ok := c.(T); ok {
			return t, true
		}
		u, ok := c.(interface{ Unwrap() Core })
		if !ok {
			var zero T
			return zero, false
		}
		c = u.Unwrap()
	}
}
