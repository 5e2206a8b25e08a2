package reliable

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet"
)

// stepCount is a Driver bound to its endpoint through a counter of its
// Steps.
type stepCount struct {
	d *Driver
	n int
}

func (s *stepCount) Step(now time.Time) time.Time {
	s.n++
	return s.d.Step(now)
}

// Member 3 holds members 1 and 2 while member 1 sends k messages and
// member 2 "go"; it releases member 2, and at the delivery of its "go"
// releases member 1 and (leave) leaves, in that one callback. What the release freed is delivered in the same
// Step, before the Leave: every member delivers member 1's k messages,
// byte for byte, and members 1 and 2 see member 3 leave, with nothing
// retransmitted and nobody failed or stalled. (Before, Leave ran before
// the Tick that would have delivered the release's frames and a left
// core delivers nothing: member 3 delivered none of them and its Leave
// acknowledged none; and a ReleaseFrom alone from Deliver was delivered
// a Step later.)
func TestDriverReleaseThenLeave(t *testing.T) {
	for _, leave := range []bool{false, true} {
		t.Run(fmt.Sprintf("leave=%v", leave), func(t *testing.T) {
			net, err := testnet.New(3, testnet.Config{})
			if err != nil {
				t.Fatal(err)
			}
			const n, k = 3, 4
			var eps []*testnet.Endpoint
			var members []frame.MemberInfo
			for i := range n {
				ep, err := net.Attach(testnet.EndpointConfig{})
				if err != nil {
					t.Fatal(err)
				}
				eps = append(eps, ep)
				members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
			}
			drivers := make([]*Driver, n)
			steps := make([]*stepCount, n)
			got := make([]map[frame.MemberID][][]byte, n)
			events := make([][]Event, n)
			releasedAt, deliveredAt := -1, -1
			for i, ep := range eps {
				got[i] = map[frame.MemberID][][]byte{}
				d, err := NewDriver(ep, Config{Group: 1, Members: members, Self: frame.MemberID(i + 1), Logger: quiet,
					OnEvent: func(ev Event) { events[i] = append(events[i], ev) },
					Deliver: func(from frame.MemberID, data []byte) {
						got[i][from] = append(got[i][from], bytes.Clone(data))
						if i != 2 {
							return
						}
						switch {
						case from == 2 && string(data) == "go":
							releasedAt = steps[2].n
							drivers[2].ReleaseFrom(1)
							if leave {
								if err := drivers[2].Leave(net.Now()); err != nil {
									t.Errorf("Leave from Deliver: %v", err)
								}
							}
						case from == 1 && len(got[i][1]) == k:
							deliveredAt = steps[2].n
						}
					},
				}, net.Now())
				if err != nil {
					t.Fatal(err)
				}
				drivers[i] = d
				steps[i] = &stepCount{d: d}
				ep.Bind(steps[i])
			}
			net.RunFor(time.Millisecond)
			if !drivers[2].HoldFrom(net.Now(), 1) || !drivers[2].HoldFrom(net.Now(), 2) {
				t.Fatal("HoldFrom refused")
			}
			var sent [][]byte
			for m := range k {
				msg := message(nil, 1, m, drivers[0].MaxMessage())
				sent = append(sent, msg)
				if err := drivers[0].Propose(net.Now(), msg); err != nil {
					t.Fatal(err)
				}
			}
			if err := drivers[1].Propose(net.Now(), []byte("go")); err != nil {
				t.Fatal(err)
			}
			net.RunFor(5 * time.Millisecond)
			if len(got[1][1]) != k || len(got[2][1]) != 0 || len(got[2][2]) != 0 {
				t.Fatalf("before the release: member 2 got %d of member 1's messages, member 3 %d and %d of member 2's; want %d, 0 and 0 (held)",
					len(got[1][1]), len(got[2][1]), len(got[2][2]), k)
			}
			// Released outside a turn, member 2's "go" is delivered by
			// the next Step's Tick, in a turn that received nothing: the
			// Step takes another only when the callback asks for it. A
			// new Bind wakes the member now, as Group.ReleaseFrom wakes
			// its loop.
			drivers[2].ReleaseFrom(2)
			eps[2].Bind(steps[2])
			net.RunFor(100 * time.Millisecond)
			for i := range n {
				if i != 0 && !slices.EqualFunc(got[i][1], sent, bytes.Equal) {
					t.Errorf("member %d delivered %d of member 1's messages, want the %d sent, byte for byte", i+1, len(got[i][1]), k)
				}
			}
			if releasedAt < 0 || deliveredAt != releasedAt {
				t.Errorf("released at Step %d, delivered at Step %d: want the Step of the release", releasedAt, deliveredAt)
			}
			if s := drivers[0].Stats().Protocol; s.Retransmitted != 0 {
				t.Errorf("member 1 retransmitted %d frames, want none", s.Retransmitted)
			}
			for i := range 2 {
				var left bool
				for _, ev := range events[i] {
					if ev.Kind == MemberFailed || ev.Kind == MemberStalled {
						t.Errorf("member %d: %v", i+1, ev)
					}
					left = left || ev.Kind == MemberLeft && ev.Member == 3
				}
				if left != leave {
					t.Errorf("member %d saw member 3 leave: %v, want %v (events %v)", i+1, left, leave, events[i])
				}
			}
		})
	}
}
