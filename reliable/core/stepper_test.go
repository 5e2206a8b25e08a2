package core

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// fake is a core that records what it is stepped with and hands out what
// the test puts in its Ready.
type fake struct {
	stepped   []frame.Type
	repairing map[frame.MemberID]bool
	ready     Ready
	advanced  int
	inFlight  int
	// steppedAtLeave is len(stepped) when Leave was called (left).
	steppedAtLeave int
	left           bool
}

func (f *fake) Step(now Time, src, dst [6]byte, v frame.View) error {
	f.stepped = append(f.stepped, v.Type())
	if v.Type() == frame.Leave {
		return errors.New("refused")
	}
	return nil
}
func (f *fake) Tick(Time)                  {}
func (f *fake) Propose(Time, []byte) error { return nil }
func (f *fake) Leave(Time)                 { f.steppedAtLeave, f.left = len(f.stepped), true }
func (f *fake) Ready() Ready               { return f.ready }
func (f *fake) Advance()                   { f.advanced++; f.ready = Ready{} }
func (f *fake) Deadline() Time             { return 0 }
func (f *fake) Blocked() bool              { return false }
func (f *fake) Done() bool                 { return false }
func (f *fake) Stats() Stats               { return Stats{InFlight: f.inFlight} }
func (f *fake) Info() Info {
	return Info{Self: 1, Delivers: func(t frame.Type) bool { return t == frame.Data }}
}
func (f *fake) Members() []Member                                 { return []Member{{ID: 1, Self: true}, {ID: 2}, {ID: 4}} }
func (f *fake) Repair(from frame.MemberID) (frame.MemberID, bool) { return from, f.repairing[from] }

func ethFrame(t *testing.T, group uint32, sender frame.MemberID, body frame.Body) []byte {
	t.Helper()
	h := frame.Header{Group: group, Sender: sender, Incarnation: 1, AckBase: 1, Acks: make([]uint32, 4)}
	b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, byte(sender)}, frame.EtherType)
	b, err := frame.Append(b, &h, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStepperCountsBadFrames(t *testing.T) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	good := ethFrame(t, 7, 2, &frame.Empty{T: frame.Ack})
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 0xff
	other := ethFrame(t, 8, 2, &frame.Empty{T: frame.Ack})
	notOurs := append([]byte(nil), good...)
	notOurs[12], notOurs[13] = 0x08, 0x00 // IPv4
	for _, tc := range []struct {
		name string
		eth  []byte
		want error
	}{
		{"good", good, nil},
		{"corrupt", corrupt, frame.ErrChecksum},
		{"another group", other, frame.ErrGroup},
		{"another EtherType", notOurs, frame.ErrEthernet},
		{"truncated", good[:10], frame.ErrEthernet},
	} {
		if err := s.Step(1, tc.eth); !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
			t.Errorf("%s: Step = %v, want %v", tc.name, err, tc.want)
		}
	}
	c := s.Counters()
	if c.Bad.Checksum != 1 || c.Bad.Group != 1 || c.Bad.NotRbcast != 2 || c.Bad.Total() != 4 {
		t.Errorf("bad frames %+v, want 1 checksum, 1 group, 2 not rbcast", c.Bad)
	}
	if len(f.stepped) != 1 {
		t.Errorf("the core was stepped with %v, want only the good frame", f.stepped)
	}
}

// TestStepperStepVerified: a frame whose tag verified is decoded without
// its CRC, and with every other check; Step still drops a bad CRC.
func TestStepperStepVerified(t *testing.T) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	good := ethFrame(t, 7, 2, &frame.Empty{T: frame.Ack})
	badCRC := append([]byte(nil), good...)
	badCRC[len(badCRC)-1] ^= 0xff
	other := ethFrame(t, 8, 2, &frame.Empty{T: frame.Ack})
	badType := append([]byte(nil), good...)
	badType[frame.EthernetHeaderLen+1] = 0x7f
	for _, tc := range []struct {
		name string
		eth  []byte
		want error
	}{
		{"good", good, nil},
		{"bad CRC", badCRC, nil},
		{"another group", other, frame.ErrGroup},
		{"unknown type", badType, frame.ErrType},
		{"truncated", good[:10], frame.ErrEthernet},
	} {
		if err := s.StepVerified(1, tc.eth); !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
			t.Errorf("%s: StepVerified = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := s.Step(1, badCRC); !errors.Is(err, frame.ErrChecksum) {
		t.Errorf("Step of the bad CRC = %v, want %v", err, frame.ErrChecksum)
	}
	c := s.Counters()
	if c.Bad.Checksum != 1 || c.Bad.Group != 1 || c.Bad.NotRbcast != 1 || c.Bad.Total() != 4 {
		t.Errorf("bad frames %+v, want 1 checksum (Step's), 1 group, 1 type, 1 not rbcast", c.Bad)
	}
	if !slices.Equal(f.stepped, []frame.Type{frame.Ack, frame.Ack}) {
		t.Errorf("the core was stepped with %v, want the good frame and the bad CRC's", f.stepped)
	}
}

func TestStepperHold(t *testing.T) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	s.Hold = true
	if err := s.Step(1, ethFrame(t, 7, 2, &frame.Payload{T: frame.Data, Data: []byte("x")})); !errors.Is(err, ErrHeld) {
		t.Fatalf("a Data frame under Hold: %v, want ErrHeld", err)
	}
	if err := s.Step(1, ethFrame(t, 7, 2, &frame.Empty{T: frame.Ack})); err != nil {
		t.Fatalf("an Ack under Hold: %v, want it stepped", err)
	}
	if c := s.Counters(); c.Held != 1 || len(f.stepped) != 1 || f.stepped[0] != frame.Ack {
		t.Fatalf("held %d, stepped %v; want 1 held and the Ack stepped", c.Held, f.stepped)
	}
	if err := s.Step(1, ethFrame(t, 7, 2, &frame.Empty{T: frame.Leave})); err == nil || err.Error() != "refused" {
		t.Fatalf("the core's refusal came back as %v", err)
	}
}

func TestStepperTimesRepairs(t *testing.T) {
	f := &fake{repairing: map[frame.MemberID]bool{}}
	s := NewStepper(f, 7, 0)
	ack := func(from frame.MemberID) []byte { return ethFrame(t, 7, from, &frame.Empty{T: frame.Ack}) }
	f.repairing[2] = true
	s.Step(100, ack(2)) // a gap appears
	s.Step(150, ack(4)) // another stream: no change to 2's repair
	f.repairing[2] = false
	s.Step(400, ack(2)) // filled, 300 ns later
	f.repairing[4] = true
	s.Step(500, ack(4))
	f.ready = Ready{Events: []Event{{Kind: MemberFailed, Member: 4}}} // 4's repair ends unfinished
	s.Ready()
	s.Advance()
	f.repairing[4] = false
	s.Step(900, ack(4))
	c := s.Counters()
	if len(c.Peers) != 3 {
		t.Fatalf("peers %+v, want members 1, 2 and 4", c.Peers)
	}
	if p := c.Peers[1]; p.ID != 2 || p.Repairs != 1 || p.RepairP50 != 300 || p.RepairP99 != 300 {
		t.Errorf("member 2: %+v, want one repair of 300 ns", p)
	}
	if p := c.Peers[2]; p.ID != 4 || p.Repairs != 0 {
		t.Errorf("member 4: %+v, want no repair counted (removed while repairing)", p)
	}
	if c.RepairP50 != 300 {
		t.Errorf("all members' repair p50 %v, want 300", c.RepairP50)
	}
}

func TestStepperReadyCountsOnce(t *testing.T) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	f.ready = Ready{Deliveries: []Delivery{{From: 2, Data: []byte("abc")}, {From: 2, Data: []byte("de")}, {From: 4, Data: []byte("f")}},
		Events: []Event{{Kind: SelfRemoved, Member: 1, Reason: "cut off"}}}
	s.Ready()
	s.Ready() // again before Advance: the same output, not counted twice
	s.Advance()
	if f.advanced != 1 {
		t.Fatalf("Advance reached the core %d times", f.advanced)
	}
	if s.DeliveredFrom(2) != 2 || s.DeliveredFrom(4) != 1 || s.DeliveredFrom(9) != 0 {
		t.Errorf("delivered from 2, 4, 9: %d, %d, %d; want 2, 1, 0", s.DeliveredFrom(2), s.DeliveredFrom(4), s.DeliveredFrom(9))
	}
	if c := s.Counters(); c.Peers[1].DeliveredBytes != 5 {
		t.Errorf("bytes from 2: %d, want 5", c.Peers[1].DeliveredBytes)
	}
	if evs := s.Events(); len(evs) != 1 {
		t.Errorf("events %v, want the one", evs)
	}
	if ev, ok := s.Removed(); !ok || ev.Reason != "cut off" {
		t.Errorf("Removed() = %v, %v", ev, ok)
	}
}

func TestPercentiles(t *testing.T) {
	var d []Duration
	for i := 100; i >= 1; i-- {
		d = append(d, Duration(i))
	}
	if p50, p99 := Percentiles(d); p50 != 50 || p99 != 99 {
		t.Errorf("p50, p99 of 1..100 = %v, %v", p50, p99)
	}
	if p50, p99 := Percentiles(nil); p50 != 0 || p99 != 0 {
		t.Errorf("of nothing: %v, %v", p50, p99)
	}
}

func TestEventKindRemoval(t *testing.T) {
	for k := MemberFailed; k <= JoinRefused; k++ {
		want := k == MemberFailed || k == MemberStalled || k == MemberLeft || k == SelfLeft || k == SelfRemoved
		if k.Removal() != want {
			t.Errorf("%v.Removal() = %v", k, k.Removal())
		}
	}
}

func TestStepperHoldFrom(t *testing.T) {
	f := &fake{inFlight: 1}
	s := NewStepper(f, 7, 0)
	data := func(from frame.MemberID) []byte {
		return ethFrame(t, 7, from, &frame.Payload{T: frame.Data, Data: []byte("x")})
	}
	if !s.HoldFrom(2, 100) {
		t.Fatal("HoldFrom(2) refused by a FIFO core")
	}
	if err := s.Step(10, data(2)); !errors.Is(err, ErrHeld) {
		t.Fatalf("a Data frame of the held sender: %v, want ErrHeld", err)
	}
	if err := s.Step(10, data(4)); err != nil {
		t.Fatalf("a Data frame of another sender: %v, want it stepped", err)
	}
	if err := s.Step(10, ethFrame(t, 7, 2, &frame.Empty{T: frame.Ack})); err != nil {
		t.Fatalf("an Ack of the held sender with frames in flight: %v, want it stepped", err)
	}
	// A second HoldFrom does not move the bound.
	s.HoldFrom(2, 1000)
	if err := s.Step(100, data(2)); err != nil {
		t.Fatalf("a Data frame of the held sender at the hold's bound: %v, want it stepped", err)
	}
	s.ReleaseFrom(2)
	s.HoldFrom(2, 1000)
	if err := s.Step(200, data(2)); !errors.Is(err, ErrHeld) {
		t.Fatalf("held again after ReleaseFrom: %v, want ErrHeld", err)
	}
	s.ReleaseFrom(2)
	if err := s.Step(300, data(2)); err != nil {
		t.Fatalf("after ReleaseFrom: %v, want it stepped", err)
	}
	want := []frame.Type{frame.Data, frame.Ack, frame.Data, frame.Data}
	if c := s.Counters(); c.Held != 2 || !slices.Equal(f.stepped, want) {
		t.Fatalf("held %d, stepped %v; want 2 held and %v stepped", c.Held, f.stepped, want)
	}
}

// With nothing in flight, the held sender's last frame that delivers
// nothing is kept, and stepped at the Tick after ReleaseFrom.
func TestStepperHoldFromKeepsLastQuietFrame(t *testing.T) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	s.HoldFrom(2, 1000)
	ack := ethFrame(t, 7, 2, &frame.Empty{T: frame.Ack})
	hb := ethFrame(t, 7, 2, &frame.Empty{T: frame.Heartbeat})
	for _, eth := range [][]byte{ack, hb} {
		if err := s.Step(10, eth); !errors.Is(err, ErrHeld) {
			t.Fatalf("a control frame of the held sender with nothing in flight: %v, want ErrHeld", err)
		}
	}
	if len(f.stepped) != 0 {
		t.Fatalf("stepped %v while held", f.stepped)
	}
	s.Tick(20)
	if len(f.stepped) != 0 {
		t.Fatalf("stepped %v at a Tick before ReleaseFrom", f.stepped)
	}
	s.ReleaseFrom(2)
	if d := s.Deadline(); d != 20 {
		t.Fatalf("Deadline after ReleaseFrom = %d, want 20 (now): a kept frame waits for Tick", d)
	}
	s.Tick(30)
	if !slices.Equal(f.stepped, []frame.Type{frame.Heartbeat}) {
		t.Fatalf("stepped %v after ReleaseFrom, want only the last kept frame (Heartbeat)", f.stepped)
	}
	if d := s.Deadline(); d != 0 {
		t.Fatalf("Deadline once replayed = %d, want the core's (0)", d)
	}
}

// A Leave right after ReleaseFrom steps the frame kept for the released
// sender first, as the Tick it comes before would have: the core takes
// no input once it left. (Before, the Leave went first.)
func TestStepperLeaveStepsReleased(t *testing.T) {
	f := &fake{}
	s := NewStepper(f, 7, 0)
	s.HoldFrom(2, 1000)
	if err := s.Step(10, ethFrame(t, 7, 2, &frame.Empty{T: frame.Heartbeat})); !errors.Is(err, ErrHeld) {
		t.Fatalf("a Heartbeat of the held sender with nothing in flight: %v, want ErrHeld", err)
	}
	s.ReleaseFrom(2)
	s.Leave(20)
	if !f.left || f.steppedAtLeave != 1 || !slices.Equal(f.stepped, []frame.Type{frame.Heartbeat}) {
		t.Fatalf("left %v with %d frames stepped before it, stepped %v; want the kept Heartbeat stepped before the Leave", f.left, f.steppedAtLeave, f.stepped)
	}
	if d := s.Deadline(); d != 0 {
		t.Fatalf("Deadline after the Leave = %d, want the core's (0): nothing left to replay", d)
	}
}

func TestStepperHoldFromRefusedUnderTotalOrder(t *testing.T) {
	s := NewStepper(&totalFake{}, 7, 0)
	if s.HoldFrom(2, 100) {
		t.Fatal("HoldFrom accepted by a total-order core: one held frame would stop every later message")
	}
}

// totalFake is fake under total order (Info.SelfDelivery).
type totalFake struct{ fake }

func (f *totalFake) Info() Info {
	i := f.fake.Info()
	i.SelfDelivery = true
	return i
}

// holderFake is fake with the hold inside the core (Holder).
type holderFake struct {
	fake
	calls []string
}

func (f *holderFake) HoldFrom(from frame.MemberID, until Time) bool {
	f.calls = append(f.calls, fmt.Sprintf("hold %d until %d", from, until))
	return from != 4
}

func (f *holderFake) ReleaseFrom(from frame.MemberID) {
	f.calls = append(f.calls, fmt.Sprintf("release %d", from))
}

// A core that holds itself (Holder) gets every frame of the held
// sender, counted in Held while the hold lasts; the stepper keeps none.
func TestStepperHoldFromInCore(t *testing.T) {
	f := &holderFake{}
	s := NewStepper(f, 7, 0)
	data := ethFrame(t, 7, 2, &frame.Payload{T: frame.Data, Data: []byte("x")})
	ack := ethFrame(t, 7, 2, &frame.Empty{T: frame.Ack})
	if !s.HoldFrom(2, 100) {
		t.Fatal("HoldFrom(2) refused")
	}
	if s.HoldFrom(4, 100) {
		t.Fatal("HoldFrom(4) accepted although the core refused it")
	}
	s.HoldFrom(2, 1000) // left as it is: the core is not asked again
	for _, eth := range [][]byte{data, ack, data} {
		if err := s.Step(10, eth); err != nil {
			t.Fatalf("a frame of a sender the core holds: %v, want it stepped", err)
		}
	}
	if err := s.Step(100, data); err != nil { // past the bound: not counted
		t.Fatal(err)
	}
	s.ReleaseFrom(2)
	s.Tick(110)
	want := []frame.Type{frame.Data, frame.Ack, frame.Data, frame.Data}
	if c := s.Counters(); c.Held != 2 || !slices.Equal(f.stepped, want) {
		t.Fatalf("held %d, stepped %v; want 2 held and %v stepped", c.Held, f.stepped, want)
	}
	if wantCalls := []string{"hold 2 until 100", "hold 4 until 100", "release 2"}; !slices.Equal(f.calls, wantCalls) {
		t.Fatalf("core was asked %q, want %q", f.calls, wantCalls)
	}
}

// churn has the stepper's core report n events: members 2 to 9 failing,
// stalling, leaving and returning, views installed, the sequencer
// changing, Joins refused, now and then this member removed; it returns
// them all, in order.
func churn(s *Stepper, f *fake, n int) []Event {
	kinds := []EventKind{MemberFailed, ViewInstalled, MemberReturned, JoinRefused, MemberStalled, SequencerFailed,
		ViewInstalled, MemberLeft, SequencerChanged, MemberFailed, SelfRemoved, ViewInstalled}
	var all []Event
	for i := range n {
		ev := Event{Kind: kinds[i%len(kinds)], Member: frame.MemberID(2 + i/5%8), At: Time(i + 1), Reason: fmt.Sprint("event ", i)}
		if ev.Kind == ViewInstalled && i%5 != 0 { // now and then one without a view
			ev.View = &ViewInfo{ID: uint32(i), Members: []frame.MemberInfo{{ID: 1}, {ID: ev.Member}}}
		}
		all = append(all, ev)
		if len(all)%3 == 0 || i == n-1 { // several events per Ready
			f.ready = Ready{Events: all[len(all)-(len(all)-1)%3-1:]}
			s.Ready()
			s.Advance()
		}
	}
	return all
}

func sameEvent(a, b Event) bool {
	return a.Kind == b.Kind && a.Member == b.Member && a.At == b.At && a.Reason == b.Reason && a.View == b.View
}

// Reading what the stepper keeps of its events costs as many allocations
// after 10 000 events as after a dozen, and as many bytes as after 1 000:
// it does not grow with the past.
func TestStepperEventLogAllocs(t *testing.T) {
	cost := func(n int) (allocs float64, bytes uint64) {
		f := &fake{}
		s := NewStepper(f, 7, 0)
		churn(s, f, n)
		read := func() {
			_, _, _, _, _ = s.Events(), s.EventsDropped(), s.EventCounts(), s.Removals(), s.RecentViews()
			s.Removed()
		}
		allocs = testing.AllocsPerRun(100, read)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range 100 {
			read()
		}
		runtime.ReadMemStats(&m1)
		return allocs, (m1.TotalAlloc - m0.TotalAlloc) / 100
	}
	a12, _ := cost(12)
	a1k, b1k := cost(1000)
	a10k, b10k := cost(10_000)
	t.Logf("allocations after 12, 1 000, 10 000 events: %v, %v, %v; bytes after 1 000 and 10 000: %d, %d", a12, a1k, a10k, b1k, b10k)
	if a12 != a10k || a1k != a10k {
		t.Errorf("reading the events allocates %v times after 12 events, %v after 1 000, %v after 10 000", a12, a1k, a10k)
	}
	if b10k > b1k+b1k/100 {
		t.Errorf("reading the events allocates %d bytes after 1 000 events, %d after 10 000", b1k, b10k)
	}
}
