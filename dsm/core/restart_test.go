package core

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// Restarted makes a member's id an outsider's on the global channel
// only: a segment channel is a static group that drops a new
// incarnation, so what it still delivers of the id was sent by the old
// process before its restart, and is applied like a gone member's (a
// write of it under relay before the barrier: axiom 2.7). Member 2
// shares segment 5's channel with Self (member 3 did not join it).
func TestRestartedChannelKeepsOldWrites(t *testing.T) {
	g := Geometry{Locations: 4, LocationSize: 8}
	c, err := New(Config{Self: 1, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400, Channels: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Create(5, g)
	if err != nil {
		t.Fatal(err)
	}
	receive := func(ch Channel, from frame.MemberID, msg []byte) {
		t.Helper()
		if err := c.ReceiveOn(ch, from, msg); err != nil {
			t.Fatal(err)
		}
	}
	receive(Global, 2, AppendSegment(nil, 5, g, false))
	if err := c.EnterBarrier(1); err != nil {
		t.Fatal(err)
	}
	receive(Global, 2, AppendBarrier(nil, 1, 1))
	receive(Global, 3, AppendBarrier(nil, 1, 1))
	if ok, err := c.BarrierPassed(); !ok || err != nil {
		t.Fatalf("barrier 1: passed %v, %v", ok, err)
	}
	if opens := c.Opens(); len(opens) != 1 || opens[0].Key != 5 {
		t.Fatalf("opens %v, want segment 5's channel", opens)
	}
	if !c.Restarted(2, true) {
		t.Fatal("Restarted(2) false for a member")
	}
	value := []byte("old run!")
	receive(SegmentChannel(5), 2, AppendRecord(AppendUpdateHeader(nil, TypeUpdate, 5, 8), 1, 1, value))
	receive(Global, 2, AppendRecord(AppendUpdateHeader(nil, TypeUpdate, 5, 8), 2, 1, []byte("new run!")))
	got, err := c.Read(s, 1, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(value) {
		t.Fatalf("location 1 is %q after the old process's write on the channel, want %q", got, value)
	}
	if got, _ := c.Read(s, 2, make([]byte, 8)); string(got) != string(make([]byte, 8)) {
		t.Fatalf("location 2 is %q: the new process's message on the global channel was applied", got)
	}
	if st := c.Counters(); st.Outsiders != 1 || st.BadMessages != 0 {
		t.Fatalf("outsiders' messages %d, bad messages %d; want 1, 0", st.Outsiders, st.BadMessages)
	}
}
