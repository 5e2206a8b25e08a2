package dsm

import (
	"bytes"
	"context"
	"testing"

	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// Deliveries and events that arrive while Join builds the core (the group
// has started, the core does not exist yet) wait for it: the event loop
// hands them out without the group's lock, Join holds the node's until
// the core is installed, and they are applied then, in their order.
// Nothing is copied and nothing is lost (a delivery that did not wait
// would find no core and be dropped, and the counts below would fail).
// The event loop is played by the test: one goroutine delivering in
// order, as the loop does.
func TestJoinDeliveriesWaitForTheCore(t *testing.T) {
	n := &Node{}
	e := &groupEnv{n: n, changedc: make(chan struct{}), kickc: make(chan struct{}, 1)}
	n.env = e

	geo := core.Geometry{Locations: 4, LocationSize: 4}
	upd := func(v byte) []byte {
		b := core.AppendUpdateHeader(nil, core.TypeUpdate, 9, 4)
		return core.AppendRecord(b, 1, 1, []byte{v, v, v, v})
	}
	n.mu.Lock() // Join holds it while it builds the core
	loopDone := make(chan struct{})
	go func() { // the event loop
		defer close(loopDone)
		rx := make([]byte, 0, 256) // its receive buffer, reused
		deliver := func(from frame.MemberID, msg []byte) {
			rx = append(rx[:0], msg...)
			n.deliver(from, rx)
			clear(rx) // the frame's memory is reused for the next one
		}
		deliver(2, core.AppendSegment(nil, 9, geo, true))
		deliver(2, upd(1))
		deliver(3, upd(3))
		deliver(2, upd(2))
		// Its arrival rides on its last update (what member 2 sends
		// after it would be held by WC until this member crosses).
		deliver(2, core.AppendBarrierTrailer(upd(5), 7, 1))
		n.event(reliable.Event{Kind: reliable.MemberLeft, Member: 3})
	}()
	c, err := core.New(coreConfig(1, []frame.MemberID{1, 2, 3}, 1400, Config{}))
	if err != nil {
		t.Fatal(err)
	}
	n.install(c, 1, DefaultOutboxLimit)
	n.mu.Unlock()
	<-loopDone

	s, err := n.JoinSegment(context.Background(), 9, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Location(1); !bytes.Equal(got, []byte{5, 5, 5, 5}) {
		t.Fatalf("location 1 = %v, want the last update's 5s", got)
	}
	c2 := c.Counters()
	if c2.AppliedUpdates != 4 || c2.BadMessages != 0 {
		t.Fatalf("applied %d updates (%d bad), want 4 and 0", c2.AppliedUpdates, c2.BadMessages)
	}
	// Member 2 arrived at its barrier 1 (riding on its update); member 3
	// left, so barrier 7 is passed at once.
	if err := c.EnterBarrier(7); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.BarrierPassed(); !ok || err != nil {
		t.Fatalf("barrier 7: passed %v, %v; waiting for %v", ok, err, c.Waiting())
	}
}
