package reliable

import (
	"context"
	"testing"
	"time"
)

// TestNetnsViewsLent: a group with views over ring links retains the
// frames it delivers in order for a view change (pbp.Config.Retain) in
// the ring, lent (link.Lender), instead of copying them: every member
// sends at once, with loss at two of the four hosts (frames wait in the
// reorder ring, repairs), and every receiver's SHA-256 of each stream is
// its sender's, while every member kept frames on loan.
func TestNetnsViewsLent(t *testing.T) {
	topo, links := lossyRings(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups := joinAll(t, ctx, topo, links, Config{Group: 19, Views: true}, false)
	allToAll(t, ctx, groups, 2<<20)
	for i, g := range groups {
		// A turn hands out its deliveries before it lends the link what
		// its core took, so a receiver that has just seen its last
		// message can read the core's count a turn ahead of the link's:
		// give the turn a moment to end.
		st := g.Stats()
		for deadline := time.Now().Add(time.Second); st.Link.Lent < fifo(st).KeptLent && time.Now().Before(deadline); st = g.Stats() {
			time.Sleep(time.Millisecond)
		}
		p := fifo(st)
		t.Logf("host %d: kept %d (lent %d, in the reorder ring %d, reclaimed %d); link lent %d, called back %d, held %d",
			i, p.Kept, p.KeptLent, p.KeptHeld, p.LoansReclaimed, st.Link.Lent, st.Link.LoansCalled, st.Link.LoanHeld)
		if p.KeptLent == 0 || st.Link.Lent < p.KeptLent {
			t.Errorf("host %d: %d frames kept lent, the link lent %d: want frames kept in the ring", i, p.KeptLent, st.Link.Lent)
		}
	}
	closeAll(t, groups)
}
