package reliable

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestNetnsViewsLent: a group with views over ring links retains the
// frames it delivers in order for a view change (pbp.Config.Retain) in
// the ring, lent (link.Lender), instead of copying them: every member
// sends at once, with loss at two of the four hosts (frames wait in the
// reorder ring, repairs), and every receiver's SHA-256 of each stream is
// its sender's, while every member kept frames on loan.
func TestNetnsViewsLent(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 4})
	for i, l := range lossFor {
		if l.Percent > 0 {
			if err := topo.Hosts[i].SetLoss(netns.In, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	links := openRings(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups := make([]*Group, len(links))
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Go(func() {
			groups[i], errs[i] = Join(ctx, l, Config{Group: 19, Views: true, Size: len(links), RequestID: frame.MemberID(i), Logger: quiet})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: Join: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
	})
	allToAll(t, ctx, groups, 2<<20)
	for i, g := range groups {
		st := g.Stats()
		p := fifo(st)
		t.Logf("host %d: kept %d (lent %d, in the reorder ring %d, reclaimed %d); link lent %d, called back %d, held %d",
			i, p.Kept, p.KeptLent, p.KeptHeld, p.LoansReclaimed, st.Link.Lent, st.Link.LoansCalled, st.Link.LoanHeld)
		if p.KeptLent == 0 || st.Link.Lent < p.KeptLent {
			t.Errorf("host %d: %d frames kept lent, the link lent %d: want frames kept in the ring", i, p.KeptLent, st.Link.Lent)
		}
	}
	closeAll(t, groups)
}
