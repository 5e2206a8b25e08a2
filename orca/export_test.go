package orca

import "github.com/rbcast/rbcast/frame"

// BreakReplica makes n's replica a deliberately broken one: hook takes
// every message the order delivers and hands on (with deliver) what the
// broken replica applies, in the order it applies it. A hook that keeps a
// message for later must copy it.
func BreakReplica(n *Node, hook func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte))) {
	n.testDeliver = hook
}
