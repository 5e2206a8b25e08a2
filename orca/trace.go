package orca

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// TraceKind says what a TraceEvent records.
type TraceKind uint8

const (
	// TraceNew: the replica of Object was made here (New); Initial is its
	// state, encoded with the class's state codec.
	TraceNew TraceKind = iota + 1
	// TraceCall: an operation called here returned to its caller: Args,
	// Result (Err for a write that failed); Req is a write's request
	// number. Calls of one goroutine come in its program order.
	TraceCall
	// TraceApply: this replica applied a write of member Origin (request
	// Req) at Pos, leaving the object at Writes writes with state digest
	// Digest.
	TraceApply
	// TraceBad: a message from Origin was dropped as malformed (Err says
	// why).
	TraceBad
	// TraceRestore: this replica restored a snapshot taken after Pos's
	// Delivery messages (a member that joined: Config.Views); it applies
	// the writes after it.
	TraceRestore
)

func (k TraceKind) String() string {
	switch k {
	case TraceNew:
		return "new"
	case TraceCall:
		return "call"
	case TraceApply:
		return "apply"
	case TraceBad:
		return "bad"
	case TraceRestore:
		return "restore"
	}
	return fmt.Sprintf("TraceKind(%d)", uint8(k))
}

// TraceEvent is one event of a member's history (Config.Trace).
type TraceEvent struct {
	Kind   TraceKind
	Member frame.MemberID // the member the event happened at
	Object string
	Op     string
	Write  bool
	Origin frame.MemberID
	Req    uint32
	Args   any
	Result any
	Err    error
	// TraceApply.
	Pos    Pos
	Writes uint64
	Digest uint64
	// TraceNew.
	Initial []byte

	// What the consistency checker replays with (TraceNew).
	class *classInfo
}

func (e TraceEvent) String() string {
	switch e.Kind {
	case TraceNew:
		return fmt.Sprintf("member %d: new %q (%s)", e.Member, e.Object, e.class.name)
	case TraceCall:
		kind := "read"
		if e.Write {
			kind = fmt.Sprintf("write #%d", e.Req)
		}
		s := fmt.Sprintf("member %d: %s %q.%s(%v) = %v", e.Member, kind, e.Object, e.Op, e.Args, e.Result)
		if e.Err != nil {
			s += fmt.Sprintf(" (%v)", e.Err)
		}
		return s
	case TraceApply:
		return fmt.Sprintf("member %d: at %v apply member %d's write #%d %q.%s(%v) = %v (writes %d, digest %016x)",
			e.Member, e.Pos, e.Origin, e.Req, e.Object, e.Op, e.Args, e.Result, e.Writes, e.Digest)
	case TraceBad:
		return fmt.Sprintf("member %d: %v", e.Member, e.Err)
	case TraceRestore:
		return fmt.Sprintf("member %d: restored the state after message %d", e.Member, e.Pos.Delivery)
	}
	return e.Kind.String()
}

// traceNew records the making of o (n.mu held).
func (n *Node) traceNew(o *object) {
	ev := TraceEvent{Kind: TraceNew, Member: n.self, Object: o.name, class: o.class}
	b, err := o.class.appendState(nil, o.state)
	if err != nil {
		ev.Err = fmt.Errorf("orca: encoding the initial state of %q: %w", o.name, err)
	}
	ev.Initial = b
	n.trace(ev)
}
