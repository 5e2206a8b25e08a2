package kv

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// Group messages: a kind byte, then the body.
const (
	msgRequest  = 1 // an encoded Request
	msgSnapshot = 2 // view u32, index u32, total u32, then a chunk of a replica snapshot
	msgAnnounce = 3 // view u32, flags u8 (announceHolds), ordered u64, applied u64
)

const (
	chunkHeader  = 1 + 4 + 4 + 4
	announceSize = 1 + 4 + 1 + 8 + 8
	// announceHolds: the announcing member holds a state from an earlier
	// run (NodeConfig.Candidate); ordered and applied are its counters.
	announceHolds = 1
)

// NodeConfig configures a Node.
type NodeConfig struct {
	// Machine is the replicated state machine; nil means NewStore().
	Machine StateMachine
	// MaxMessage is the largest group message (the group's MaxMessage):
	// snapshots are sent in chunks of this size.
	MaxMessage int
	// Replicas is how many replica processes the service has (the
	// group's Size, rbcast-kv -members): a view in which no member has
	// state re-forms the state only once it holds this many members, so
	// that every replica's candidate is weighed (0 means 1).
	Replicas int
	// MaxSessions is the session table's size (0: DefaultMaxSessions):
	// it must be the same at every replica of a group founded without a
	// candidate; a replica that takes a snapshot takes its size too.
	MaxSessions int
	// Candidate is the state this replica held when an earlier run of it
	// stopped (Node.Candidate of that run's node: a Replica snapshot), or
	// nil. It is not served; it is weighed when a view has no member
	// with state (docs/kv.md, "Re-forming the state").
	Candidate []byte
	// OnApply, when set, is called for every request delivered while
	// this node has state, in the order applied: fresh says whether it
	// was executed now (not a retry answered from the session table, nor
	// one of a session not in it). A request that opens a session is
	// fresh, and its result's value is the session's id.
	OnApply func(q Request, result []byte, fresh bool)
	// OnRestore, when set, is called when the node takes a state that is
	// not the one it held (a snapshot from another member, or a candidate
	// other than its own): the requests counted in applied were executed
	// elsewhere, so OnApply did not see them all.
	OnRestore func(applied, ordered uint64)
}

// member is a member of a view by id and incarnation: a restarted
// process is another member.
type member struct {
	id          frame.MemberID
	incarnation uint32
}

// item is what a node without state keeps until a snapshot arrives: a
// delivered message or an installed view.
type item struct {
	data []byte
	view *reliable.ViewInfo
}

// announcement is what a member without state said of itself in the
// current view: whether it holds a candidate, and how far it reaches.
type announcement struct {
	holds            bool
	ordered, applied uint64
}

// Node is one replica of the ordered mode, as a deterministic state
// machine with no I/O: the host feeds it the group's deliveries and
// events (Deliver, OnEvent, in the order the group hands them out) and
// the clients' requests (Request), and sends what Outbox holds through
// the group (Order Total, Views, Safe).
//
// State transfer: every member tracks, identically, which members of the
// view have state (the ready set); at each view the lowest ready member,
// if a member without state is in the view, sends a snapshot of its
// state at the view boundary (in chunks, through the order). A member
// without state keeps everything delivered since its first view; once
// the snapshot of its current view is complete it restores it and
// applies what it kept after that view's boundary. A snapshot completed
// in a later view than its own counts for nothing; the next view's
// sender sends another.
//
// Re-forming: a member without state announces, in every view it
// installs, whether it holds a candidate (the state of an earlier run of
// its process) and how far it reaches. A member with state never
// announces, so when every member of a view has announced in it, every
// member knows, at the same place in the order, that no member has
// state. If the view holds NodeConfig.Replicas members, the one with the
// most advanced candidate (most requests ordered; ties: the lowest id)
// sends it as the view's snapshot, or, if no member holds one, every
// member starts with the empty state there. docs/kv.md argues why this
// loses no acknowledged request while one replica that applied it lives.
type Node struct {
	cfg   NodeConfig
	rep   *Replica
	store *Store // rep's machine, if a Store (local reads)
	self  frame.MemberID

	view    *reliable.ViewInfo
	ready   bool
	readyOf map[member]bool // members of the view with state

	kept      []item   // without state: since the first view
	chunks    [][]byte // without state: the snapshot of the current view so far
	announced map[frame.MemberID]announcement
	decided   bool         // without state: the current view's announcements are complete
	candidate announcement // what this node announces of itself

	waiters map[[2]uint64][]func([]byte)
	outbox  [][]byte
	stopped bool
}

// NewNode returns a replica that has no state until it is in a view.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Machine == nil {
		cfg.Machine = NewStore()
	}
	if cfg.MaxMessage <= max(chunkHeader, announceSize) {
		return nil, fmt.Errorf("kv: NodeConfig.MaxMessage is %d, want more than %d", cfg.MaxMessage, max(chunkHeader, announceSize))
	}
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("kv: NodeConfig.Replicas is %d, want 0 or more", cfg.Replicas)
	}
	if cfg.MaxSessions < 0 {
		return nil, fmt.Errorf("kv: NodeConfig.MaxSessions is %d, want 0 or more", cfg.MaxSessions)
	}
	cfg.Replicas = max(cfg.Replicas, 1)
	n := &Node{cfg: cfg, rep: NewReplica(cfg.Machine, cfg.MaxSessions), readyOf: map[member]bool{}, waiters: map[[2]uint64][]func([]byte){}}
	if cfg.Candidate != nil {
		// The counters lead a Replica snapshot; the rest is checked when
		// (if) the candidate is restored.
		rd := &reader{what: "candidate", b: cfg.Candidate}
		n.candidate = announcement{holds: true, applied: rd.u64("applied"), ordered: rd.u64("ordered")}
		if rd.err != nil {
			return nil, fmt.Errorf("kv: NodeConfig.Candidate: %w", rd.err)
		}
	}
	n.store, _ = cfg.Machine.(*Store)
	return n, nil
}

// Ready reports whether this replica has state and serves requests.
func (n *Node) Ready() bool { return n.ready && !n.stopped }

// Replica is the node's replica (state machine and sessions).
func (n *Node) Replica() *Replica { return n.rep }

// View is the view installed last (nil before the first).
func (n *Node) View() *reliable.ViewInfo { return n.view }

// Candidate is the state this replica holds, for the next run of its
// process (NodeConfig.Candidate) once the group stopped: its replica's
// snapshot if it has state, else the candidate it was given (nil: none).
func (n *Node) Candidate() []byte {
	if n.ready {
		return n.rep.Snapshot()
	}
	return n.cfg.Candidate
}

// Outbox takes the messages to send through the group, in order.
func (n *Node) Outbox() [][]byte {
	out := n.outbox
	n.outbox = nil
	return out
}

// Stop makes the node refuse requests (the group stopped); waiting
// clients get StatusUnavailable.
func (n *Node) Stop() {
	n.stopped = true
	// In the order of the requests, not of the map: a host's reply path
	// may draw from a seeded source (the simulation's lossy client net).
	keys := slices.SortedFunc(maps.Keys(n.waiters), func(a, b [2]uint64) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	for _, k := range keys {
		for _, w := range n.waiters[k] {
			w(AppendReply(nil, Reply{Client: k[0], Seq: k[1], Result: Result{Status: StatusUnavailable}}))
		}
	}
	clear(n.waiters)
}

// Request takes a client's encoded request; reply is called once with
// the encoded Reply (perhaps at once, perhaps from a later Deliver, or
// never if this replica crashes first).
func (n *Node) Request(data []byte, reply func([]byte)) {
	q, err := ParseRequest(data)
	if err != nil {
		reply(AppendReply(nil, Reply{Result: Result{Status: StatusBadRequest, Value: []byte(err.Error())}}))
		return
	}
	answer := func(res Result) { reply(AppendReply(nil, Reply{Client: q.Client, Seq: q.Seq, Result: res})) }
	if !n.Ready() {
		answer(Result{Status: StatusUnavailable})
		return
	}
	if q.Open {
		// Through the order: the session's id is its place there.
		k := [2]uint64{0, q.Seq}
		n.waiters[k] = append(n.waiters[k], reply)
		n.outbox = append(n.outbox, append([]byte{msgRequest}, data...))
		return
	}
	if q.Local && q.Op.Kind == OpGet && n.store != nil {
		v, ok := n.store.Get(q.Op.Key)
		if !ok {
			answer(Result{Status: StatusNotFound})
		} else {
			answer(Result{Status: StatusOK, Value: v})
		}
		return
	}
	if q.Client == 0 {
		// No session has id 0 (ids are places, from 1): refused here, so
		// that it cannot meet an open's answer, which is keyed (0, nonce).
		answer(Result{Status: StatusExpired, Value: []byte("session 0 is never opened: open a session first")})
		return
	}
	if res, ok := n.rep.Answered(q.Client, q.Seq); ok {
		r, _ := ParseResult(res)
		answer(r)
		return
	}
	if q.Seq < n.rep.LastSeq(q.Client) {
		answer(Result{Status: StatusStale})
		return
	}
	k := [2]uint64{q.Client, q.Seq}
	n.waiters[k] = append(n.waiters[k], reply)
	n.outbox = append(n.outbox, append([]byte{msgRequest}, data...))
}

// Deliver takes a message the group delivered, in the group's order.
func (n *Node) Deliver(from frame.MemberID, data []byte) {
	if n.ready {
		n.apply(data)
		return
	}
	if n.view == nil {
		return // before the first view: nothing is delivered then
	}
	// data is the group's buffer, valid only during this call
	// (reliable.Config.Deliver): what is kept, the chunks too, is a copy.
	data = slices.Clone(data)
	n.kept = append(n.kept, item{data: data})
	if len(data) == 0 {
		return
	}
	switch data[0] {
	case msgSnapshot:
		if len(data) < chunkHeader {
			return
		}
		v, idx, total := binary.BigEndian.Uint32(data[1:]), binary.BigEndian.Uint32(data[5:]), binary.BigEndian.Uint32(data[9:])
		if v != n.view.ID || idx != uint32(len(n.chunks)) {
			return
		}
		n.chunks = append(n.chunks, data[chunkHeader:])
		if idx+1 == total {
			n.restoreChunks()
		}
	case msgAnnounce:
		n.onAnnounce(from, data)
	}
}

// onAnnounce records a member's announcement of the current view and,
// once every member announced, decides whose state the view takes.
func (n *Node) onAnnounce(from frame.MemberID, data []byte) {
	if len(data) != announceSize || binary.BigEndian.Uint32(data[1:]) != n.view.ID || n.decided {
		return
	}
	if _, ok := n.announced[from]; ok || !slices.ContainsFunc(n.view.Members, func(m frame.MemberInfo) bool { return m.ID == from }) {
		return
	}
	n.announced[from] = announcement{holds: data[5]&announceHolds != 0,
		ordered: binary.BigEndian.Uint64(data[6:]), applied: binary.BigEndian.Uint64(data[14:])}
	if len(n.announced) < len(n.view.Members) {
		return
	}
	// No member of the view has state. With every replica here, every
	// candidate is weighed; with fewer, one that is missing may hold the
	// most advanced state (or be on its way back with it), so the view
	// waits for the next.
	n.decided = true
	if len(n.view.Members) < n.cfg.Replicas {
		return
	}
	best, found := frame.MemberID(frame.NoMember), false
	var top announcement
	for _, m := range n.view.Members { // by id: ties go to the lowest
		a := n.announced[m.ID]
		if a.holds && (!found || a.ordered > top.ordered || a.ordered == top.ordered && a.applied > top.applied) {
			best, top, found = m.ID, a, true
		}
	}
	switch {
	case found && best == n.self:
		n.sendSnapshot(nil, n.cfg.Candidate)
	case !found:
		// No replica holds any state: the service starts empty, here.
		all := map[member]bool{}
		for _, m := range n.view.Members {
			all[member{m.ID, m.Incarnation}] = true
		}
		n.take(all, nil)
	}
}

// restoreChunks installs the completed snapshot of the current view.
func (n *Node) restoreChunks() {
	snap := slices.Concat(n.chunks...)
	n.chunks = nil
	rd := &reader{what: "snapshot", b: snap}
	nready := rd.u32("ready members")
	readyOf := map[member]bool{}
	for i := uint32(0); i < nready && rd.err == nil; i++ {
		m := member{id: frame.MemberID(rd.u32(fmt.Sprintf("ready member %d id", i)))}
		m.incarnation = rd.u32(fmt.Sprintf("ready member %d incarnation", i))
		readyOf[m] = true
	}
	state := rd.bytes("replica")
	if rd.end() != nil {
		// Every member sent and got the same bytes; a snapshot that does
		// not decode is a bug, and this replica stays without state.
		return
	}
	n.take(readyOf, state)
}

// take makes state (a Replica snapshot; nil: the empty state) this
// replica's state at the current view's boundary, and applies what was
// kept after that boundary, in order.
func (n *Node) take(readyOf map[member]bool, state []byte) {
	from := -1
	for i, it := range n.kept {
		if it.view != nil && it.view.ID == n.view.ID {
			from = i
		}
	}
	if from < 0 {
		return // every view of a node without state is kept: a bug
	}
	if state != nil {
		if err := n.rep.Restore(state); err != nil {
			return // as a snapshot that does not decode
		}
		if n.cfg.OnRestore != nil && !bytes.Equal(state, n.cfg.Candidate) {
			n.cfg.OnRestore(n.rep.Applied, n.rep.Ordered)
		}
	}
	n.ready, n.readyOf = true, readyOf
	n.cfg.Candidate, n.announced = nil, nil
	rest := n.kept[from+1:]
	n.kept = nil
	for _, it := range rest {
		if it.view != nil {
			n.install(it.view)
		} else {
			n.apply(it.data)
		}
	}
}

// apply executes a delivered message on a replica with state.
func (n *Node) apply(data []byte) {
	if len(data) == 0 {
		return
	}
	switch data[0] {
	case msgRequest:
		q, err := ParseRequest(data[1:])
		if err != nil {
			return // every replica drops it alike
		}
		res, fresh := n.rep.Apply(q)
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
	case msgSnapshot:
		if len(data) < chunkHeader {
			return
		}
		v, idx, total := binary.BigEndian.Uint32(data[1:]), binary.BigEndian.Uint32(data[5:]), binary.BigEndian.Uint32(data[9:])
		if n.view != nil && v == n.view.ID && idx+1 == total {
			for _, m := range n.view.Members {
				n.readyOf[member{m.ID, m.Incarnation}] = true
			}
		}
	}
}

// OnEvent takes the group's events; only ViewInstalled matters here.
func (n *Node) OnEvent(ev reliable.Event) {
	if ev.Kind != reliable.ViewInstalled || ev.View == nil {
		return
	}
	v := &reliable.ViewInfo{ID: ev.View.ID, Members: slices.Clone(ev.View.Members)}
	if n.view == nil {
		n.self = ev.Member
	}
	if n.ready {
		n.install(v)
		return
	}
	n.view = v
	n.chunks, n.announced, n.decided = nil, map[frame.MemberID]announcement{}, false
	n.kept = append(n.kept, item{view: v})
	msg := binary.BigEndian.AppendUint32([]byte{msgAnnounce}, v.ID)
	var flags byte
	if n.cfg.Candidate != nil {
		flags |= announceHolds
	}
	msg = append(msg, flags)
	msg = binary.BigEndian.AppendUint64(msg, n.candidate.ordered)
	msg = binary.BigEndian.AppendUint64(msg, n.candidate.applied)
	n.outbox = append(n.outbox, msg)
}

// install moves a replica with state to view v: the ready set keeps the
// members that stay, and the lowest of them sends a snapshot if any
// member of v has none.
func (n *Node) install(v *reliable.ViewInfo) {
	n.view = v
	readyOf := map[member]bool{}
	sender, need := frame.MemberID(frame.NoMember), false
	for _, m := range v.Members {
		k := member{m.ID, m.Incarnation}
		if n.readyOf[k] {
			readyOf[k] = true
			sender = min(sender, m.ID)
		} else {
			need = true
		}
	}
	n.readyOf = readyOf
	if need && sender == n.self {
		n.sendSnapshot(readyOf, n.rep.Snapshot())
	}
}

// sendSnapshot sends, as the current view's snapshot, the ready set and
// a replica's state at the view boundary.
func (n *Node) sendSnapshot(readyOf map[member]bool, state []byte) {
	keys := make([]member, 0, len(readyOf))
	for k := range readyOf {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b member) int { return int(a.id) - int(b.id) })
	snap := binary.BigEndian.AppendUint32(nil, uint32(len(keys)))
	for _, k := range keys {
		snap = binary.BigEndian.AppendUint32(snap, uint32(k.id))
		snap = binary.BigEndian.AppendUint32(snap, k.incarnation)
	}
	snap = appendBytes(snap, state)
	size := n.cfg.MaxMessage - chunkHeader
	total := (len(snap) + size - 1) / size
	for i := range total {
		chunk := snap[i*size : min(len(snap), (i+1)*size)]
		msg := []byte{msgSnapshot}
		msg = binary.BigEndian.AppendUint32(msg, n.view.ID)
		msg = binary.BigEndian.AppendUint32(msg, uint32(i))
		msg = binary.BigEndian.AppendUint32(msg, uint32(total))
		n.outbox = append(n.outbox, append(msg, chunk...))
	}
}
