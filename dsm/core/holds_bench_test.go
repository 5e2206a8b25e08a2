package core

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// The cost of Holds on the global channel, which the node asks after
// every message it delivers (dsm.Node.receiveLocked), at P members, for
// a peer WC does not hold (the common case: a peer not ahead) while no
// lock request is out. Numbers in docs/dsm.md ("WC over one group").
func BenchmarkHoldsGlobal(b *testing.B) {
	for _, members := range []int{4, 64} {
		ids := make([]frame.MemberID, members)
		for i := range ids {
			ids[i] = frame.MemberID(i + 1)
		}
		c, err := New(Config{Self: ids[0], Members: ids, MaxMessage: 1400})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("P=%d", members), func(b *testing.B) {
			for b.Loop() {
				if c.Holds(Global, ids[members-1]) {
					b.Fatal("Holds true for a peer that has not arrived")
				}
			}
		})
	}
}
