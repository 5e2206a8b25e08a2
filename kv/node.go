package kv

import (
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
)

const chunkHeader = 1 + 4 + 4 + 4

// NodeConfig configures a Node.
type NodeConfig struct {
	// Machine is the replicated state machine; nil means NewStore().
	Machine StateMachine
	// MaxMessage is the largest group message (the group's MaxMessage):
	// snapshots are sent in chunks of this size.
	MaxMessage int
	// OnApply, when set, is called for every request delivered while
	// this node has state, in the order applied: fresh says whether it
	// was executed now (not a retry answered from the session table).
	OnApply func(q Request, result []byte, fresh bool)
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

// Node is one replica of the ordered mode, as a deterministic state
// machine with no I/O: the host feeds it the group's deliveries and
// events (Deliver, OnEvent, in the order the group hands them out) and
// the clients' requests (Request), and sends what Outbox holds through
// the group (Order Total, Views, Safe).
//
// State transfer: the founders of view 1 start with the empty state.
// Every member tracks, identically, which members of the view have state
// (the ready set); at each view the lowest ready member, if a member
// without state is in the view, sends a snapshot of its state at the
// view boundary (in chunks, through the order). A member without state
// keeps everything delivered since its first view; once the snapshot of
// its current view is complete it restores it and applies what it kept
// after that view's boundary. A snapshot completed in a later view than
// its own counts for nothing; the next view's sender sends another.
type Node struct {
	cfg   NodeConfig
	rep   *Replica
	store *Store // rep's machine, if a Store (local reads)
	self  frame.MemberID

	view    *reliable.ViewInfo
	ready   bool
	readyOf map[member]bool // members of the view with state

	kept   []item   // without state: since the first view
	chunks [][]byte // without state: the snapshot of the current view so far

	waiters map[[2]uint64][]func([]byte)
	outbox  [][]byte
	stopped bool
}

// NewNode returns a replica that has no state until it is in a view.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Machine == nil {
		cfg.Machine = NewStore()
	}
	if cfg.MaxMessage <= chunkHeader {
		return nil, fmt.Errorf("kv: NodeConfig.MaxMessage is %d, want more than %d", cfg.MaxMessage, chunkHeader)
	}
	n := &Node{cfg: cfg, rep: NewReplica(cfg.Machine), readyOf: map[member]bool{}, waiters: map[[2]uint64][]func([]byte){}}
	n.store, _ = cfg.Machine.(*Store)
	return n, nil
}

// Ready reports whether this replica has state and serves requests.
func (n *Node) Ready() bool { return n.ready && !n.stopped }

// Replica is the node's replica (state machine and sessions).
func (n *Node) Replica() *Replica { return n.rep }

// View is the view installed last (nil before the first).
func (n *Node) View() *reliable.ViewInfo { return n.view }

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
	if q.Local && q.Op.Kind == OpGet && n.store != nil {
		v, ok := n.store.Get(q.Op.Key)
		if !ok {
			answer(Result{Status: StatusNotFound})
		} else {
			answer(Result{Status: StatusOK, Value: v})
		}
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
	n.kept = append(n.kept, item{data: slices.Clone(data)})
	if len(data) < chunkHeader || data[0] != msgSnapshot {
		return
	}
	v, idx, total := binary.BigEndian.Uint32(data[1:]), binary.BigEndian.Uint32(data[5:]), binary.BigEndian.Uint32(data[9:])
	if v != n.view.ID || idx != uint32(len(n.chunks)) {
		return
	}
	n.chunks = append(n.chunks, data[chunkHeader:])
	if idx+1 == total {
		n.restore()
	}
}

// restore installs the completed snapshot of the current view and
// applies what was kept after that view's boundary.
func (n *Node) restore() {
	snap := slices.Concat(n.chunks...)
	n.chunks = nil
	from := -1
	for i, it := range n.kept {
		if it.view != nil && it.view.ID == n.view.ID {
			from = i
		}
	}
	rd := &reader{what: "snapshot", b: snap}
	nready := rd.u32("ready members")
	readyOf := map[member]bool{}
	for i := uint32(0); i < nready && rd.err == nil; i++ {
		m := member{id: frame.MemberID(rd.u32(fmt.Sprintf("ready member %d id", i)))}
		m.incarnation = rd.u32(fmt.Sprintf("ready member %d incarnation", i))
		readyOf[m] = true
	}
	state := rd.bytes("replica")
	err := rd.end()
	if err == nil {
		err = n.rep.Restore(state)
	}
	if err != nil || from < 0 {
		// Every member sent and got the same bytes; a snapshot that does
		// not decode is a bug, and this replica stays without state.
		return
	}
	n.ready, n.readyOf = true, readyOf
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
		res, fresh := n.rep.Execute(q.Client, q.Seq, AppendOp(nil, q.Op))
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
		if v.ID == 1 {
			// The founding view: every member starts with the empty state.
			n.ready = true
			for _, m := range v.Members {
				n.readyOf[member{m.ID, m.Incarnation}] = true
			}
		}
	}
	if !n.ready {
		n.view = v
		n.chunks = nil
		n.kept = append(n.kept, item{view: v})
		return
	}
	n.install(v)
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
		n.sendSnapshot()
	}
}

func (n *Node) sendSnapshot() {
	keys := make([]member, 0, len(n.readyOf))
	for k := range n.readyOf {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b member) int { return int(a.id) - int(b.id) })
	snap := binary.BigEndian.AppendUint32(nil, uint32(len(keys)))
	for _, k := range keys {
		snap = binary.BigEndian.AppendUint32(snap, uint32(k.id))
		snap = binary.BigEndian.AppendUint32(snap, k.incarnation)
	}
	snap = appendBytes(snap, n.rep.Snapshot())
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
