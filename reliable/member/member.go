// Package member is group registration as a deterministic state machine
// (Auld's thesis, ch. 3, "group registration"): one process, the server,
// is member 0 and admits the others; each joiner broadcasts Join until the
// server Welcomes it; once Size members are registered the server
// broadcasts Start with the member list (id, MAC, incarnation of each),
// and every member starts PBP with it. Like the protocol cores it does no
// I/O and reads no clock (DESIGN.md, decision 1): the runtime feeds it
// frames (Step) and the time (Tick), sends what Ready returns and calls
// Advance.
//
// Wire use (no frame types beyond Join, Welcome and Start):
//   - Join: header Sender is NoMember while joining; once a member has the
//     Start, it answers every Start with a Join whose header Sender is its
//     assigned id — the Start acknowledgement. The header's Incarnation
//     is the joiner's incarnation.
//   - Welcome: unicast to the joiner. Assigning the server's own id 0
//     refuses it (no joiner can be member 0, and the decoder rejects
//     NoMember): the group is full, or, when the Welcome's ConfigHash
//     differs from the joiner's, its configuration differs from the
//     server's.
//   - Start: broadcast, repeated every Retry until every member has
//     acknowledged it (a Join naming its id, or any PBP frame, reported
//     with Heard).
package member

import (
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// Server is the server's member id.
const Server frame.MemberID = 0

// Config is one process's registration settings.
type Config struct {
	Group uint32
	// Size is the number of members, the server included.
	Size   int
	Server bool
	// MAC is this process's unicast address, Incarnation its restart
	// epoch (it becomes its MemberInfo's).
	MAC         [6]byte
	Incarnation uint32
	// Nonce identifies a joiner's Joins (the runtime draws it at random);
	// duplicate Joins with the same nonce get the same id.
	Nonce uint64
	// Requested is the id a joiner asks the server for (Join's
	// Requested); it gets it if no other member has it, else the lowest
	// free id. 0 (the server's id) means no wish.
	Requested frame.MemberID
	// Window and MTU are reported in Join; ConfigHash must match the
	// server's (the runtime hashes every setting members must share).
	Window     uint16
	MTU        uint32
	ConfigHash uint64
	// Retry is how often Join (joiner) and Start (server) repeat until
	// answered.
	Retry     clock.Duration
	EtherType uint16 // 0 means frame.EtherType
}

// Errors.
var (
	// ErrConfig is wrapped by errors about a bad Config.
	ErrConfig = errors.New("member: invalid configuration")
	// ErrRefused: the server refused this joiner (Err says why).
	ErrRefused = errors.New("member: registration refused by the server")
	// ErrIgnored is returned by Step for frames registration does not use
	// in this role; they change nothing.
	ErrIgnored = errors.New("member: frame not used by registration here")
)

// Refusal records a Join the server refused, for its log.
type Refusal struct {
	MAC        [6]byte
	Nonce      uint64
	ConfigHash uint64 // the joiner's
	Full       bool   // the group was full; otherwise the hash differed
}

func (r Refusal) String() string {
	if r.Full {
		return fmt.Sprintf("Join from %x (nonce %#x) refused: the group is full", r.MAC, r.Nonce)
	}
	return fmt.Sprintf("Join from %x (nonce %#x) refused: its configuration hash %#x differs from ours", r.MAC, r.Nonce, r.ConfigHash)
}

// Registrar is one process's registration state machine.
type Registrar struct {
	cfg       Config
	etherType uint16
	skipCRC   bool // the link writes every frame's CRC (SkipCRC)

	// Server side.
	members []frame.MemberInfo // by admission order; [0] is the server
	nonces  []uint64           // nonces[i] admitted members[i]
	acked   []bool             // acked[i]: members[i] has the Start
	startAt clock.Time         // next Start repeat; 0 when all acked

	// Joiner side.
	self    frame.MemberID
	welcome bool
	joinAt  clock.Time // next Join repeat
	joins   int        // Joins sent
	err     error

	started  bool
	now      clock.Time
	frames   [][]byte
	bufs     [][]byte
	refusals []Refusal
	events   []core.Event
}

// New returns a registrar.
func New(cfg Config) (*Registrar, error) {
	switch {
	case cfg.Size < 1 || cfg.Size > MaxSize:
		return nil, fmt.Errorf("%w: Size is %d, want 1..%d (a Start frame must fit the smallest MTU)", ErrConfig, cfg.Size, MaxSize)
	case cfg.MAC[0]&1 != 0 || cfg.MAC == [6]byte{}:
		return nil, fmt.Errorf("%w: MAC %x is not a unicast address", ErrConfig, cfg.MAC)
	case cfg.Retry <= 0:
		return nil, fmt.Errorf("%w: Retry is %d ns, want > 0", ErrConfig, int64(cfg.Retry))
	}
	r := &Registrar{cfg: cfg, etherType: cfg.EtherType, self: frame.NoMember}
	if r.etherType == 0 {
		r.etherType = frame.EtherType
	}
	if cfg.Server {
		r.self = Server
		r.members = []frame.MemberInfo{{ID: Server, MAC: cfg.MAC, Incarnation: cfg.Incarnation}}
		r.nonces = []uint64{cfg.Nonce}
		r.acked = []bool{true}
	}
	return r, nil
}

// MaxSize is the largest group registration handles: its Start frame
// (12 bytes per member) fits the minimum MTU with room to spare.
const MaxSize = 40

// Tick runs the retransmission timers; the first call starts them.
func (r *Registrar) Tick(now clock.Time) {
	r.now = max(r.now, now)
	switch {
	case r.cfg.Server:
		if !r.started && len(r.members) == r.cfg.Size {
			r.start()
		}
		if r.startAt != 0 && r.now >= r.startAt {
			r.sendStart()
		}
	case r.err == nil && !r.started && !r.welcome && (r.joinAt == 0 || r.now >= r.joinAt):
		r.sendJoin()
	}
}

// Deadline is when Tick must next run; 0 when nothing is pending.
func (r *Registrar) Deadline() clock.Time {
	if r.cfg.Server {
		return r.startAt
	}
	if r.started || r.welcome || r.err != nil {
		return 0
	}
	return r.joinAt
}

// Step handles one received registration frame (already validated by
// frame.ParseGroup). src is its Ethernet source.
func (r *Registrar) Step(now clock.Time, src, _ [6]byte, v frame.View) error {
	r.now = max(r.now, now)
	switch t := v.Type(); {
	case t == frame.Join && r.cfg.Server:
		r.onJoin(src, v)
	case t == frame.Welcome && !r.cfg.Server:
		return r.onWelcome(v)
	case t == frame.Start && !r.cfg.Server:
		return r.onStart(v)
	default:
		return fmt.Errorf("%w: %v from %x", ErrIgnored, t, src)
	}
	return nil
}

func (r *Registrar) onJoin(src [6]byte, v frame.View) {
	j := v.Join()
	for i := range r.members {
		if r.nonces[i] != j.Nonce || r.members[i].MAC != src {
			continue
		}
		// A member we admitted: a repeat (its Welcome was lost), or, if
		// it names its id, its acknowledgement of the Start.
		if r.started && v.Sender() == r.members[i].ID {
			r.ack(i)
			return
		}
		r.sendWelcome(src, j.Nonce, r.members[i].ID)
		return
	}
	if j.ConfigHash != r.cfg.ConfigHash {
		r.refused(Refusal{MAC: src, Nonce: j.Nonce, ConfigHash: j.ConfigHash})
		r.refuse(src, j.Nonce)
		return
	}
	if len(r.members) == r.cfg.Size {
		r.refused(Refusal{MAC: src, Nonce: j.Nonce, ConfigHash: j.ConfigHash, Full: true})
		r.refuse(src, j.Nonce)
		return
	}
	id := r.freeID(j.Requested)
	r.members = append(r.members, frame.MemberInfo{ID: id, MAC: src, Incarnation: v.Incarnation()})
	r.nonces = append(r.nonces, j.Nonce)
	r.acked = append(r.acked, false)
	r.sendWelcome(src, j.Nonce, id)
	if len(r.members) == r.cfg.Size {
		r.start()
	}
}

// refused records a refusal for the log, at most maxRefusals between
// calls of Refusals: a misconfigured joiner repeats its Join.
func (r *Registrar) refused(x Refusal) {
	if len(r.refusals) < maxRefusals {
		r.refusals = append(r.refusals, x)
	}
}

const maxRefusals = 16

// refuse answers a Join with a Welcome assigning the server's own id.
func (r *Registrar) refuse(dst [6]byte, nonce uint64) { r.sendWelcome(dst, nonce, Server) }

// freeID returns the requested id if it is free, else the lowest free one.
func (r *Registrar) freeID(req frame.MemberID) frame.MemberID {
	taken := func(id frame.MemberID) bool {
		for _, m := range r.members {
			if m.ID == id {
				return true
			}
		}
		return false
	}
	if req != frame.NoMember && req != Server && !taken(req) {
		return req
	}
	id := frame.MemberID(1)
	for taken(id) {
		id++
	}
	return id
}

func (r *Registrar) start() {
	r.started = true
	r.sendStart()
}

// Heard tells the server that member id sent a PBP frame: it has the
// Start.
func (r *Registrar) Heard(id frame.MemberID) {
	for i, m := range r.members {
		if m.ID == id {
			r.ack(i)
		}
	}
}

func (r *Registrar) ack(i int) {
	r.acked[i] = true
	for _, a := range r.acked {
		if !a {
			return
		}
	}
	r.startAt = 0
}

func (r *Registrar) onWelcome(v frame.View) error {
	w := v.Welcome()
	if w.Nonce != r.cfg.Nonce || r.started || r.err != nil {
		return fmt.Errorf("%w: Welcome for nonce %#x", ErrIgnored, w.Nonce)
	}
	switch {
	case w.ConfigHash != r.cfg.ConfigHash:
		r.err = fmt.Errorf("%w: the server's configuration hash is %#x, ours %#x: every member must use the same group settings (mode, window, MTU, EtherType, timers)", ErrRefused, w.ConfigHash, r.cfg.ConfigHash)
	case w.Assigned == Server:
		r.err = fmt.Errorf("%w: the group of %d members is already full", ErrRefused, w.Members)
	default:
		r.self, r.welcome = w.Assigned, true
	}
	return nil
}

func (r *Registrar) onStart(v frame.View) error {
	if r.err != nil {
		return fmt.Errorf("%w: Start after refusal", ErrIgnored)
	}
	ml := v.Members()
	self := -1
	for i := range ml.Len() {
		m := ml.At(i)
		if m.MAC == r.cfg.MAC && m.Incarnation == r.cfg.Incarnation {
			self = i
		}
	}
	if self < 0 {
		return fmt.Errorf("%w: Start without us (MAC %x incarnation %d)", ErrIgnored, r.cfg.MAC, r.cfg.Incarnation)
	}
	if !r.started {
		r.started = true
		r.self = ml.At(self).ID
		r.members = r.members[:0]
		for i := range ml.Len() {
			r.members = append(r.members, ml.At(i))
		}
	}
	r.sendJoin() // the acknowledgement: a Join naming our id
	return nil
}

// Started reports whether registration is complete here, with this
// member's id and the member list.
func (r *Registrar) Started() (self frame.MemberID, members []frame.MemberInfo, ok bool) {
	if !r.started {
		return frame.NoMember, nil, false
	}
	return r.self, append([]frame.MemberInfo(nil), r.members...), true
}

// Done reports whether the registrar has nothing left to do: the server's
// Start is acknowledged by every member, or the joiner has started.
func (r *Registrar) Done() bool { return r.started && r.startAt == 0 }

// Welcomed reports whether the joiner has its id (it may still wait for
// Start).
func (r *Registrar) Welcomed() bool { return r.welcome }

// Joins is how many Join frames the joiner has sent.
func (r *Registrar) Joins() int { return r.joins }

// Err is why registration failed (the server refused us), or nil.
func (r *Registrar) Err() error { return r.err }

// Registered is the number of members admitted so far (server).
func (r *Registrar) Registered() int { return len(r.members) }

// Refusals returns, and forgets, the Joins the server refused since the
// last call.
func (r *Registrar) Refusals() []Refusal {
	out := r.refusals
	r.refusals = nil
	return out
}

// Ready returns the frames to send (complete Ethernet frames), and, at
// the server, a JoinRefused event for each Join refused since the last
// Ready (see Refusals); valid until Advance.
func (r *Registrar) Ready() core.Ready {
	for _, x := range r.Refusals() {
		r.events = append(r.events, core.Event{Kind: core.JoinRefused, At: r.now, Reason: x.String()})
	}
	return core.Ready{Frames: r.frames, Events: r.events}
}

// Advance says the frames of the last Ready were sent.
func (r *Registrar) Advance() {
	clear(r.events)
	r.events = r.events[:0]
	for i, f := range r.frames {
		r.bufs = append(r.bufs, f[:0])
		r.frames[i] = nil
	}
	r.frames = r.frames[:0]
}

// SkipCRC leaves every frame's CRC to the link (core.CRCSkipper).
func (r *Registrar) SkipCRC() { r.skipCRC = true }

func (r *Registrar) emit(dst [6]byte, sender frame.MemberID, body frame.Body) {
	var b []byte
	if n := len(r.bufs); n > 0 {
		b, r.bufs = r.bufs[n-1], r.bufs[:n-1]
	}
	b = frame.AppendEthernet(b, dst, r.cfg.MAC, r.etherType)
	h := frame.Header{Group: r.cfg.Group, Sender: sender, Incarnation: r.cfg.Incarnation, SkipCRC: r.skipCRC}
	b, err := frame.Append(b, &h, body)
	if err != nil {
		return // cannot happen: every body here is fixed-size or bounded by MaxSize
	}
	r.frames = append(r.frames, b)
}

func (r *Registrar) sendJoin() {
	sender := frame.NoMember
	if r.started {
		sender = r.self
	}
	req := frame.NoMember
	if r.cfg.Requested != Server {
		req = r.cfg.Requested
	}
	r.emit(frame.Broadcast, sender, &frame.JoinBody{Requested: req, Window: r.cfg.Window, MTU: r.cfg.MTU,
		Nonce: r.cfg.Nonce, ConfigHash: r.cfg.ConfigHash})
	r.joins++
	r.joinAt = r.now.Add(r.cfg.Retry)
}

func (r *Registrar) sendWelcome(dst [6]byte, nonce uint64, id frame.MemberID) {
	r.emit(dst, Server, &frame.WelcomeBody{Nonce: nonce, Assigned: id, Members: uint16(r.cfg.Size), ConfigHash: r.cfg.ConfigHash})
}

func (r *Registrar) sendStart() {
	r.emit(frame.Broadcast, Server, &frame.StartBody{Members: r.members})
	r.startAt = 0
	for _, a := range r.acked {
		if !a {
			r.startAt = r.now.Add(r.cfg.Retry)
			break
		}
	}
}

// The contract (core.Core): registration is a core that carries no
// application messages. Before the group starts the runtime drives the
// Registrar alone; after, Attach runs it beside the protocol core.

var _ core.Core = (*Registrar)(nil)

// Propose refuses: registration carries no application messages.
func (r *Registrar) Propose(clock.Time, []byte) error { return core.ErrNotAccepting }

// Leave does nothing: a registrar has no departure of its own.
func (r *Registrar) Leave(clock.Time) {}

// Blocked is always true: Propose accepts nothing.
func (r *Registrar) Blocked() bool { return true }

// Info names this process's id once it has one (frame.NoMember before).
func (r *Registrar) Info() core.Info {
	return core.Info{Self: r.self, Delivers: func(frame.Type) bool { return false }, InFlight: "registration frames"}
}

// Stats are empty: registration's counters are Registered and Joins.
func (r *Registrar) Stats() core.Stats { return core.Stats{} }

// Members returns the members registered so far (all live).
func (r *Registrar) Members() []core.Member {
	out := make([]core.Member, 0, len(r.members))
	for _, m := range r.members {
		out = append(out, core.Member{ID: m.ID, Self: m.ID == r.self, Live: true})
	}
	return out
}

// Repair: registration has no streams to repair.
func (r *Registrar) Repair(from frame.MemberID) (frame.MemberID, bool) { return from, false }

// Attach returns c with the registrar r running beside it, once the group
// has started: the registration frames (Join, Welcome, Start) go to r,
// which keeps answering them until every member has started (the server
// repeats Start, members acknowledge every Start they get); every other
// frame goes to c, and each one c accepts tells the server that its
// sender has the Start (Heard). Everything else is c's.
func Attach(r *Registrar, c core.Core) core.Core { return &attached{Core: c, r: r} }

type attached struct {
	core.Core
	r      *Registrar
	frames [][]byte
	events []core.Event
}

// Unwrap returns the core registration runs beside, for the runtime's
// optional capabilities (reliable.Group.Expect).
func (a *attached) Unwrap() core.Core { return a.Core }

// SkipCRC passes core.CRCSkipper on to registration and the core.
func (a *attached) SkipCRC() {
	a.r.SkipCRC()
	if s, ok := a.Core.(core.CRCSkipper); ok {
		s.SkipCRC()
	}
}

func registration(t frame.Type) bool {
	return t == frame.Join || t == frame.Welcome || t == frame.Start
}

func (a *attached) Step(now clock.Time, src, dst [6]byte, v frame.View) error {
	if registration(v.Type()) {
		return a.r.Step(now, src, dst, v)
	}
	if err := a.Core.Step(now, src, dst, v); err != nil {
		return err
	}
	if a.r.cfg.Server {
		a.r.Heard(v.Sender())
	}
	return nil
}

func (a *attached) Tick(now clock.Time) {
	a.Core.Tick(now)
	if !a.r.Done() {
		a.r.Tick(now)
	}
}

// Deadline counts the Start repeats: they are timers of the loop like the
// core's.
func (a *attached) Deadline() clock.Time {
	d := a.Core.Deadline()
	if t := a.r.Deadline(); t != 0 && !a.r.Done() && (d == 0 || t < d) {
		d = t
	}
	return d
}

func (a *attached) Ready() core.Ready {
	rd := a.Core.Ready()
	reg := a.r.Ready()
	if len(reg.Frames) == 0 && len(reg.Events) == 0 {
		return rd
	}
	a.frames = append(append(a.frames[:0], reg.Frames...), rd.Frames...)
	a.events = append(append(a.events[:0], reg.Events...), rd.Events...)
	rd.Frames, rd.Events = a.frames, a.events
	return rd
}

func (a *attached) Advance() {
	a.Core.Advance()
	a.r.Advance()
	clear(a.frames)
	clear(a.events)
}
