package core_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// The cost of driving a core through the contract: the receive path of
// one PBP2 receiver (Step of a Data frame, and the Ready and Advance that
// deliver it) called directly on *pbp.Core, through a core.Core interface
// value, and through the Stepper (which adds the repair timing and the
// delivery counters the runtime had before it). The frames are made once:
// a sender's window of Data frames, stepped again and again by fresh
// receivers.

func dispatchMembers() []frame.MemberInfo {
	return []frame.MemberInfo{{ID: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Incarnation: 1}, {ID: 1, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Incarnation: 1}}
}

// dataFrames returns n Data frames of 64-byte messages from member 0.
func dataFrames(tb testing.TB, n int) [][]byte {
	s, err := pbp.New(pbp.Config{Group: 5, Self: 0, Members: dispatchMembers(), Window: n})
	if err != nil {
		tb.Fatal(err)
	}
	s.Tick(1)
	var out [][]byte
	for i := range n {
		if err := s.Propose(1, make([]byte, 64)); err != nil {
			tb.Fatal(i, err)
		}
		for _, f := range s.Ready().Frames {
			out = append(out, append([]byte(nil), f...))
		}
		s.Advance()
	}
	return out
}

func newReceiver(tb testing.TB, window int) *pbp.Core {
	r, err := pbp.New(pbp.Config{Group: 5, Self: 1, Members: dispatchMembers(), Window: window})
	if err != nil {
		tb.Fatal(err)
	}
	r.Tick(1)
	return r
}

func BenchmarkDispatch(b *testing.B) {
	const window = 1 << 15 // pbp.MaxWindow: a fresh receiver only every 32768 frames
	frames := dataFrames(b, window)
	views := make([]frame.View, len(frames))
	for i, f := range frames {
		_, body, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			b.Fatal(err)
		}
		if views[i], err = frame.Parse(body); err != nil {
			b.Fatal(err)
		}
	}
	src, dst := dispatchMembers()[0].MAC, frame.Broadcast
	for _, how := range []string{"direct", "interface", "stepper"} {
		b.Run(how, func(b *testing.B) {
			b.ReportAllocs()
			var r *pbp.Core
			var c core.Core
			var st *core.Stepper
			delivered := 0
			fresh := func() {
				r = newReceiver(b, window)
				c, st = r, core.NewStepper(r, 5, frame.EtherType)
			}
			fresh()
			b.ResetTimer()
			for i := range b.N {
				k := i % window
				if k == 0 && i > 0 {
					b.StopTimer()
					fresh()
					b.StartTimer()
				}
				var err error
				switch how {
				case "direct":
					err = r.Step(2, src, dst, views[k])
					delivered += len(r.Ready().Deliveries)
					r.Advance()
				case "interface":
					err = c.Step(2, src, dst, views[k])
					delivered += len(c.Ready().Deliveries)
					c.Advance()
				case "stepper":
					err = st.StepView(2, src, dst, views[k])
					delivered += len(st.Ready().Deliveries)
					st.Advance()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if delivered != b.N {
				b.Fatalf("delivered %d of %d", delivered, b.N)
			}
		})
	}
}

// TestDispatchSame: the three ways deliver the same messages and leave
// the receiver in the same state.
func TestDispatchSame(t *testing.T) {
	frames := dataFrames(t, 16)
	var got []string
	for _, how := range []string{"direct", "interface", "stepper"} {
		r := newReceiver(t, 16)
		var c core.Core = r
		st := core.NewStepper(r, 5, frame.EtherType)
		n := 0
		for _, f := range frames {
			eth, body, _ := frame.SplitEthernet(f, frame.EtherType)
			v, _ := frame.Parse(body)
			var err error
			switch how {
			case "direct":
				err = r.Step(2, eth.Src(), eth.Dst(), v)
				n += len(r.Ready().Deliveries)
				r.Advance()
			case "interface":
				err = c.Step(2, eth.Src(), eth.Dst(), v)
				n += len(c.Ready().Deliveries)
				c.Advance()
			case "stepper":
				err = st.Step(2, f)
				n += len(st.Ready().Deliveries)
				st.Advance()
			}
			if err != nil && !errors.Is(err, core.ErrHeld) {
				t.Fatal(err)
			}
		}
		got = append(got, fmt.Sprintf("%d delivered, %+v", n, r.MemberStates()[0]))
	}
	if got[0] != got[1] || got[0] != got[2] {
		t.Fatalf("direct, interface and stepper differ:\n%s\n%s\n%s", got[0], got[1], got[2])
	}
}
