package kv

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// Thesis mode (Auld §7.1, docs/kv.md "Thesis mode"): the replicas share
// the request list Q and the done list D through BDSM, one segment per
// replica that only its owner writes (unbuffered), and each executes a
// request once it is stable by the Δ rule. ThesisNode is one replica as a
// deterministic state machine: its inputs are the clock (Now arguments),
// the clients' requests, and the locations of the other replicas'
// segments as BDSM applies them (Remote); its output is the writes to
// its own segment (Writes) and the replies. The hosts — the simulation
// test and ServeThesis — move the writes through a dsm.Segment and feed
// the updates dsm applies back in.

// ThesisConfig configures a thesis-mode replica. The timing bounds are
// assumptions the mode's safety rests on (docs/kv.md): every clock is
// within Eps of every other, a write of a replica that stays up is
// applied at every live replica within Tr of being issued, and a request
// reaches its replica within Tc of its timestamp.
type ThesisConfig struct {
	// Replicas is the number of replicas n; Self this one's rank
	// (0..n-1), which is also its segment's index.
	Replicas, Self int
	// Machine is the state machine (nil: NewStore()).
	Machine StateMachine
	// MaxSessions is the session table's size (0: DefaultMaxSessions).
	MaxSessions int
	// Tc bounds the time from a request's timestamp to its arrival at
	// the replica that writes it into its Q. The replica stamps a request
	// with its own clock when it arrives, so Tc may be 0; it is kept for a
	// client that stamps its requests, as the thesis's does.
	Tc time.Duration
	// Tr bounds the time from a write to its application at every other
	// live replica (the group's repair included).
	Tr time.Duration
	// Eps bounds the difference between any two replicas' clocks.
	Eps time.Duration
	// F is how many replicas may crash while a request spreads; copies
	// are relayed through at most F hops (0: (Replicas-1)/2, at least 1).
	F int
	// Slots is the number of entries of Q (D has twice as many); 0: 64.
	Slots int
	// SlotSize is the size of one entry, the segment's location size
	// (0: 256). A request longer than SlotSize-14 bytes is refused.
	SlotSize int
	// Heartbeat is how often the replica writes its clock into its
	// segment when it writes nothing else (0: Tr); SuspectAfter how
	// long another replica may stay silent before its lists no longer
	// hold up the clean-up of Q and D (0: 4*Tr). Neither matters for
	// safety: only for how soon entries are freed.
	Heartbeat, SuspectAfter time.Duration
	// OnApply is called for every request executed, in order.
	OnApply func(q Request, result []byte, fresh bool)
	// OnRefused is told of every copy refused because it came too late
	// (or at too many hops): under the timing assumptions it never
	// happens, except for copies from a replica that crashed meanwhile.
	OnRefused func(what string)
}

// Delta is the Δ of the stability rule: t_c + (F+1)·(t_r + ε). The
// thesis's (printed t_r + 2t_r + ε, meant t_c + 2t_r + ε) is, for F = 1,
// one ε short: a copy is written when its writer's clock allows, and
// judged by another clock.
func (c ThesisConfig) Delta() time.Duration {
	return c.Tc + time.Duration(c.F+1)*(c.Tr+c.Eps)
}

// adoptBy is the last time, on the reader's clock, at which a copy
// written at hop h may be adopted: t_c + (h+1)·(t_r + ε) after the
// request's timestamp. The origin writes at ts on its clock, seen by
// ts + t_r + ε on any other; a copy adopted by its hop's deadline D is
// seen by D + t_r + ε on any other clock, the next hop's deadline.
func (c ThesisConfig) adoptBy(ts int64, hop int) int64 {
	return ts + int64(c.Tc+time.Duration(hop+1)*(c.Tr+c.Eps))
}

// Locations is the number of locations of each replica's segment: Slots
// entries of Q, 2·Slots of D, and the heartbeat.
func (c ThesisConfig) Locations() int { return 3*c.Slots + 1 }

const (
	slotEmpty = 0
	slotQ     = 1
	slotD     = 2
	slotBeat  = 3
	// slotHeader: kind u8, hop u8, origin u16, ts i64, length u16.
	slotHeader = 14
)

// instance identifies one copy of a request in the lists: its timestamp,
// the replica that stamped it (origin), and the request's (client, seq).
// A retry stamped again is another instance of the same request; the
// session table answers the second with the first's result.
type instance struct {
	ts          int64
	origin      uint16
	client, seq uint64
}

func (a instance) less(b instance) bool {
	switch {
	case a.ts != b.ts:
		return a.ts < b.ts
	case a.client != b.client:
		return a.client < b.client
	case a.seq != b.seq:
		return a.seq < b.seq
	}
	return a.origin < b.origin
}

// qEntry is a request in a Q list.
type qEntry struct {
	id  instance
	hop int
	req []byte // the encoded Request
}

// peerLists is this replica's copy of another replica's segment.
type peerLists struct {
	q     map[int]qEntry   // by location
	d     map[int]instance // by location
	qIDs  map[instance]int // how many of its Q locations hold it
	dIDs  map[instance]int
	heard int64 // last update applied from it, on this replica's clock
}

// SlotWrite is one write to the replica's own segment: location Loc
// takes Data (SlotSize bytes).
type SlotWrite struct {
	Loc  int
	Data []byte
}

// ThesisNode is one thesis-mode replica without I/O.
type ThesisNode struct {
	cfg   ThesisConfig
	rep   *Replica
	store *Store

	q       []*qEntry // own Q by slot
	qAt     map[instance]int
	d       []*instance // own D by slot
	dAt     map[instance]int
	pending []qEntry // adopted, not executed, sorted by instance
	peers   []peerLists
	waiters map[[2]uint64][]func([]byte)
	writes  []SlotWrite
	beat    int64 // last write, for the heartbeat
	// Stats.
	Adopted, Refused, Executed, QFull uint64
}

// NewThesisNode returns a replica with empty lists and an empty state.
func NewThesisNode(cfg ThesisConfig) (*ThesisNode, error) {
	if cfg.Replicas < 1 || cfg.Self < 0 || cfg.Self >= cfg.Replicas {
		return nil, fmt.Errorf("kv: thesis mode: replica %d of %d, want 0 ≤ self < replicas", cfg.Self, cfg.Replicas)
	}
	if cfg.Tr <= 0 || cfg.Eps < 0 || cfg.Tc < 0 {
		return nil, fmt.Errorf("kv: thesis mode: t_r %v, ε %v, t_c %v: want t_r > 0, ε ≥ 0, t_c ≥ 0", cfg.Tr, cfg.Eps, cfg.Tc)
	}
	if cfg.F <= 0 {
		cfg.F = max(1, (cfg.Replicas-1)/2)
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 64
	}
	if cfg.SlotSize <= 0 {
		cfg.SlotSize = 256
	}
	if cfg.SlotSize < slotHeader+17 {
		return nil, fmt.Errorf("kv: thesis mode: slot size %d, want at least %d", cfg.SlotSize, slotHeader+17)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = cfg.Tr
	}
	if cfg.SuspectAfter <= 0 {
		cfg.SuspectAfter = 4 * cfg.Tr
	}
	if cfg.Machine == nil {
		cfg.Machine = NewStore()
	}
	n := &ThesisNode{cfg: cfg, rep: NewReplica(cfg.Machine, cfg.MaxSessions), q: make([]*qEntry, cfg.Slots), qAt: map[instance]int{},
		d: make([]*instance, 2*cfg.Slots), dAt: map[instance]int{}, peers: make([]peerLists, cfg.Replicas), waiters: map[[2]uint64][]func([]byte){}}
	n.store, _ = cfg.Machine.(*Store)
	for i := range n.peers {
		n.peers[i] = peerLists{q: map[int]qEntry{}, d: map[int]instance{}, qIDs: map[instance]int{}, dIDs: map[instance]int{}}
	}
	return n, nil
}

// Config is the node's configuration with its defaults filled in.
func (n *ThesisNode) Config() ThesisConfig { return n.cfg }

// Replica is the machine and its session table.
func (n *ThesisNode) Replica() *Replica { return n.rep }

// Writes returns and forgets the writes to the replica's own segment,
// in the order they must be issued.
func (n *ThesisNode) Writes() []SlotWrite {
	w := n.writes
	n.writes = nil
	return w
}

// Pending is the number of requests adopted and not yet executed.
func (n *ThesisNode) Pending() int { return len(n.pending) }

// Request takes a client's encoded request at time now; reply is called
// once with the encoded Reply (at once, from a later Tick, or never if
// the replica crashes first).
func (n *ThesisNode) Request(now time.Time, data []byte, reply func([]byte)) {
	q, err := ParseRequest(data)
	if err != nil {
		reply(AppendReply(nil, Reply{Result: Result{Status: StatusBadRequest, Value: []byte(err.Error())}}))
		return
	}
	answer := func(res Result) { reply(AppendReply(nil, Reply{Client: q.Client, Seq: q.Seq, Result: res})) }
	switch {
	case q.Local && q.Op.Kind == OpGet && n.store != nil:
		if v, ok := n.store.Get(q.Op.Key); ok {
			answer(Result{Status: StatusOK, Value: v})
		} else {
			answer(Result{Status: StatusNotFound})
		}
		return
	case !q.Open && q.Client == 0:
		answer(Result{Status: StatusExpired, Value: []byte("session 0 is never opened: open a session first")})
		return
	case len(data) > n.cfg.SlotSize-slotHeader:
		answer(Result{Status: StatusBadRequest, Value: fmt.Appendf(nil, "request of %d bytes: thesis mode's entries hold %d (slot size %d less a %d-byte header)",
			len(data), n.cfg.SlotSize-slotHeader, n.cfg.SlotSize, slotHeader)})
		return
	}
	if !q.Open {
		if res, ok := n.rep.Answered(q.Client, q.Seq); ok {
			r, _ := ParseResult(res)
			answer(r)
			return
		}
		if q.Seq < n.rep.LastSeq(q.Client) {
			answer(Result{Status: StatusStale})
			return
		}
	}
	slot := n.freeQ()
	if slot < 0 {
		n.QFull++
		answer(Result{Status: StatusUnavailable})
		return
	}
	// A new instance, stamped with this replica's clock (Tc: 0 from the
	// stamp to the Q). A retry of a request already in Q is stamped again;
	// both instances are executed in their turn, the second answered by
	// the session table with the first's result.
	id := instance{ts: now.UnixNano(), origin: uint16(n.cfg.Self), client: q.Client, seq: q.Seq}
	if _, dup := n.qAt[id]; dup {
		id.ts++ // two requests of one client at one clock reading
	}
	k := [2]uint64{q.Client, q.Seq}
	n.waiters[k] = append(n.waiters[k], reply)
	n.adopt(now, qEntry{id: id, hop: 0, req: append([]byte(nil), data...)}, slot)
}

// freeQ is a free slot of the own Q, or -1.
func (n *ThesisNode) freeQ() int {
	return slices.Index(n.q, nil)
}

// adopt puts e into the own Q (at slot, or a free one; none free: it is
// still executed here, and counted in QFull) and the pending list.
func (n *ThesisNode) adopt(now time.Time, e qEntry, slot int) {
	if slot < 0 {
		slot = n.freeQ()
	}
	if slot >= 0 {
		n.q[slot] = &e
		n.qAt[e.id] = slot
		n.write(now, slot, n.encode(slotQ, e.hop, e.id, e.req))
	} else {
		n.QFull++
		n.qAt[e.id] = -1
	}
	i, _ := slices.BinarySearchFunc(n.pending, e, func(a, b qEntry) int {
		if a.id.less(b.id) {
			return -1
		}
		if b.id.less(a.id) {
			return 1
		}
		return 0
	})
	n.pending = slices.Insert(n.pending, i, e)
	n.Adopted++
}

func (n *ThesisNode) encode(kind byte, hop int, id instance, body []byte) []byte {
	b := make([]byte, n.cfg.SlotSize)
	b[0], b[1] = kind, byte(hop)
	binary.BigEndian.PutUint16(b[2:], id.origin)
	binary.BigEndian.PutUint64(b[4:], uint64(id.ts))
	binary.BigEndian.PutUint16(b[12:], uint16(len(body)))
	copy(b[slotHeader:], body)
	return b
}

func (n *ThesisNode) write(now time.Time, loc int, data []byte) {
	n.writes = append(n.writes, SlotWrite{Loc: loc, Data: data})
	n.beat = now.UnixNano()
}

// errSlot says what in a location of another replica's segment was
// malformed.
type errSlot struct {
	from, loc int
	what      string
}

func (e errSlot) Error() string {
	return fmt.Sprintf("kv: thesis mode: replica %d's location %d: %s", e.from, e.loc, e.what)
}

// decodeSlot reads one location: its kind, hop, instance and body.
func decodeSlot(from, loc int, data []byte) (kind byte, hop int, id instance, body []byte, err error) {
	if len(data) < slotHeader {
		return 0, 0, id, nil, errSlot{from, loc, fmt.Sprintf("%d bytes, want at least %d", len(data), slotHeader)}
	}
	kind, hop = data[0], int(data[1])
	id.origin = binary.BigEndian.Uint16(data[2:])
	id.ts = int64(binary.BigEndian.Uint64(data[4:]))
	l := int(binary.BigEndian.Uint16(data[12:]))
	if slotHeader+l > len(data) {
		return 0, 0, id, nil, errSlot{from, loc, fmt.Sprintf("length %d at offset 12 runs past the location's %d bytes", l, len(data))}
	}
	body = data[slotHeader : slotHeader+l]
	switch kind {
	case slotEmpty, slotBeat:
	case slotQ:
		q, perr := ParseRequest(body)
		if perr != nil {
			return 0, 0, id, nil, errSlot{from, loc, perr.Error()}
		}
		id.client, id.seq = q.Client, q.Seq
	case slotD:
		if l != 16 {
			return 0, 0, id, nil, errSlot{from, loc, fmt.Sprintf("a done entry of %d bytes, want 16", l)}
		}
		id.client, id.seq = binary.BigEndian.Uint64(body), binary.BigEndian.Uint64(body[8:])
	default:
		return 0, 0, id, nil, errSlot{from, loc, fmt.Sprintf("kind %d at offset 0, want 0..3", kind)}
	}
	return kind, hop, id, body, nil
}

// Remote takes location loc of replica from's segment as BDSM applied it
// here at time now. A malformed location is ignored (the error says why).
func (n *ThesisNode) Remote(now time.Time, from, loc int, data []byte) error {
	if from < 0 || from >= n.cfg.Replicas || from == n.cfg.Self {
		return fmt.Errorf("kv: thesis mode: an update from replica %d, want one of the %d others", from, n.cfg.Replicas-1)
	}
	p := &n.peers[from]
	p.heard = now.UnixNano()
	// A location of another size (a replica configured with other slots)
	// could hold a request too long for this replica's own slots: adopted,
	// it would be written here cut short, a location nobody can decode.
	if loc < 0 || loc >= n.cfg.Locations() {
		return errSlot{from, loc, fmt.Sprintf("no such location: want 0..%d", n.cfg.Locations()-1)}
	}
	if len(data) != n.cfg.SlotSize {
		return errSlot{from, loc, fmt.Sprintf("%d bytes, want the slot size %d", len(data), n.cfg.SlotSize)}
	}
	kind, hop, id, body, err := decodeSlot(from, loc, data)
	if err != nil {
		return err
	}
	if old, ok := p.q[loc]; ok {
		delete(p.q, loc)
		if p.qIDs[old.id]--; p.qIDs[old.id] <= 0 {
			delete(p.qIDs, old.id)
		}
	}
	if old, ok := p.d[loc]; ok {
		delete(p.d, loc)
		if p.dIDs[old]--; p.dIDs[old] <= 0 {
			delete(p.dIDs, old)
		}
	}
	switch kind {
	case slotQ:
		e := qEntry{id: id, hop: hop, req: append([]byte(nil), body...)}
		p.q[loc] = e
		p.qIDs[id]++
		n.consider(now, e)
	case slotD:
		p.d[loc] = id
		p.dIDs[id]++
	}
	return nil
}

// consider adopts a copy seen in another replica's Q if it is new here
// and still valid: written at hop F or less and seen before t_c +
// (hop+1)·(t_r + ε) after its timestamp. After that no replica that stays
// up can first see it in time, so adopting it could make this replica
// execute what another already passed over (fig. 7.3's expiry guard, the
// right way round: it refuses late copies; it never deletes a request
// that waits in Q).
func (n *ThesisNode) consider(now time.Time, e qEntry) {
	if _, have := n.qAt[e.id]; have {
		return
	}
	if _, done := n.dAt[e.id]; done {
		return
	}
	if e.hop > n.cfg.F || now.UnixNano() > n.cfg.adoptBy(e.id.ts, e.hop) {
		n.Refused++
		if n.cfg.OnRefused != nil {
			n.cfg.OnRefused(fmt.Sprintf("replica %d refuses a copy of c%d#%d (stamped by replica %d) at hop %d: %v past its deadline",
				n.cfg.Self, e.id.client, e.id.seq, e.id.origin, e.hop, time.Duration(now.UnixNano()-n.cfg.adoptBy(e.id.ts, e.hop))))
		}
		return
	}
	e.hop++
	n.adopt(now, e, -1)
}

// Tick runs the replica at time now: executes every stable request, in
// order, answers the clients, and cleans up Q and D.
func (n *ThesisNode) Tick(now time.Time) {
	t := now.UnixNano()
	delta := int64(n.cfg.Delta())
	// Definition 7.1, made sensible: r is stable at this replica when it
	// is in its Q and not in its D (pending), no pending request precedes
	// it in (ts, client, seq, origin) order, and its timestamp is more
	// than Δ old. Every copy of a request that precedes it and that any
	// replica that stays up adopts is adopted here by then (adoptBy).
	for len(n.pending) > 0 && n.pending[0].id.ts+delta < t {
		e := n.pending[0]
		n.pending = n.pending[1:]
		n.execute(now, e)
	}
	n.clean(now)
	if t-n.beat >= int64(n.cfg.Heartbeat) {
		n.write(now, 3*n.cfg.Slots, n.encode(slotBeat, 0, instance{ts: t}, nil))
	}
}

// NextDeadline is when Tick next has something to do.
func (n *ThesisNode) NextDeadline() time.Time {
	next := n.beat + int64(n.cfg.Heartbeat)
	if len(n.pending) > 0 {
		next = min(next, n.pending[0].id.ts+int64(n.cfg.Delta())+1)
	}
	return time.Unix(0, next)
}

func (n *ThesisNode) execute(now time.Time, e qEntry) {
	q, err := ParseRequest(e.req)
	if err != nil {
		return // every replica drops it alike
	}
	res, fresh := n.rep.Apply(q)
	n.Executed++
	if slot, ok := n.qAt[e.id]; ok && slot < 0 {
		delete(n.qAt, e.id) // held in memory only (Q was full): nothing to clean
	}
	if n.cfg.OnApply != nil {
		n.cfg.OnApply(q, res, fresh)
	}
	k := [2]uint64{q.Client, q.Seq}
	if ws := n.waiters[k]; len(ws) > 0 {
		delete(n.waiters, k)
		r, _ := ParseResult(res)
		for _, w := range ws {
			w(AppendReply(nil, Reply{Client: q.Client, Seq: q.Seq, Result: r}))
		}
	}
	// Into D (fig. 7.3): the others free their Q entries once every live
	// replica's D holds it.
	slot := slices.Index(n.d, nil)
	if slot < 0 {
		n.QFull++
		return
	}
	id := e.id
	n.d[slot] = &id
	n.dAt[id] = slot
	n.write(now, n.cfg.Slots+slot, n.encode(slotD, 0, id, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, id.client), id.seq)))
}

// live reports whether replica j has been heard from recently.
func (n *ThesisNode) live(j int, t int64) bool {
	return j == n.cfg.Self || t-n.peers[j].heard < int64(n.cfg.SuspectAfter)
}

// clean frees own entries (fig. 7.3, rules 3 and 4): a Q entry once it is
// executed here and every live replica's D holds it; a D entry once no
// live replica's Q holds it. A freed entry is never adopted again: it is
// older than Δ, past every adoption deadline.
func (n *ThesisNode) clean(now time.Time) {
	t := now.UnixNano()
	for slot, e := range n.q {
		if e == nil {
			continue
		}
		if _, done := n.dAt[e.id]; !done {
			continue
		}
		all := true
		for j := range n.peers {
			if j != n.cfg.Self && n.live(j, t) && n.peers[j].dIDs[e.id] == 0 {
				all = false
				break
			}
		}
		if all {
			n.q[slot] = nil
			delete(n.qAt, e.id)
			n.write(now, slot, make([]byte, n.cfg.SlotSize))
		}
	}
	for slot, id := range n.d {
		if id == nil {
			continue
		}
		if _, inQ := n.qAt[*id]; inQ {
			continue
		}
		held := false
		for j := range n.peers {
			if j != n.cfg.Self && n.live(j, t) && n.peers[j].qIDs[*id] > 0 {
				held = true
				break
			}
		}
		if !held {
			n.d[slot] = nil
			delete(n.dAt, *id)
			n.write(now, n.cfg.Slots+slot, make([]byte, n.cfg.SlotSize))
		}
	}
}
