package dsmsim_test

import (
	"context"
	"fmt"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/testnet"
)

// Four members on a simulated segment that loses 5% of the frames: each
// writes its rank's square into its own location of a shared segment, and
// a barrier makes every write visible everywhere.
func ExampleRun() {
	ctx := context.Background()
	res, err := dsmsim.Run(dsmsim.Config{Members: 4, Seed: 1, In: testnet.Impairment{Loss: 0.05}}, func(n *dsm.Node) error {
		var s *dsm.Segment
		var err error
		if n.Rank() == 0 {
			s, err = n.CreateSegment(1, n.Size(), 8) // one float64 per rank
		} else {
			s, err = n.JoinSegment(ctx, 1, n.Size(), 8)
		}
		if err != nil {
			return err
		}
		if err := s.WriteFloat64(n.Rank(), float64(n.Rank()*n.Rank())); err != nil {
			return err
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if n.Rank() == 0 {
			fmt.Println("rank 0 sees", s.Float64s())
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("members:", len(res.Stats), "barrier messages sent by rank 0:", res.Stats[0].Barriers)
	// Output:
	// rank 0 sees [0 1 4 9]
	// members: 4 barrier messages sent by rank 0: 1
}
