package reliable

import (
	"reflect"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// TestAckMatrixColumns builds Stats.Acks from a known matrix: the last
// and the stable point of each live sender's column, how far each live
// member is behind, with a dead member left out as sender and holder and
// an unknown entry left out of its column.
func TestAckMatrixColumns(t *testing.T) {
	// held[m][s]: how far m holds s's stream.
	held := map[frame.MemberID]map[frame.MemberID]uint32{
		0: {0: 10, 1: 7, 3: 4},
		1: {0: 6, 1: 7, 3: 4},
		2: {0: 1, 1: 1, 3: 1}, // dead: neither sender nor holder
		3: {0: 10, 1: 5},      // nothing known of 3's own stream
	}
	fn := func(m, s frame.MemberID) (uint32, bool) {
		n, ok := held[m][s]
		return n, ok
	}
	members := []core.Member{{ID: 0, Self: true, Live: true}, {ID: 1, Live: true}, {ID: 2}, {ID: 3, Live: true}}
	got := ackMatrix(fn, members)
	want := []SenderAcks{
		{Sender: 0, Last: 10, Stable: 6, Holds: []MemberHolds{{0, 10, 0}, {1, 6, 4}, {3, 10, 0}}},
		{Sender: 1, Last: 7, Stable: 5, Holds: []MemberHolds{{0, 7, 0}, {1, 7, 0}, {3, 5, 2}}},
		{Sender: 3, Last: 4, Stable: 4, Holds: []MemberHolds{{0, 4, 0}, {1, 4, 0}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ackMatrix:\n got %+v\nwant %+v", got, want)
	}
	if ackMatrix(nil, members) != nil {
		t.Fatal("a core without a matrix has a column")
	}
}

// TestAckMatrixWraps: sequence numbers compare in serial arithmetic,
// so a stream past 2^32 is not shown as 4 billion frames behind.
func TestAckMatrixWraps(t *testing.T) {
	fn := func(m, s frame.MemberID) (uint32, bool) {
		if m == 0 {
			return 2, true // wrapped
		}
		return 0xfffffffe, true
	}
	got := ackMatrix(fn, []core.Member{{ID: 0, Live: true}, {ID: 1, Live: true}})
	if got[0].Last != 2 || got[0].Stable != 0xfffffffe || got[0].Holds[1].Behind != 4 {
		t.Fatalf("ackMatrix across the wrap: %+v", got[0])
	}
}

// TestHeldByCores: the cores that keep the matrix give it to Stats.
func TestHeldByCores(t *testing.T) {
	ms := []frame.MemberInfo{{ID: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}}, {ID: 1, MAC: [6]byte{2, 0, 0, 0, 0, 2}}}
	c, err := pbp.New(pbp.Config{Group: 1, Self: 0, Members: ms, Window: 8})
	if err != nil {
		t.Fatal(err)
	}
	if heldBy(c) == nil {
		t.Fatal("pbp.Core: no matrix")
	}
	if len(ackMatrix(heldBy(c), c.Members())) != 2 {
		t.Fatalf("pbp.Core's matrix: %+v", ackMatrix(heldBy(c), c.Members()))
	}
}
