package dsm_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
)

// chanReaders: members that join a segment of chanSegs read-only (23 has
// every member, so no channel: its reader reads it on the global one).
var chanReaders = map[uint32][]int{21: {1}, 22: {2}, 23: {3}}

// Read-only joins with channels at 5 % loss: theorem 2.2 (every read
// equals the sequential program's, a reader's lanes staying zero) and
// axioms 2.2, 2.3, 2.6 and 2.7 hold although a reader puts no marker on
// the channel and nobody waits for one from it: it sends markers only on
// the channels it writes.
func TestChannelsReadOnly(t *testing.T) {
	const rounds = 4
	for seed := range uint64(axiomSeeds) {
		h := newHistory(4)
		res, err := dsmsim.Run(dsmsim.Config{Members: 4, Seed: seed, In: lossy, Node: dsm.Config{Channels: true}, Trace: h.record},
			chanProgramReaders(chanSegs, chanReaders, rounds))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := checkChannelAxioms(h, chanSegs); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for r, st := range res.Stats {
			var writes int // channels this member writes: a marker per barrier
			for key, ranks := range chanSegs {
				if wantChannel(ranks, r, 4, false) && !slices.Contains(chanReaders[key], r) {
					writes++
				}
			}
			if want := uint64(writes * 2 * rounds); st.Markers != want {
				t.Fatalf("seed %d: rank %d sent %d markers, want %d (none on a channel it joined read-only)", seed, r, st.Markers, want)
			}
			if st.BadMessages != 0 {
				t.Fatalf("seed %d: rank %d: %d bad messages", seed, r, st.BadMessages)
			}
		}
	}
}

// A read-only member's writes are refused, and so is joining again
// read-write.
func TestReadOnlyWriteRefused(t *testing.T) {
	_, err := dsmsim.Run(dsmsim.Config{Members: 2, Seed: 1, Node: dsm.Config{Channels: true}}, func(n *dsm.Node) error {
		ctx := context.Background()
		var s *dsm.Segment
		var err error
		if n.Rank() == 0 {
			s, err = n.CreateSegment(7, 4, 8)
		} else {
			s, err = n.JoinSegmentReadOnly(ctx, 7, 4, 8)
		}
		if err != nil {
			return err
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if n.Rank() == 1 {
			if err := s.WriteFloat64(0, 1); !errors.Is(err, dsm.ErrReadOnly) || err.Error() != "dsm: segment joined read-only: segment 7" {
				return errors.New("write to a read-only segment: " + errString(err))
			}
			if _, err := n.JoinSegment(ctx, 7, 4, 8); !errors.Is(err, dsm.ErrReadOnly) || err.Error() != "dsm: segment joined read-only: segment 7: joined read-write after a read-only join" {
				return errors.New("read-write join after a read-only one: " + errString(err))
			}
		} else if err := s.WriteFloat64(0, 2); err != nil {
			return err
		}
		if err := n.Barrier(ctx, 2); err != nil {
			return err
		}
		if v, err := s.ReadFloat64(0); err != nil || v != 2 {
			return errors.New("read after barrier 2: " + errString(err))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
