package orca

import (
	"context"

	"github.com/rbcast/rbcast/frame"
)

// BreakReplica makes n's replica a deliberately broken one: hook takes
// every message the order delivers and hands on (with deliver) what the
// broken replica applies, in the order it applies it. A hook that keeps a
// message for later must copy it.
func BreakReplica(n *Node, hook func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte))) {
	n.testDeliver = hook
}

// SendRaw sends msg through n's total order as it is, not as a write: for
// the latency benchmark, which measures the order's self-delivery on the
// same group as the writes (a hook set with BreakReplica takes it).
func SendRaw(ctx context.Context, n *Node, msg []byte) error { return n.env.Send(ctx, msg) }

// StopGroup closes the group under n (a live node: Join) as if it had
// stopped by itself, without Node.Close.
func StopGroup(n *Node) error { return n.env.(*groupEnv).g.Close() }
