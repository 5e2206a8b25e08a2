package dsm_test

import (
	"context"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
)

// Unreliable writes (DSM_WRT_UNREL) take effect locally at once and may
// or may not reach the others: with dsmsim.Config.UnreliableLoss some are
// lost, without it all arrive; reliable writes are never lost.
func TestUnreliableWrites(t *testing.T) {
	for _, loss := range []float64{0, 0.5} {
		var seen [2][2]int // [rank 1's view of] unreliable, reliable locations set by rank 0
		res, err := dsmsim.Run(dsmsim.Config{Members: 2, Seed: 3, In: lossy, UnreliableLoss: loss}, func(n *dsm.Node) error {
			s, err := attach(n, 1, 400, 8)
			if err != nil {
				return err
			}
			if n.Rank() == 0 {
				for i := range 100 {
					v := writeValue(0, i+1, 8)
					if err := s.WriteUnreliable(i, v); err != nil {
						return err
					}
					if got := s.Location(i); string(got) != string(v) {
						t.Errorf("unreliable write %d not visible locally", i)
					}
					if err := s.Write(200+i, v); err != nil {
						return err
					}
				}
				if _, err := s.WriteBulkUnreliable(100, make([]byte, 8*50)); err != nil {
					return err
				}
			}
			if err := n.Barrier(context.Background(), 1); err != nil {
				return err
			}
			if n.Rank() == 1 {
				for i := range 100 {
					if s.Location(i)[5] != 0 {
						seen[1][0]++
					}
					if s.Location(200 + i)[5] != 0 {
						seen[1][1]++
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen[1][1] != 100 {
			t.Errorf("loss %v: %d of 100 reliable writes arrived", loss, seen[1][1])
		}
		if loss == 0 && seen[1][0] != 100 || loss > 0 && (seen[1][0] < 20 || seen[1][0] > 80) {
			t.Errorf("loss %v: %d of 100 unreliable writes arrived", loss, seen[1][0])
		}
		if st := res.Stats[0]; st.UnreliableWrites != 150 || st.UnreliableUpdates != 101 || st.Writes != 100 {
			t.Errorf("loss %v: stats %+v", loss, st)
		}
	}
}
