package dsm_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// Over the live runtime unreliable writes (DSM_WRT_UNREL) go at the
// group's Unreliable level: each update message as one datagram, never
// acknowledged or repaired (pbp.Stats.DatagramsSent counts them). The
// others apply what arrives (3 % loss here: most, not necessarily all);
// reliable writes after a barrier still reach everyone.
func TestJoinUnreliableWritesAreDatagrams(t *testing.T) {
	nodes := joinAll(t, 2, 5, dsm.Config{})
	const n = 200
	got := make([]int, len(nodes))
	runLive(t, nodes, func(nd *dsm.Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var s *dsm.Segment
		var err error
		if nd.Rank() == 0 { // one creator: the other would meet ErrExists
			s, err = nd.CreateSegment(1, n+1, 8)
		} else {
			s, err = nd.JoinSegment(ctx, 1, n+1, 8)
		}
		if err != nil {
			return err
		}
		if err := nd.Barrier(ctx, 1); err != nil {
			return err
		}
		if nd.Rank() == 0 {
			for i := range n {
				if err := s.WriteUnreliable(i, binary.BigEndian.AppendUint64(nil, uint64(i)+1)); err != nil {
					return err
				}
			}
			if err := s.Write(n, binary.BigEndian.AppendUint64(nil, 7)); err != nil {
				return err
			}
		}
		if err := nd.Barrier(ctx, 2); err != nil {
			return err
		}
		// A datagram sent before the barrier's message may still arrive
		// after it (no order with the reliable stream, and 3 % are lost):
		// the reader must have most, not all.
		buf := make([]byte, 8)
		for i := range n {
			v, err := s.Read(i, buf)
			if err != nil {
				return err
			}
			if binary.BigEndian.Uint64(v) == uint64(i)+1 {
				got[nd.Rank()]++
			}
		}
		v, err := s.Read(n, buf)
		if err != nil {
			return err
		}
		if binary.BigEndian.Uint64(v) != 7 {
			t.Errorf("rank %d: the reliable write after the unreliable ones reads %d, want 7", nd.Rank(), binary.BigEndian.Uint64(v))
		}
		return nil
	})
	st := nodes[0].Stats()
	p, ok := st.Group.Protocol.Detail.(pbp.Stats)
	if !ok {
		t.Fatalf("the group's counters are %T, want pbp.Stats", st.Group.Protocol.Detail)
	}
	if st.UnreliableWrites != n || p.DatagramsSent != st.UnreliableUpdates || p.DatagramsSent == 0 {
		t.Errorf("writer: %d unreliable writes in %d update messages, %d datagrams sent; want %d writes, one datagram per message", st.UnreliableWrites, st.UnreliableUpdates, p.DatagramsSent, n)
	}
	r := nodes[1].Stats().Group.Protocol.Detail.(pbp.Stats)
	t.Logf("writer sent %d datagrams for %d writes; reader got %d, dropped %d; %d of %d values arrived", p.DatagramsSent, n, r.DatagramsDelivered, r.DatagramsDropped, got[1], n)
	if got[0] != n || got[1] == 0 || r.DatagramsDelivered == 0 {
		t.Errorf("the writer reads %d of its %d values, the reader %d (datagrams delivered %d)", got[0], n, got[1], r.DatagramsDelivered)
	}
}
