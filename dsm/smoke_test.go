package dsm_test

import (
	"context"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/testnet"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	res, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, In: testnet.Impairment{Loss: 0.05, Reorder: 0.05, ReorderDelay: 200 * time.Microsecond}}, func(n *dsm.Node) error {
		var s *dsm.Segment
		var err error
		if n.Rank() == 0 {
			s, err = n.CreateSegment(7, 30, 8)
		} else {
			s, err = n.JoinSegment(ctx, 7, 30, 8)
		}
		if err != nil {
			return err
		}
		for i := range 10 {
			if err := s.WriteFloat64(n.Rank()*10+i, float64(n.Rank()*100+i)); err != nil {
				return err
			}
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		f := s.Float64s()
		for r := range 3 {
			for i := range 10 {
				if f[r*10+i] != float64(r*100+i) {
					t.Errorf("rank %d: loc %d = %v", n.Rank(), r*10+i, f[r*10+i])
				}
			}
		}
		if err := n.Lock(ctx, 3); err != nil {
			return err
		}
		v, _ := s.ReadFloat64(0)
		s.WriteFloat64(0, v+1)
		if err := n.Unlock(3); err != nil {
			return err
		}
		if err := n.Barrier(ctx, 2); err != nil {
			return err
		}
		if v, _ := s.ReadFloat64(0); v != 3 {
			t.Errorf("rank %d: counter %v, want 3", n.Rank(), v)
		}
		return nil
	})
	t.Logf("%v %+v", res.Elapsed, res.Stats[0])
	if err != nil {
		t.Fatal(err)
	}
}
