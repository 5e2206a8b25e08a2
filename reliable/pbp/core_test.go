package pbp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/rbcast/rbcast/frame"
)

// Hand-fed transcripts of one core: frames in, frames and deliveries out.

const testGroup = 42

func testMAC(id frame.MemberID) [6]byte { return [6]byte{0x02, 0, 0, 0, 0, byte(id + 1)} }

func testMembers(n int) []frame.MemberInfo {
	ms := make([]frame.MemberInfo, n)
	for i := range ms {
		ms[i] = frame.MemberInfo{ID: frame.MemberID(i), MAC: testMAC(frame.MemberID(i)), Incarnation: 7}
	}
	return ms
}

func testConfig(mode Mode, self frame.MemberID, n int) Config {
	return Config{Group: testGroup, Self: self, Members: testMembers(n), Mode: mode, InitialSeq: 100}
}

// t0 is the first instant of every transcript.
const t0 Time = 1_000_000_000

func newCore(t testing.TB, cfg Config) *Core {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(t0)
	return c
}

// in builds a frame from member sender as the core receives it.
type in struct {
	sender frame.MemberID
	inc    uint32
	seq    uint32
	acks   []uint32 // the sender's expected[], by member id
	flags  frame.Flags
	body   frame.Body
	group  uint32
}

func (f in) view(t testing.TB) ([6]byte, frame.View) {
	t.Helper()
	if f.inc == 0 {
		f.inc = 7
	}
	if f.group == 0 {
		f.group = testGroup
	}
	h := frame.Header{Flags: f.flags, Group: f.group, Sender: f.sender, Incarnation: f.inc, Seq: f.seq, Acks: f.acks}
	b, err := frame.Append(nil, &h, f.body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := frame.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return testMAC(f.sender), v
}

func data(msg string) frame.Body { return &frame.Payload{T: frame.Data, Data: []byte(msg)} }

func step(t testing.TB, c *Core, now Time, f in) error {
	t.Helper()
	src, v := f.view(t)
	return c.Step(now, src, frame.Broadcast, v)
}

// out is a frame the core sent, decoded.
type out struct {
	dst  [6]byte
	h    frame.Header
	t    frame.Type
	body frame.Body
}

func ready(t testing.TB, c *Core) ([]out, []Delivery, []Event) {
	t.Helper()
	rd := c.Ready()
	frames := decodeFrames(t, rd.Frames)
	var ds []Delivery
	for _, d := range rd.Deliveries {
		d.Data = append([]byte(nil), d.Data...)
		ds = append(ds, d)
	}
	evs := append([]Event(nil), rd.Events...)
	c.Advance()
	return frames, ds, evs
}

// decodeFrames parses the frames of a Ready (before its Advance: bodies
// may alias them).
func decodeFrames(t testing.TB, raw [][]byte) []out {
	t.Helper()
	var frames []out
	for _, b := range raw {
		eth, rest, err := frame.SplitEthernet(b, frame.EtherType)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.ParseGroup(rest, testGroup)
		if err != nil {
			t.Fatalf("core sent an invalid frame: %v", err)
		}
		h, body := v.Decode()
		frames = append(frames, out{dst: eth.Dst(), h: h, t: v.Type(), body: body})
	}
	return frames
}

func msgs(ds []Delivery) string {
	var s []string
	for _, d := range ds {
		s = append(s, string(d.Data))
	}
	return strings.Join(s, ",")
}

func TestConfigErrors(t *testing.T) {
	good := testConfig(PBP2, 0, 3)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no members", func(c *Config) { c.Members = nil }, "Members is empty"},
		{"self missing", func(c *Config) { c.Self = 9 }, "Self (9) is not in Members"},
		{"duplicate id", func(c *Config) { c.Members[1].ID = 0 }, "both have id 0"},
		{"duplicate MAC", func(c *Config) { c.Members[1].MAC = c.Members[0].MAC }, "both have MAC"},
		{"multicast MAC", func(c *Config) { c.Members[2].MAC[0] = 1 }, "Members[2] (id 2) has MAC 010000000003, want a unicast address"},
		{"reserved id", func(c *Config) { c.Members[2].ID = frame.NoMember }, "reserved"},
		{"window", func(c *Config) { c.Window = MaxWindow + 1 }, "Window is 32769"},
		{"mtu", func(c *Config) { c.MTU = 100 }, "MTU is 100, want at least 576"},
		{"max payload", func(c *Config) { c.MaxPayload = 5000 }, "MaxPayload is 5000, but MTU 1500 with 3 ack entries carries at most 1456"},
		{"mode", func(c *Config) { c.Mode = 9 }, "Mode is Mode(9)"},
		{"negative timeout", func(c *Config) { c.NackTimeout = -1 }, "NackTimeout is -1 ns"},
		{"failure vs heartbeat", func(c *Config) { c.FailureTimeout = Second; c.HeartbeatInterval = 2 * Second }, "FailureTimeout"},
		{"unicast dst", func(c *Config) { c.Dst = testMAC(1) }, "Dst 020000000002 is a unicast address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			cfg.Members = testMembers(3)
			tc.edit(&cfg)
			_, err := New(cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an ErrConfig containing %q", err, tc.want)
			}
		})
	}
}

func TestInOrderDeliveryAliasesFrameAndAcksLater(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	src, v := in{sender: 1, seq: 100, body: data("hello")}.view(t)
	if err := c.Step(t0+1, src, frame.Broadcast, v); err != nil {
		t.Fatal(err)
	}
	rd := c.Ready()
	if len(rd.Frames) != 0 || len(rd.Deliveries) != 1 {
		t.Fatalf("Ready: %d frames, %d deliveries; want 0 and 1 (the ack waits for AckDelay)", len(rd.Frames), len(rd.Deliveries))
	}
	d := rd.Deliveries[0]
	if d.From != 1 || d.Seq != 100 || string(d.Data) != "hello" {
		t.Fatalf("delivery %+v", d)
	}
	if p := unsafe.Pointer(unsafe.SliceData(d.Data)); uintptr(p) < uintptr(unsafe.Pointer(&v[0])) || uintptr(p) >= uintptr(unsafe.Pointer(&v[0]))+uintptr(len(v)) {
		t.Fatal("in-order delivery was copied; it should alias the received frame")
	}
	c.Advance()
	if dl := c.Deadline(); dl != t0+1+Time(DefaultAckDelay) {
		t.Fatalf("deadline %d, want the ack timer at %d", dl, t0+1+Time(DefaultAckDelay))
	}
	c.Tick(c.Deadline())
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Ack || frames[0].dst != frame.Broadcast {
		t.Fatalf("after AckDelay: %+v, want one broadcast Ack", frames)
	}
	if got := frames[0].h.Acks; got[1] != 101 || got[2] != 100 || got[0] != 100 {
		t.Fatalf("ack vector %v, want [100 101 100]", got)
	}
	if frames[0].h.Seq != 99 {
		t.Fatalf("Ack seq %d, want 99 (last sent: none yet)", frames[0].h.Seq)
	}
}

// A receiver with nothing of its own to send acknowledges after half a
// window of receipts (at least one), without waiting for the ack timer: a
// streaming sender never stops for AckDelay (docs/protocols.md, the
// half-window rule). Each receipt is one in-order Data frame; AckDelay is
// a second, so every Ack here comes from the rule.
func TestPlainAckAfterHalfWindow(t *testing.T) {
	for _, tc := range []struct {
		mode   Mode
		window int
		every  int // receipts per plain Ack
	}{
		{PBP2, 1, 1},
		{PBP2, 2, 1},
		{PBP2, 3, 1},
		{PBP2, 8, 4},
		{PBP2, 9, 4},
		{PBP1, 16, 8},
		{PBP2, 0, DefaultWindowPBP2 / 2},
	} {
		t.Run(fmt.Sprintf("%v/window=%d", tc.mode, tc.window), func(t *testing.T) {
			cfg := testConfig(tc.mode, 0, 3)
			cfg.Window, cfg.AckDelay = tc.window, Second
			c := newCore(t, cfg)
			receipts := 2*tc.every + 1
			for i := 1; i <= receipts; i++ {
				step(t, c, t0+Time(i), in{sender: 1, seq: 99 + uint32(i), body: data("m")})
				frames, ds, _ := ready(t, c)
				if len(ds) != 1 {
					t.Fatalf("receipt %d: %d deliveries, want 1", i, len(ds))
				}
				if i%tc.every != 0 {
					if len(frames) != 0 {
						t.Fatalf("receipt %d: sent %+v, want nothing before receipt %d", i, frames, (i/tc.every+1)*tc.every)
					}
					continue
				}
				if len(frames) != 1 || frames[0].t != frame.Ack || frames[0].dst != frame.Broadcast || frames[0].h.Seq != 99 {
					t.Fatalf("receipt %d: sent %+v, want one broadcast Ack naming 99 (nothing sent yet)", i, frames)
				}
				if got, want := frames[0].h.Acks, []uint32{100, 100 + uint32(i), 100}; !slices.Equal(got, want) {
					t.Fatalf("receipt %d: ack vector %v, want %v", i, got, want)
				}
			}
			if st := c.Counters(); st.AcksSent != uint64(receipts/tc.every) {
				t.Fatalf("%d Acks sent, want %d", st.AcksSent, receipts/tc.every)
			}
		})
	}
}

// A frame of ours to the group carries the ack vector: the count of
// receipts starts again after it, so no plain Ack repeats what it said.
func TestOwnFrameRestartsHalfWindowCount(t *testing.T) {
	cfg := testConfig(PBP2, 0, 3)
	cfg.Window, cfg.AckDelay = 8, Second
	c := newCore(t, cfg)
	receive := func(seq uint32) []out {
		t.Helper()
		step(t, c, t0+Time(seq), in{sender: 1, seq: seq, body: data("m")})
		frames, _, _ := ready(t, c)
		return frames
	}
	for seq := uint32(100); seq < 103; seq++ {
		if frames := receive(seq); len(frames) != 0 {
			t.Fatalf("receipt of %d: sent %+v, want nothing", seq, frames)
		}
	}
	if err := c.Propose(t0+200, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].t != frame.Data || frames[0].h.Acks[1] != 103 {
		t.Fatalf("%+v, want our Data 100 acknowledging member 1 up to 103", frames)
	}
	for seq := uint32(103); seq < 106; seq++ {
		if frames := receive(seq); len(frames) != 0 {
			t.Fatalf("receipt of %d (%d since our frame): sent %+v, want nothing", seq, seq-102, frames)
		}
	}
	if frames := receive(106); len(frames) != 1 || frames[0].t != frame.Ack || frames[0].h.Acks[1] != 107 {
		t.Fatalf("fourth receipt since our frame: %+v, want an Ack acknowledging member 1 up to 107", frames)
	}
}

func TestGapNackRepairPBP2(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	// Receive action 1, normal state: 103 arrives, 100..102 are missing.
	step(t, c, t0+1, in{sender: 1, seq: 103, body: data("d")})
	frames, ds, _ := ready(t, c)
	if len(ds) != 0 || len(frames) != 1 {
		t.Fatalf("got %d deliveries, %d frames; want 0, 1 Nack", len(ds), len(frames))
	}
	n := frames[0]
	nb, ok := n.body.(*frame.NackBody)
	if n.t != frame.Nack || n.dst != testMAC(1) || !ok || nb.Target != 1 || len(nb.Ranges) != 1 || nb.Ranges[0] != (frame.Range{First: 100, Last: 102}) {
		t.Fatalf("Nack %+v %+v, want unicast to member 1 for 100..102", n, n.body)
	}
	if !c.MemberStates()[0].Repairing {
		t.Fatal("member 1 should be in repair state")
	}
	// A second gap beyond the first is asked for at once, alone.
	step(t, c, t0+2, in{sender: 1, seq: 106, body: data("g")})
	frames, _, _ = ready(t, c)
	if len(frames) != 1 || frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 104, Last: 105}) {
		t.Fatalf("second Nack %+v", frames)
	}
	// The gap fills; held frames are delivered in order, copied.
	step(t, c, t0+3, in{sender: 1, seq: 101, body: data("b")})
	step(t, c, t0+3, in{sender: 1, seq: 100, body: data("a")})
	step(t, c, t0+3, in{sender: 1, seq: 102, body: data("c")})
	_, ds, _ = ready(t, c)
	if got := msgs(ds); got != "a,b,c,d" {
		t.Fatalf("delivered %q, want a,b,c,d", got)
	}
	// Nack timer: 104..105 still missing, asked for again, all of it. The
	// deliveries are acknowledged to the group by a broadcast Ack: a Nack
	// carries the ack vector to its target only.
	c.Tick(t0 + 1 + Time(DefaultNackTimeout))
	frames, _, _ = ready(t, c)
	if len(frames) != 2 || frames[1].t != frame.Ack || frames[1].dst != frame.Broadcast {
		t.Fatalf("nack timer: %+v, want a Nack and an Ack", frames)
	}
	if frames[0].t != frame.Nack || len(frames[0].body.(*frame.NackBody).Ranges) != 1 ||
		frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 104, Last: 105}) {
		t.Fatalf("nack timer: %+v, want a Nack for 104..105", frames)
	}
	step(t, c, t0+5, in{sender: 1, seq: 105, body: data("f"), flags: frame.FlagRetransmit})
	step(t, c, t0+5, in{sender: 1, seq: 104, body: data("e"), flags: frame.FlagRetransmit})
	_, ds, _ = ready(t, c)
	if got := msgs(ds); got != "e,f,g" {
		t.Fatalf("delivered %q, want e,f,g", got)
	}
	if c.MemberStates()[0].Repairing || c.Counters().Buffered != 0 {
		t.Fatalf("repair should be over: %+v", c.MemberStates()[0])
	}
	if st := c.Counters(); st.OutOfOrder != 4 || st.GapsRepaired != 1 || st.NacksSent != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNackAllSendersAtOnce(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 4))
	step(t, c, t0+1, in{sender: 1, seq: 102, body: data("x")})
	step(t, c, t0+1, in{sender: 2, seq: 100, body: data("y")})
	step(t, c, t0+1, in{sender: 3, seq: 104, body: data("z")})
	step(t, c, t0+1, in{sender: 1, seq: 105, body: data("x")})
	frames, _, _ := ready(t, c)
	if len(frames) != 2 {
		t.Fatalf("%d frames, want 2 Nacks (members 1 and 3)", len(frames))
	}
	nb1, nb3 := frames[0].body.(*frame.NackBody), frames[1].body.(*frame.NackBody)
	if nb1.Target != 1 || len(nb1.Ranges) != 2 || nb1.Ranges[0] != (frame.Range{First: 100, Last: 101}) || nb1.Ranges[1] != (frame.Range{First: 103, Last: 104}) {
		t.Fatalf("Nack to 1: %+v", nb1)
	}
	if nb3.Target != 3 || frames[1].dst != testMAC(3) || nb3.Ranges[0] != (frame.Range{First: 100, Last: 103}) {
		t.Fatalf("Nack to 3: %+v", nb3)
	}
}

func TestLostTailSeenFromAck(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	step(t, c, t0+1, in{sender: 1, seq: 100, body: data("a")})
	// The sender's resend timer says its last frame was 101 (fig. 3.9).
	step(t, c, t0+2, in{sender: 1, seq: 101, body: &frame.Empty{T: frame.Ack}, flags: frame.FlagAckRequest})
	frames, ds, _ := ready(t, c)
	if msgs(ds) != "a" || len(frames) != 1 || frames[0].t != frame.Nack || frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 101, Last: 101}) {
		t.Fatalf("frames %+v deliveries %q, want a Nack for 101", frames, msgs(ds))
	}
}

// Retransmissions go to the asking member's MAC; a second member asking
// for the same frame within the hold gets one broadcast; further Nacks
// within the hold are held.
func TestBundleNackAnswerAndHold(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 4))
	for _, m := range []string{"one", "two", "three"} {
		if err := c.Propose(t0+1, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Data || frames[0].h.Seq != 100 {
		t.Fatalf("%+v, want one Data frame 100", frames)
	}
	b, ok := frames[0].body.(*frame.Bundle)
	if !ok || len(b.Msgs) != 3 || string(b.Msgs[2]) != "three" {
		t.Fatalf("body %+v, want a bundle of 3", frames[0].body)
	}
	if err := c.Propose(t0+2, []byte("four")); err != nil {
		t.Fatal(err)
	}
	frames, _, _ = ready(t, c)
	if len(frames) != 1 || frames[0].h.Seq != 101 {
		t.Fatalf("%+v", frames)
	}
	if _, ok := frames[0].body.(*frame.Payload); !ok {
		t.Fatalf("a lone message travels unbundled: %+v", frames[0].body)
	}
	nack := in{sender: 2, seq: 99, acks: []uint32{100, 100, 100, 100}, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 99, Last: 101}}}}
	step(t, c, t0+3, nack)
	frames, _, _ = ready(t, c)
	if len(frames) != 2 || frames[0].h.Seq != 100 || frames[1].h.Seq != 101 || frames[0].h.Flags&frame.FlagRetransmit == 0 || frames[0].dst != testMAC(2) || frames[1].dst != testMAC(2) {
		t.Fatalf("retransmissions %+v, want 100 and 101 with FlagRetransmit to member 2 alone", frames)
	}
	if b, ok := frames[0].body.(*frame.Bundle); !ok || len(b.Msgs) != 3 {
		t.Fatalf("retransmitted bundle %+v", frames[0].body)
	}
	// A second member's Nack for the same frames right after: one
	// broadcast serves it and everyone else.
	nack.sender = 1
	step(t, c, t0+4, nack)
	frames, _, _ = ready(t, c)
	if len(frames) != 2 || frames[0].dst != frame.Broadcast || frames[1].dst != frame.Broadcast || frames[1].h.Flags&frame.FlagRetransmit == 0 {
		t.Fatalf("retransmissions %+v, want 100 and 101 broadcast", frames)
	}
	// A third one's right after that: held, the broadcast serves it.
	nack.sender = 3
	step(t, c, t0+5, nack)
	frames, _, _ = ready(t, c)
	if len(frames) != 0 || c.Counters().RetransmitsHeld != 2 {
		t.Fatalf("frames %+v, stats %+v; want nothing sent, 2 held", frames, c.Counters())
	}
	// After NackTimeout/2 it is honoured again, to the asker.
	step(t, c, t0+4+Time(DefaultNackTimeout/2), nack)
	if frames, _, _ = ready(t, c); len(frames) != 2 || frames[0].dst != testMAC(3) {
		t.Fatalf("%+v, want 2 retransmissions to member 3", frames)
	}
	if st := c.Counters(); st.NackedStale != 4 || st.NacksReceived != 4 || st.Retransmitted != 6 || st.RetransmittedUnicast != 4 {
		t.Fatalf("stats %+v: 99 was never sent (stale, in each of 4 Nacks); 6 retransmitted, 4 of them unicast", st)
	}
}

func TestResendTimerPBP2SendsAckWithLastSeq(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	c.Propose(t0, []byte("x"))
	ready(t, c)
	c.Tick(t0 + Time(DefaultResendTimeoutPBP2))
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Ack || frames[0].h.Seq != 100 || frames[0].h.Flags&frame.FlagAckRequest == 0 {
		t.Fatalf("%+v, want an Ack naming 100 and asking for an ack", frames)
	}
	// Backed off: the next probe comes after twice the timeout.
	if d := c.Deadline(); d != t0+3*Time(DefaultResendTimeoutPBP2) {
		t.Fatalf("deadline %d, want %d", d, t0+3*Time(DefaultResendTimeoutPBP2))
	}
	step(t, c, t0+Time(DefaultResendTimeoutPBP2)+1, in{sender: 1, seq: 99, acks: []uint32{101, 100}, body: &frame.Empty{T: frame.Ack}})
	if st := c.Counters(); st.InFlight != 0 || c.Deadline() != t0+Time(DefaultResendTimeoutPBP2)+Time(DefaultHeartbeatInterval) {
		t.Fatalf("after the ack: %+v deadline %d", st, c.Deadline())
	}
}

func TestPBP1RetransmitsWindow(t *testing.T) {
	c := newCore(t, testConfig(PBP1, 0, 3))
	c.Propose(t0, []byte("a"))
	ready(t, c)
	c.Propose(t0, []byte("b"))
	ready(t, c)
	// Member 1 acks 100, member 2 nothing.
	step(t, c, t0+1, in{sender: 1, seq: 99, acks: []uint32{101, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	c.Tick(t0 + Time(DefaultResendTimeoutPBP1))
	frames, _, _ := ready(t, c)
	if len(frames) != 2 || frames[0].h.Seq != 100 || frames[1].h.Seq != 101 || frames[1].h.Flags&(frame.FlagRetransmit|frame.FlagAckRequest) != frame.FlagRetransmit|frame.FlagAckRequest {
		t.Fatalf("%+v, want 100 and 101 retransmitted", frames)
	}
	// PBP1 receivers do not Nack: a gap just waits.
	step(t, c, t0+2, in{sender: 1, seq: 102, body: data("z")})
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("PBP1 sent %+v on a gap", frames)
	}
	// A duplicate is acknowledged again after AckDelay.
	now := t0 + Time(DefaultResendTimeoutPBP1) + 3
	step(t, c, now, in{sender: 2, seq: 99, body: data("old")})
	c.Tick(now + Time(DefaultAckDelay))
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].t != frame.Ack {
		t.Fatalf("%+v, want an Ack for the duplicate", frames)
	}
}

func TestWindowBackPressure(t *testing.T) {
	cfg := testConfig(PBP2, 0, 2)
	cfg.Window = 2
	c := newCore(t, cfg)
	for i, m := range []string{"a", "b"} {
		if err := c.Propose(t0, []byte(m)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		ready(t, c)
	}
	// With the window full, messages are still accepted: they collect in
	// frames that wait for room (bundling under back-pressure), up to
	// Window frames; then Propose refuses.
	for _, m := range []string{"c", "d"} {
		if err := c.Propose(t0, []byte(m)); err != nil {
			t.Fatalf("%s, window full: %v, want it held for the next frame", m, err)
		}
		if frames, _, _ := ready(t, c); len(frames) != 0 {
			t.Fatalf("%s: sent %+v with the window full", m, frames)
		}
	}
	big := make([]byte, c.cfg.maxPayload-6)
	if c.Blocked() {
		t.Fatal("Blocked with one of two pending frames used")
	}
	if err := c.Propose(t0, big); err != nil {
		t.Fatalf("message that opens the second waiting frame: %v", err)
	}
	if !c.Blocked() || c.Counters().Pending != 2 {
		t.Fatalf("Blocked %v, %d pending; want true, 2", c.Blocked(), c.Counters().Pending)
	}
	if err := c.Propose(t0, big); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("a third waiting frame: %v, want ErrWindowFull", err)
	}
	// Room for one: the first waiting frame goes, as 102.
	step(t, c, t0+1, in{sender: 1, seq: 99, acks: []uint32{101, 100}, body: &frame.Empty{T: frame.Ack}})
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].h.Seq != 102 {
		t.Fatalf("after an ack: %+v, want the held frame 102", frames)
	}
	if b, ok := frames[0].body.(*frame.Bundle); !ok || len(b.Msgs) != 2 || string(b.Msgs[0]) != "c" || string(b.Msgs[1]) != "d" {
		t.Fatalf("held frame body %+v, want the bundle c, d", frames[0].body)
	}
	if c.Blocked() {
		t.Fatal("Blocked with one frame pending")
	}
	// Room for two: the rest goes in one batch.
	if err := c.Propose(t0+1, big); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
	step(t, c, t0+1, in{sender: 1, seq: 99, acks: []uint32{103, 100}, body: &frame.Empty{T: frame.Ack}})
	frames, _, _ = ready(t, c)
	if len(frames) != 2 || frames[0].h.Seq != 103 || frames[1].h.Seq != 104 {
		t.Fatalf("after an ack for two: %+v, want frames 103 and 104 at once", frames)
	}
	// An ack for frames never sent is refused.
	step(t, c, t0+2, in{sender: 1, seq: 99, acks: []uint32{150, 100}, body: &frame.Empty{T: frame.Ack}})
	if st := c.Counters(); st.BadAcks != 1 || st.InFlight != 2 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTooLarge(t *testing.T) {
	cfg := testConfig(PBP2, 0, 2)
	c := newCore(t, cfg)
	max := frame.MaxPayload(DefaultMTU, 2, 0)
	if err := c.Propose(t0, make([]byte, max)); err != nil {
		t.Fatalf("a message of exactly %d bytes: %v", max, err)
	}
	err := c.Propose(t0, make([]byte, max+1))
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Size != max+1 || tl.Max != max || !strings.Contains(err.Error(), "1461 bytes exceeds the 1460") {
		t.Fatalf("%v", err)
	}
}

func TestDropsForeignFrames(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	forged := func(f in, src [6]byte) error {
		_, v := f.view(t)
		return c.Step(t0+1, src, frame.Broadcast, v)
	}
	for _, tc := range []struct {
		name string
		err  error
		run  func() error
	}{
		{"non-member", ErrNotMember, func() error { return forged(in{sender: 9, seq: 100, body: data("x")}, testMAC(9)) }},
		{"incarnation", ErrIncarnation, func() error { return forged(in{sender: 1, inc: 8, seq: 100, body: data("x")}, testMAC(1)) }},
		{"mac", ErrSourceMAC, func() error { return forged(in{sender: 1, seq: 100, body: data("x")}, testMAC(2)) }},
		{"self", ErrSourceMAC, func() error { return forged(in{sender: 0, seq: 100, body: data("x")}, testMAC(2)) }},
		{"group", ErrGroup, func() error { return forged(in{sender: 1, group: 43, seq: 100, body: data("x")}, testMAC(1)) }},
		{"type", ErrFrameType, func() error {
			return forged(in{sender: 1, body: &frame.StatusBody{T: frame.SeqStatusRequest}}, testMAC(1))
		}},
	} {
		if err := tc.run(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	frames, ds, evs := ready(t, c)
	if len(frames)+len(ds)+len(evs) != 0 {
		t.Fatalf("forged frames changed state: %v %v %v", frames, ds, evs)
	}
	if m := c.MemberStates(); m[0].Expected != 100 || m[0].LastHeard != t0 {
		t.Fatalf("member 1 state changed: %+v", m[0])
	}
	st := c.Counters()
	if st.NotMember != 1 || st.WrongIncarnation != 1 || st.WrongMAC != 2 || st.WrongGroup != 1 || st.UnhandledTypes != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Our own looped-back frame is ignored silently.
	if err := forged(in{sender: 0, seq: 100, body: data("x")}, testMAC(0)); err != nil {
		t.Fatal(err)
	}
}

func TestFailureRemovesMemberAndFreesWindow(t *testing.T) {
	cfg := testConfig(PBP2, 0, 3)
	cfg.Window = 2
	c := newCore(t, cfg)
	c.Propose(t0+1, []byte("a"))
	ready(t, c)
	c.Propose(t0+1, []byte("a2"))
	ready(t, c)
	step(t, c, t0+1, in{sender: 2, seq: 101, body: data("x")}) // 100 missing from 2
	ready(t, c)
	if st := c.Counters(); st.Buffered != 1 {
		t.Fatalf("%+v", st)
	}
	later := t0 + Time(DefaultFailureTimeout)
	step(t, c, later, in{sender: 1, seq: 99, acks: []uint32{102, 100, 100}, body: &frame.Empty{T: frame.Heartbeat}})
	c.Propose(later, make([]byte, c.cfg.maxPayload)) // held: the window is full
	c.Propose(later, make([]byte, c.cfg.maxPayload)) // and so is the room to wait
	if err := c.Propose(later, []byte("b")); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("%v, want ErrWindowFull while member 2 lags", err)
	}
	c.Tick(later)
	if _, _, evs := ready(t, c); len(evs) != 0 {
		t.Fatalf("events %v: member 2 was heard at %d", evs, t0+1)
	}
	if d := c.Deadline(); d != t0+1+Time(DefaultFailureTimeout) {
		t.Fatalf("deadline %d, want member 2's failure at %d", d, t0+1+Time(DefaultFailureTimeout))
	}
	c.Tick(c.Deadline())
	_, _, evs := ready(t, c)
	if len(evs) != 1 || evs[0].Kind != MemberFailed || evs[0].Member != 2 || evs[0].Discarded != 1 || evs[0].Delivered != 100 {
		t.Fatalf("events %v", evs)
	}
	// A removed member counts as having acknowledged everything.
	if err := c.Propose(later+2, []byte("b")); err != nil {
		t.Fatalf("after removal: %v", err)
	}
	if err := step(t, c, later+3, in{sender: 2, seq: 100, body: data("w")}); !errors.Is(err, ErrRemoved) {
		t.Fatalf("frame from removed member: %v", err)
	}
}

// TestStepShortView: a View shorter than a header (not from frame.Parse)
// is refused with frame.ErrShort and changes nothing; it used to panic
// reading the header, or pass as another group's frame.
func TestStepShortView(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	src, v := in{sender: 1, seq: 0, body: data("x")}.view(t)
	for _, n := range []int{0, 12, frame.HeaderLen - 1} {
		err := c.Step(t0, src, frame.Broadcast, v[:n])
		want := fmt.Sprintf("%d bytes, need at least %d", n, frame.HeaderLen)
		if !errors.Is(err, frame.ErrShort) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%d bytes: %v, want frame.ErrShort with %q", n, err, want)
		}
	}
	if st := c.Counters(); st.Delivered != 0 || st.WrongGroup != 0 {
		t.Fatalf("%+v", st)
	}
	if err := c.Step(t0, src, frame.Broadcast, v); err != nil {
		t.Fatal(err)
	}
}

func TestCleanLeave(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	c.Propose(t0, []byte("last words"))
	c.Leave(t0)
	if err := c.Propose(t0, []byte("more")); !errors.Is(err, ErrLeaving) {
		t.Fatalf("%v, want ErrLeaving", err)
	}
	frames, _, evs := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Data || len(evs) != 0 {
		t.Fatalf("%+v %v: the Leave must wait for the acks", frames, evs)
	}
	step(t, c, t0+1, in{sender: 1, seq: 99, acks: []uint32{101, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("%+v: member 2 has not acked", frames)
	}
	step(t, c, t0+2, in{sender: 2, seq: 99, acks: []uint32{101, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	frames, _, evs = ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Leave || frames[0].h.Seq != 101 || len(evs) != 1 || evs[0].Kind != SelfLeft {
		t.Fatalf("%+v %v, want a Leave with seq 101 and SelfLeft", frames, evs)
	}
	for range leaveRepeats - 1 {
		c.Tick(c.Deadline())
		if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].t != frame.Leave {
			t.Fatalf("repeat: %+v", frames)
		}
	}
	if c.Deadline() != 0 || !c.Left() {
		t.Fatalf("deadline %d after the last Leave", c.Deadline())
	}
	if err := step(t, c, t0+3, in{sender: 1, seq: 100, body: data("x")}); !errors.Is(err, ErrLeft) {
		t.Fatalf("%v, want ErrLeft", err)
	}
}

func TestReceiveLeave(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	step(t, c, t0+1, in{sender: 1, seq: 101, body: data("b")})
	step(t, c, t0+1, in{sender: 1, seq: 102, body: &frame.Empty{T: frame.Leave}})
	_, _, evs := ready(t, c)
	if len(evs) != 0 {
		t.Fatalf("%v: 100 is not delivered yet", evs)
	}
	step(t, c, t0+2, in{sender: 1, seq: 100, body: data("a")})
	_, ds, evs := ready(t, c)
	if msgs(ds) != "a,b" || len(evs) != 1 || evs[0].Kind != MemberLeft || evs[0].Delivered != 102 {
		t.Fatalf("%q %v", msgs(ds), evs)
	}
}

func TestSequenceWrap(t *testing.T) {
	for _, mode := range []Mode{PBP2, PBP1} {
		cfg := testConfig(mode, 0, 2)
		cfg.InitialSeq = 0xffff_fffe
		cfg.Window = 4
		c := newCore(t, cfg)
		// Receive 0xfffffffe, 0, 1, then 0xffffffff: all delivered in order.
		for _, f := range []struct {
			seq uint32
			msg string
		}{{0xffff_fffe, "a"}, {0, "c"}, {1, "d"}, {0xffff_ffff, "b"}} {
			step(t, c, t0+1, in{sender: 1, seq: f.seq, body: data(f.msg)})
		}
		_, ds, _ := ready(t, c)
		if msgs(ds) != "a,b,c,d" || ds[3].Seq != 1 {
			t.Fatalf("%v: delivered %q", mode, msgs(ds))
		}
		// Send across the wrap; acks across it free the window.
		for i := range 4 {
			if err := c.Propose(t0+2, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			ready(t, c)
		}
		step(t, c, t0+3, in{sender: 1, seq: 1, acks: []uint32{2, 2}, body: &frame.Empty{T: frame.Ack}})
		if st := c.Counters(); st.InFlight != 0 || st.BadAcks != 0 {
			t.Fatalf("%v: %+v", mode, st)
		}
		// An old frame from before the wrap is a duplicate.
		step(t, c, t0+4, in{sender: 1, seq: 0xffff_ffff, body: data("b")})
		if _, ds, _ := ready(t, c); len(ds) != 0 || c.Counters().Duplicates != 1 {
			t.Fatalf("%v: duplicate delivered %q", mode, msgs(ds))
		}
	}
}

// A sender more than a window past our acknowledgement does not count us:
// it removed us (we started late, say). It is removed here too, at once,
// as stalled, saying why, with what it sent beyond the gap discarded. Up
// to a window ahead is normal; half the number space away is an old
// duplicate.
func TestBeyondWindowRemovesSender(t *testing.T) {
	for _, beyond := range []in{
		{sender: 1, seq: 104, body: data("far")},
		{sender: 1, seq: 104, body: &frame.Empty{T: frame.Heartbeat}}, // names frame 104 as sent
		{sender: 1, seq: 105, body: &frame.Empty{T: frame.Leave}},     // 105 next: 104 sent
	} {
		cfg := testConfig(PBP2, 0, 2)
		cfg.Window = 4
		c := newCore(t, cfg)
		for _, f := range []in{
			{sender: 1, seq: 100 + 1<<31, body: data("very far")},
			{sender: 1, seq: 103, body: data("last in the window")},
			{sender: 1, seq: 103, body: &frame.Empty{T: frame.Heartbeat}},
		} {
			if err := step(t, c, t0+1, f); err != nil {
				t.Fatalf("%v: %v", f.body, err)
			}
		}
		if _, ds, evs := ready(t, c); len(ds) != 0 || len(evs) != 0 {
			t.Fatalf("delivered %q, events %v before any frame beyond the window", msgs(ds), evs)
		}
		if err := step(t, c, t0+2, beyond); err != nil {
			t.Fatalf("%v %d: %v", beyond.body, beyond.seq, err)
		}
		frames, ds, evs := ready(t, c)
		want := Event{Kind: MemberStalled, Member: 1, At: t0 + 2, Delivered: 100, Discarded: 1, Reason: StalledRemovedUs}
		if len(ds) != 0 || len(evs) != 1 || evs[0] != want {
			t.Fatalf("%v %d: delivered %q, events %v; want %v", beyond.body, beyond.seq, msgs(ds), evs, want)
		}
		for _, f := range frames {
			if f.t == frame.Nack {
				t.Errorf("a Nack to the member that removed us: %+v", f)
			}
		}
		st := c.Counters()
		if st.BeyondWindow != 1 || st.Duplicates != 1 || st.MembersFailed != 1 || st.Discarded != 1 || st.Buffered != 0 {
			t.Errorf("%+v", st)
		}
		if err := step(t, c, t0+3, in{sender: 1, seq: 105, body: data("more")}); !errors.Is(err, ErrRemoved) {
			t.Errorf("frame after the removal: %v, want ErrRemoved", err)
		}
	}
}

// Half the number space past expected, serial arithmetic calls a frame
// both before expected and after knownEnd (up to a window further): it is
// more than a window past our acknowledgement and removes its sender, like
// any other. Let through as old, a Heartbeat there set knownEnd 2^31
// ahead (the next Nack scanned 2^31 ring slots, seconds of CPU, and asked
// for 2^31 frames) or behind expected (gaps never seen again), and a Data
// frame took a ring slot of the window. Just past that, a frame is old:
// ignored, and the sender stays.
func TestHalfNumberSpaceAwayRemovesSender(t *testing.T) {
	const half = 1 << 31
	for _, tc := range []struct {
		name    string
		gap     bool // 102 arrived first: knownEnd 103, expected 100
		beyond  in
		removed bool
	}{
		{"heartbeat", false, in{sender: 1, seq: 100 + half - 1, body: &frame.Empty{T: frame.Heartbeat}}, true},
		{"ack", false, in{sender: 1, seq: 100 + half - 1, body: &frame.Empty{T: frame.Ack}}, true},
		{"nack", false, in{sender: 1, seq: 100 + half - 1, body: &frame.NackBody{Target: 2, Ranges: []frame.Range{{First: 0, Last: 0}}}}, true},
		{"leave", false, in{sender: 1, seq: 100 + half, body: &frame.Empty{T: frame.Leave}}, true},
		{"data", false, in{sender: 1, seq: 100 + half - 1, body: data("far")}, true},
		{"heartbeat/gap", true, in{sender: 1, seq: 103 + half - 1, body: &frame.Empty{T: frame.Heartbeat}}, true},
		{"heartbeat/gap/lower", true, in{sender: 1, seq: 100 + half, body: &frame.Empty{T: frame.Heartbeat}}, true},
		{"data/gap", true, in{sender: 1, seq: 103 + half - 1, body: data("far")}, true},
		{"heartbeat/old", false, in{sender: 1, seq: 100 + half, body: &frame.Empty{T: frame.Heartbeat}}, false},
		{"data/old", false, in{sender: 1, seq: 100 + half, body: data("old")}, false},
		{"heartbeat/gap/old", true, in{sender: 1, seq: 103 + half, body: &frame.Empty{T: frame.Heartbeat}}, false},
		{"data/gap/old", true, in{sender: 1, seq: 103 + half, body: data("old")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(PBP2, 0, 3)
			cfg.Window = 4
			c := newCore(t, cfg)
			if tc.gap {
				step(t, c, t0+1, in{sender: 1, seq: 102, body: data("c")})
				ready(t, c)
			}
			if err := step(t, c, t0+2, tc.beyond); err != nil {
				t.Fatal(err)
			}
			// Checked before Ready: a knownEnd half the number space
			// away costs the next Nack seconds.
			m := c.MemberStates()[0]
			if d := m.KnownEnd - m.Expected; m.Live && d > uint32(cfg.Window) {
				t.Fatalf("member 1 live with expected %d, knownEnd %d: %d past it", m.Expected, m.KnownEnd, d)
			}
			if m.Live == tc.removed {
				t.Fatalf("member 1 live %v, want %v (%+v)", m.Live, !tc.removed, m)
			}
			_, ds, evs := ready(t, c)
			if tc.removed {
				if len(evs) != 1 || evs[0].Kind != MemberStalled || evs[0].Reason != StalledRemovedUs || c.Counters().BeyondWindow != 1 {
					t.Fatalf("events %v, %d beyond the window; want member 1 stalled: %s", evs, c.Counters().BeyondWindow, StalledRemovedUs)
				}
				return
			}
			if len(ds) != 0 || len(evs) != 0 {
				t.Fatalf("delivered %q, events %v", msgs(ds), evs)
			}
			// Still a member in good standing: the window delivers.
			for _, s := range []uint32{100, 101, 102, 103} {
				step(t, c, t0+3, in{sender: 1, seq: s, body: data(fmt.Sprint(s))})
			}
			if _, ds, evs := ready(t, c); len(evs) != 0 || msgs(ds) != "100,101,102,103" && msgs(ds) != "100,101,c,103" {
				t.Fatalf("delivered %q, events %v", msgs(ds), evs)
			}
		})
	}
}

func TestBundleDelay(t *testing.T) {
	cfg := testConfig(PBP2, 0, 2)
	cfg.BundleDelay = 50 * Microsecond
	c := newCore(t, cfg)
	c.Propose(t0, []byte("a"))
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatal("a lone message was sent before BundleDelay")
	}
	c.Propose(t0+10, []byte("b"))
	if d := c.Deadline(); d != t0+Time(50*Microsecond) {
		t.Fatalf("deadline %d", d)
	}
	c.Tick(c.Deadline())
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || len(frames[0].body.(*frame.Bundle).Msgs) != 2 {
		t.Fatalf("%+v", frames)
	}
}

// TestZeroAllocsInOrder checks the steady-state path allocates nothing:
// receiving an in-order frame, delivering it, acknowledging, proposing and
// sending, and freeing the window on an ack.
func TestZeroAllocsInOrder(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	seq := uint32(100)
	now := t0
	msg := make([]byte, 200)
	h := frame.Header{Group: testGroup, Sender: 1, Incarnation: 7, Acks: []uint32{100, 100}}
	body := &frame.Payload{T: frame.Data, Data: msg}
	buf := make([]byte, 0, 2000)
	round := func() {
		now += 1000
		h.Seq = seq
		h.Acks[0] = c.nextSeq
		b, _ := frame.Append(buf[:0], &h, body)
		v, err := frame.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Step(now, testMAC(1), frame.Broadcast, v); err != nil {
			t.Fatal(err)
		}
		seq++
		if err := c.Propose(now, msg); err != nil {
			t.Fatal(err)
		}
		c.Tick(now)
		if rd := c.Ready(); len(rd.Deliveries) != 1 || len(rd.Frames) != 1 {
			t.Fatalf("ready %d deliveries %d frames", len(rd.Deliveries), len(rd.Frames))
		}
		c.Advance()
	}
	for range 2 * len(c.history) {
		round() // warm up buffers: every history slot once
	}
	if a := testing.AllocsPerRun(1000, round); a != 0 {
		t.Fatalf("%v allocations per message, want 0", a)
	}
}

func TestStalledMemberRemoved(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	// Idle for a long time, then one message: the ack clocks start now.
	idle := t0 + 10*Time(DefaultFailureTimeout)
	for now := t0; now < idle; now += Time(DefaultHeartbeatInterval) {
		for _, id := range []frame.MemberID{1, 2} {
			step(t, c, now, in{sender: id, seq: 99, acks: []uint32{100, 100, 100}, body: &frame.Empty{T: frame.Heartbeat}})
		}
		c.Tick(now)
		ready(t, c)
	}
	c.Propose(idle, []byte("x"))
	ready(t, c)
	// Member 1 acknowledges; member 2 keeps sending heartbeats that never
	// acknowledge (as a member that removed us would).
	step(t, c, idle+1, in{sender: 1, seq: 99, acks: []uint32{101, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	var evs []Event
	for now := idle; now <= idle+Time(DefaultFailureTimeout); now += Time(DefaultHeartbeatInterval) {
		for _, id := range []frame.MemberID{1, 2} {
			step(t, c, now, in{sender: id, seq: 99, acks: []uint32{100 + 1 - uint32(id-1), 100, 100}, body: &frame.Empty{T: frame.Heartbeat}})
		}
		c.Tick(now)
		_, _, e := ready(t, c)
		evs = append(evs, e...)
	}
	if len(evs) != 1 || evs[0].Kind != MemberStalled || evs[0].Member != 2 || evs[0].At != idle+Time(DefaultFailureTimeout) {
		t.Fatalf("events %v, want member 2 stalled at %d", evs, idle+Time(DefaultFailureTimeout))
	}
	if c.Counters().InFlight != 0 {
		t.Fatalf("%+v", c.Counters())
	}
}

// A member asking again for a frame the last retransmission answered for
// it lost that copy: it gets another at once, inside the hold that
// deduplicates other members' Nacks (the hold alone stalled it for
// NackTimeout/2 and its window for a whole NackTimeout).
func TestRepeatedNackFromSameMemberNotHeld(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 4))
	c.Propose(t0+1, []byte("a"))
	ready(t, c)
	nack := func(from frame.MemberID) in {
		return in{sender: from, seq: 99, acks: []uint32{100, 100, 100, 100}, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 100, Last: 100}}}}
	}
	step(t, c, t0+2, nack(1))
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].dst != testMAC(1) {
		t.Fatalf("%+v, want one retransmission to member 1", frames)
	}
	step(t, c, t0+3, nack(2)) // the same loss seen by 2: a broadcast
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].dst != frame.Broadcast {
		t.Fatalf("%+v, want one broadcast retransmission", frames)
	}
	step(t, c, t0+4, nack(3)) // and by 3: served by that broadcast
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("%+v, want member 3's Nack held", frames)
	}
	step(t, c, t0+5, nack(3)) // 3 again: its copy was lost
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].h.Seq != 100 || frames[0].h.Flags&frame.FlagRetransmit == 0 || frames[0].dst != testMAC(3) {
		t.Fatalf("%+v, want 100 retransmitted to member 3 for its repeated Nack", frames)
	}
	if st := c.Counters(); st.Retransmitted != 3 || st.RetransmitsHeld != 1 || st.RetransmittedUnicast != 2 {
		t.Fatalf("stats %+v, want 3 retransmitted (2 unicast), 1 held", st)
	}
}

// A retransmission addressed to us answers our Nack; frames asked for no
// later than it and still missing had their retransmissions overtaken,
// so they were lost: they are asked for again at once, not after the
// nack timer. A broadcast retransmission may answer another member's
// earlier Nack, so it proves nothing.
func TestLostRetransmissionAskedAgainAtOnce(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 1, 3))
	data := dataFrom0
	stepTo := func(now Time, f in, dst [6]byte) {
		t.Helper()
		src, v := f.view(t)
		if err := c.Step(now, src, dst, v); err != nil {
			t.Fatal(err)
		}
	}
	stepTo(t0+1, data(100, 0), frame.Broadcast)
	stepTo(t0+2, data(103, 0), frame.Broadcast) // 101, 102 missing
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Nack || frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 101, Last: 102}) {
		t.Fatalf("%+v, want a Nack for 101-102", frames)
	}
	// 102's retransmission to the group: no conclusion about 101.
	stepTo(t0+3, data(102, frame.FlagRetransmit), frame.Broadcast)
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("%+v, want nothing: a broadcast retransmission may answer another member", frames)
	}
	stepTo(t0+4, data(104, 0), frame.Broadcast)
	stepTo(t0+5, data(106, 0), frame.Broadcast) // 105 missing
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 105, Last: 105}) {
		t.Fatalf("%+v, want a Nack for the new gap 105 only", frames)
	}
	// 105's retransmission to us: 101, asked for before it, was lost.
	T := Time(DefaultNackTimeout) // the nack timer, armed at t0+2
	stepTo(t0+2+T-1000, data(105, frame.FlagRetransmit), testMAC(1))
	frames, _, _ = ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Nack || len(frames[0].body.(*frame.NackBody).Ranges) != 1 || frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 101, Last: 101}) {
		t.Fatalf("%+v, want a Nack for 101 alone at once", frames)
	}
	if st := c.Counters(); st.NacksRepeated != 1 || st.NacksSent != 3 {
		t.Fatalf("stats %+v, want 3 Nacks, 1 repeated", st)
	}
	// The nack timer does not ask again for 101 so soon after.
	c.Tick(t0 + 2 + T)
	frames, _, _ = ready(t, c)
	for _, f := range frames {
		if f.t == frame.Nack {
			t.Fatalf("%+v: 101 was asked for less than a repair timeout ago", frames)
		}
	}
	// It fires again one repair timeout later, T: the samples so far, 1 ns
	// (102's broadcast retransmission, which may answer another member)
	// and ~T (105's), give srtt T/8 and rttvar T/4, and srtt+4·rttvar is
	// cut at max(T, 2·srtt) = T.
	c.Tick(t0 + 2 + 2*T - 1)
	if frames, _, _ = ready(t, c); slices.ContainsFunc(frames, func(f out) bool { return f.t == frame.Nack }) {
		t.Fatalf("%+v: asked again before a repair timeout", frames)
	}
	c.Tick(t0 + 2 + 2*T)
	if frames, _, _ = ready(t, c); len(frames) == 0 || frames[len(frames)-1].t != frame.Nack || frames[len(frames)-1].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 101, Last: 101}) {
		t.Fatalf("%+v, want the nack timer to ask for 101 again", frames)
	}
}

// The nack timer follows the measured repair round trip (Nack to
// retransmission), between NackTimeout/16 and NackTimeout; before any
// measurement it is NackTimeout.
func TestNackTimerAdaptsToRepairRoundTrip(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	now := t0
	const rtt = 100 * Microsecond
	for i := range uint32(20) {
		seq := 100 + 2*i
		now = now.Add(Millisecond)
		step(t, c, now, in{sender: 1, seq: seq + 1, body: data("b")}) // seq lost
		frames, _, _ := ready(t, c)
		if len(frames) != 1 || frames[0].t != frame.Nack {
			t.Fatalf("round %d: %+v, want a Nack", i, frames)
		}
		want := DefaultNackTimeout
		if i > 0 {
			want = max(DefaultNackTimeout/minNackDivisor, c.nackTimeout(&c.peers[0]))
		}
		if got := c.peers[0].nackAt; got != now.Add(want) {
			t.Fatalf("round %d: nack timer in %d, want %d", i, got-now, want)
		}
		now = now.Add(rtt)
		step(t, c, now, in{sender: 1, seq: seq, body: data("a"), flags: frame.FlagRetransmit})
		ready(t, c)
	}
	p := &c.peers[0]
	if d := c.nackTimeout(p); d != DefaultNackTimeout/minNackDivisor {
		t.Fatalf("nack timeout %d after steady %d round trips, want the floor %d", d, rtt, DefaultNackTimeout/minNackDivisor)
	}
	if p.srtt < rtt*9/10 || p.srtt > rtt*11/10 {
		t.Fatalf("srtt %d, want about %d", p.srtt, rtt)
	}
	// A lost retransmission is asked for again after the adaptive
	// timeout, not after NackTimeout.
	now = now.Add(Millisecond)
	step(t, c, now, in{sender: 1, seq: 141, body: data("b")})
	ready(t, c)
	c.Tick(now.Add(DefaultNackTimeout / minNackDivisor))
	frames, _, _ := ready(t, c)
	if len(frames) == 0 || frames[0].t != frame.Nack || frames[0].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 140, Last: 140}) {
		t.Fatalf("%+v, want the Nack for 140 again after %d", frames, DefaultNackTimeout/minNackDivisor)
	}
}

// A repair round trip longer than NackTimeout (retransmissions queued
// behind a window of jumbo frames at a 1 Gbit/s port: ~9 ms) is still
// measured and followed. Before, each Nack was re-asked after NackTimeout,
// before its answer could come; a re-asking Nack cancelled the sample
// (Karn), so the timer never learnt the round trip and stayed at
// NackTimeout, and every re-ask cost another retransmission queued behind
// the others (simulator, 1 Gbit/s, MTU 9000, 5% loss: 39% of the wire
// with 1.9 retransmissions per frame; 64-byte messages to 7 receivers:
// 1%, a 980 ms delivery gap).
func TestNackTimerLearnsLongRepairRoundTrip(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	p := &c.peers[0]
	T := DefaultNackTimeout
	rtt := 9 * Millisecond // > 2T
	now := t0
	for i := range uint32(10) {
		seq := 100 + 2*i
		now = now.Add(20 * Millisecond)
		sent := now
		step(t, c, now, in{sender: 1, seq: seq + 1, body: data("b")}) // seq lost
		frames, _, _ := ready(t, c)
		if !slices.ContainsFunc(frames, func(f out) bool { return f.t == frame.Nack }) {
			t.Fatalf("round %d: %+v, want a Nack", i, frames)
		}
		// The timer may fire before the answer; it re-asks. The sender
		// is heard meanwhile (the window queued at its port drains to
		// us), so the timer does not back off.
		for p.nackAt != 0 && p.nackAt < sent.Add(rtt) {
			step(t, c, p.nackAt-1, in{sender: 1, seq: seq + 1, body: &frame.Empty{T: frame.Heartbeat}})
			now = p.nackAt
			c.Tick(now)
			ready(t, c)
		}
		now = sent.Add(rtt)
		step(t, c, now, in{sender: 1, seq: seq, body: data("a"), flags: frame.FlagRetransmit})
		ready(t, c)
	}
	if p.srtt < rtt*9/10 || p.srtt > rtt*11/10 {
		t.Fatalf("srtt %d, want about %d (measured from the first Nack)", p.srtt, rtt)
	}
	if d := c.nackTimeout(p); d < rtt || d > 2*p.srtt {
		t.Fatalf("nack timeout %d, want at least the round trip %d and at most twice srtt %d", d, rtt, 2*p.srtt)
	}
	// A new gap is now asked for again only after the learnt timeout.
	now = now.Add(20 * Millisecond)
	step(t, c, now, in{sender: 1, seq: 121, body: data("b")})
	ready(t, c)
	c.Tick(now.Add(T))
	if frames, _, _ := ready(t, c); slices.ContainsFunc(frames, func(f out) bool { return f.t == frame.Nack }) {
		t.Fatalf("%+v: asked again after NackTimeout, before the measured round trip", frames)
	}
	if st := c.Counters(); st.NacksRepeated == 0 {
		t.Fatalf("stats %+v: the first rounds should have re-asked (the check above proves nothing otherwise)", st)
	}
}

// A sender silent while we wait for its repair (a stalled process, below
// FailureTimeout) is not a repair round trip. With the sample kept from
// the first Nack across a 500 ms silence, the nack timer went from
// 250 µs to 125 ms (1 s backed off), and took 27 repaired gaps to fall
// below NackTimeout again.
func TestNackTimerIgnoresSilence(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	p := &c.peers[0]
	now := t0
	const rtt = 100 * Microsecond
	repair := func(seq uint32, rtt Duration) {
		now = now.Add(Millisecond)
		step(t, c, now, in{sender: 1, seq: seq + 1, body: data("b")}) // seq lost
		ready(t, c)
		now = now.Add(rtt)
		step(t, c, now, in{sender: 1, seq: seq, body: data("a"), flags: frame.FlagRetransmit})
		ready(t, c)
	}
	for i := range uint32(20) {
		repair(100+2*i, rtt)
	}
	before, srtt := c.nackTimeout(p), p.srtt
	now = now.Add(Millisecond)
	step(t, c, now, in{sender: 1, seq: 141, body: data("b")}) // 140 lost
	ready(t, c)
	back := now.Add(500 * Millisecond)
	for p.nackAt != 0 && p.nackAt < back {
		now = p.nackAt
		c.Tick(now)
		ready(t, c)
	}
	if st := c.Counters(); st.NacksRepeated == 0 {
		t.Fatalf("stats %+v: the silence should have been asked through", st)
	}
	now = back
	step(t, c, now, in{sender: 1, seq: 140, body: data("a"), flags: frame.FlagRetransmit})
	ready(t, c)
	if d := c.nackTimeout(p); d != before || p.srtt != srtt {
		t.Fatalf("after 500 ms of silence: nack timeout %d (srtt %d), want %d (srtt %d) as before", d, p.srtt, before, srtt)
	}
	// The sender heard again, the next repair is measured.
	repair(142, Millisecond)
	if p.srtt <= srtt {
		t.Fatalf("srtt %d after a 1 ms repair, want above %d: no sample was taken", p.srtt, srtt)
	}
}

// A sample spans every timeout since the first unanswered Nack. Where
// Nack rounds go unanswered often (here two of every three: heavy loss of
// Nacks or retransmissions), each sample exceeds the smoothed round trip;
// unbounded, the timer grew past a minute. It stops at 8 × NackTimeout.
func TestNackTimerBoundedUnderLoss(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	p := &c.peers[0]
	now := t0
	const rtt = 200 * Microsecond
	ceiling := DefaultNackTimeout << maxNackBackoff
	for i := range uint32(100) {
		seq := 100 + 2*i
		now = now.Add(Millisecond)
		step(t, c, now, in{sender: 1, seq: seq + 1, body: data("b")}) // seq lost
		ready(t, c)
		for range 2 { // two Nack rounds unanswered; the sender is heard
			at := p.nackAt
			step(t, c, at-1, in{sender: 1, seq: seq + 1, body: &frame.Empty{T: frame.Heartbeat}})
			now = at
			c.Tick(now)
			ready(t, c)
		}
		now = now.Add(rtt)
		step(t, c, now, in{sender: 1, seq: seq, body: data("a"), flags: frame.FlagRetransmit})
		ready(t, c)
		if d := c.nackTimeout(p); d > ceiling || p.srtt > ceiling {
			t.Fatalf("gap %d: nack timeout %d, srtt %d, want at most %d", i, d, p.srtt, ceiling)
		}
	}
	if d := c.nackTimeout(p); d != ceiling {
		t.Fatalf("nack timeout %d, want it at the ceiling %d (the check above proves nothing otherwise)", d, ceiling)
	}
}

// Only a retransmission of a frame we asked for and miss ends a repair
// sample. One of a frame we hold (another member's repair, broadcast)
// arriving just after our Nack was taken as the round trip: 20 of them
// took srtt from 2 ms to 147 µs and the timer to 1.2 ms, below the
// round trip: every repair would be asked for again before it came.
func TestRepairSampleOnlyFromAskedFrames(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	p := &c.peers[0]
	now := t0
	const rtt = 2 * Millisecond
	seq := uint32(100)
	for i := range 40 {
		now = now.Add(10 * Millisecond)
		step(t, c, now, in{sender: 1, seq: seq + 1, body: data("b")}) // seq lost
		step(t, c, now, in{sender: 1, seq: seq + 2, body: data("c")})
		ready(t, c)
		if i >= 20 { // another member's repair of seq+2, 10 µs after our Nack
			step(t, c, now.Add(10*Microsecond), in{sender: 1, seq: seq + 2, body: data("c"), flags: frame.FlagRetransmit})
			ready(t, c)
		}
		now = now.Add(rtt)
		step(t, c, now, in{sender: 1, seq: seq, body: data("a"), flags: frame.FlagRetransmit})
		ready(t, c)
		seq += 3
	}
	if p.srtt < rtt*9/10 || c.nackTimeout(p) < rtt {
		t.Fatalf("srtt %d, nack timeout %d, want about the round trip %d and above it", p.srtt, c.nackTimeout(p), rtt)
	}
}

// The nack timer backs off only from a sender not heard from since it was
// armed (it may be dead); a sender that is heard from but whose
// retransmissions keep being lost is asked again every timeout.
func TestNackBackoffOnlyForSilentSender(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	step(t, c, t0+1, in{sender: 1, seq: 101, body: data("b")}) // 100 missing
	ready(t, c)
	p := &c.peers[0]
	interval := func() Duration {
		at := p.nackAt
		c.Tick(at)
		ready(t, c)
		return p.nackAt.Sub(at)
	}
	// Heard from (a heartbeat naming 101) before each firing: no backoff.
	for i := range 4 {
		step(t, c, p.nackAt-1, in{sender: 1, seq: 101, body: &frame.Empty{T: frame.Heartbeat}})
		if d := interval(); d != DefaultNackTimeout {
			t.Fatalf("round %d with the sender heard: next Nack in %d, want %d", i, d, DefaultNackTimeout)
		}
	}
	// Silent: the interval doubles, up to 8×.
	want := []Duration{2, 4, 8, 8}
	for i, w := range want {
		if d := interval(); d != w*DefaultNackTimeout {
			t.Fatalf("silent round %d: next Nack in %d, want %d", i, d, w*DefaultNackTimeout)
		}
	}
}

// PBP2's resend probe follows the measured acknowledgement round trip,
// no earlier than 2×AckDelay: a lost tail is found in milliseconds, not
// after the fixed ResendTimeout.
func TestResendProbeAdaptsToAckRoundTrip(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	now := t0
	for i := range uint32(20) {
		now = now.Add(Millisecond)
		c.Propose(now, []byte("m"))
		ready(t, c)
		now = now.Add(200 * Microsecond)
		step(t, c, now, in{sender: 1, seq: 99, acks: []uint32{101 + i, 100}, body: &frame.Empty{T: frame.Ack}})
		ready(t, c)
	}
	now = now.Add(Millisecond)
	c.Propose(now, []byte("tail")) // its acknowledgement never comes
	ready(t, c)
	want := 2 * DefaultAckDelay
	if got := c.resendAt.Sub(now); got != want {
		t.Fatalf("probe in %d, want %d (2×AckDelay: the round trip is 200 µs)", got, want)
	}
	c.Tick(now.Add(want))
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Ack || frames[0].h.Seq != 120 || frames[0].h.Flags&frame.FlagAckRequest == 0 {
		t.Fatalf("%+v, want the probe: an Ack naming 120 with ACK_REQUEST", frames)
	}
}

// A member in ack vector slot 64 or beyond has no bit in sent.served: its
// Nacks are answered by broadcast and held by time alone (NackTimeout/2),
// also when it asks again; members below 64 keep the unicast rules beside
// it.
func TestNackFromSlotBeyond64(t *testing.T) {
	const n = 70
	c := newCore(t, testConfig(PBP2, 0, n))
	c.Propose(t0+1, []byte("a"))
	ready(t, c)
	acks := make([]uint32, n)
	for i := range acks {
		acks[i] = 100
	}
	nack := func(from frame.MemberID) in {
		return in{sender: from, seq: 99, acks: acks, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 100, Last: 100}}}}
	}
	want := func(what string, dst ...[6]byte) {
		t.Helper()
		frames, _, _ := ready(t, c)
		if len(frames) != len(dst) {
			t.Fatalf("%s: %+v, want %d frames", what, frames, len(dst))
		}
		for i, f := range frames {
			if f.t != frame.Data || f.h.Seq != 100 || f.h.Flags&frame.FlagRetransmit == 0 || f.dst != dst[i] {
				t.Fatalf("%s: %+v, want 100 retransmitted to %v", what, frames, dst)
			}
		}
	}
	step(t, c, t0+2, nack(66))
	want("slot 66 asks", frame.Broadcast)
	step(t, c, t0+3, nack(66))
	want("slot 66 again within the hold")
	step(t, c, t0+4, nack(1))
	want("slot 1 within the hold of a broadcast")
	step(t, c, t0+5, nack(1))
	want("slot 1 again: its copy of the broadcast was lost", testMAC(1))
	// The unicast to 1 does not reach 66: not held behind it.
	step(t, c, t0+6, nack(66))
	want("slot 66 within the hold of the unicast to 1", frame.Broadcast)
	step(t, c, t0+7, nack(66))
	want("slot 66 again within the hold of that broadcast")
	step(t, c, t0+8, nack(1)) // 1 still counts as served by its unicast
	want("slot 1 asking again", testMAC(1))
	step(t, c, t0+8+Time(DefaultNackTimeout/2), nack(66))
	want("slot 66 after the hold", frame.Broadcast)
	if st := c.Counters(); st.Retransmitted != 5 || st.RetransmittedUnicast != 2 || st.RetransmitsHeld != 3 {
		t.Fatalf("stats %+v, want 5 retransmitted (2 unicast), 3 held", st)
	}
}

// A repair that ends between the nack timer firing and the next Ready
// leaves nothing behind: the first Nack of the next gap is a new request
// (not counted as repeated, its answer sampled), not a timer re-ask.
func TestRepairEndClearsTimerState(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 1, 3))
	data := dataFrom0
	step(t, c, t0+1, data(100, 0))
	step(t, c, t0+2, data(102, 0)) // 101 missing
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].t != frame.Nack {
		t.Fatalf("%+v, want a Nack for 101", frames)
	}
	// The nack timer fires, and 101 arrives before the next Ready.
	T := Time(DefaultNackTimeout)
	c.Tick(t0 + 2 + T)
	step(t, c, t0+2+T, data(101, frame.FlagRetransmit))
	frames, _, _ := ready(t, c)
	for _, f := range frames {
		if f.t == frame.Nack {
			t.Fatalf("%+v, want no Nack: nothing is missing", frames)
		}
	}
	step(t, c, t0+3+T, data(104, 0)) // 103 missing: a new gap
	frames, _, _ = ready(t, c)
	if len(frames) == 0 || frames[len(frames)-1].t != frame.Nack || frames[len(frames)-1].body.(*frame.NackBody).Ranges[0] != (frame.Range{First: 103, Last: 103}) {
		t.Fatalf("%+v, want a Nack for 103", frames)
	}
	if st := c.Counters(); st.NacksSent != 2 || st.NacksRepeated != 0 {
		t.Fatalf("stats %+v, want 2 Nacks, none repeated", st)
	}
}

// dataFrom0 is a one-byte Data frame seq from member 0 of a 3-member
// group whose acks all stand at 100.
func dataFrom0(seq uint32, flags frame.Flags) in {
	return in{sender: 0, seq: seq, flags: flags, acks: []uint32{100, 100, 100}, body: &frame.Payload{T: frame.Data, Data: []byte{byte(seq)}}}
}

// A frame is built in its history slot and handed out from there; asked
// for by two members in one turn, it goes out twice in one Ready (to the
// first asker, then to the group), and the first copy must keep its
// destination and bytes: the second is encoded apart. Lone messages and
// bundles alike, and the history slot still sends right afterwards.
func TestFrameAskedTwiceInOneReady(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 4))
	if err := c.Propose(t0+1, []byte("alpha")); err != nil {
		t.Fatal(err)
	}
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].h.Seq != 100 {
		t.Fatalf("%+v, want Data 100", frames)
	}
	for _, m := range []string{"b1", "b2"} {
		if err := c.Propose(t0+2, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].h.Seq != 101 {
		t.Fatalf("%+v, want Data 101", frames)
	}
	nack := func(from frame.MemberID) in {
		return in{sender: from, seq: 99, acks: []uint32{100, 100, 100, 100}, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 100, Last: 101}}}}
	}
	step(t, c, t0+3, nack(2))
	step(t, c, t0+3, nack(1))
	body := func(o out) string {
		switch b := o.body.(type) {
		case *frame.Payload:
			return string(b.Data)
		case *frame.Bundle:
			var s []string
			for _, m := range b.Msgs {
				s = append(s, string(m))
			}
			return "[" + strings.Join(s, ",") + "]"
		}
		return fmt.Sprintf("%T", o.body)
	}
	check := func(frames []out, want ...string) {
		t.Helper()
		var got []string
		for _, f := range frames {
			dst := "group"
			if f.dst != frame.Broadcast {
				dst = fmt.Sprintf("member %d", f.dst[5]-1)
			}
			got = append(got, fmt.Sprintf("%d %s to %s", f.h.Seq, body(f), dst))
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
	frames, _, _ := ready(t, c)
	check(frames, "100 alpha to member 2", "101 [b1,b2] to member 2", "100 alpha to group", "101 [b1,b2] to group")
	step(t, c, t0+3+Time(DefaultNackTimeout/2), nack(3))
	frames, _, _ = ready(t, c)
	check(frames, "100 alpha to member 3", "101 [b1,b2] to member 3")
}

// A Propose between Ready and Advance starts a new frame in a history
// slot whose frame this Ready handed out (the slot of a retransmitted
// frame that became stable in the same turn, a history length back): the
// frame handed out must stay intact until Advance, so the new frame gets
// a buffer of its own, and goes out intact itself.
func TestProposeBetweenReadyAndAdvance(t *testing.T) {
	cfg := testConfig(PBP2, 0, 2)
	cfg.Window, cfg.MaxPayload = 2, 8 // history of 4 slots; one message per frame
	c := newCore(t, cfg)
	for _, m := range []string{"msg-100", "msg-101", "msg-102", "msg-103"} {
		if err := c.Propose(t0+1, []byte(m)); err != nil {
			t.Fatal(err)
		}
		ready(t, c) // 100 and 101 go; 102 and 103 wait for window room
	}
	// Member 1 asks for 100 again (its copy of the retransmission was
	// lost), then, in the same turn, acknowledges everything.
	step(t, c, t0+2, in{sender: 1, seq: 99, acks: []uint32{100, 100}, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 100, Last: 100}}}})
	step(t, c, t0+2, in{sender: 1, seq: 99, acks: []uint32{102, 100}, body: &frame.Empty{T: frame.Ack}})
	rd := c.Ready() // the retransmission of 100, then 102 and 103
	// 104 goes in 100's history slot (104 & 3 == 100 & 3).
	if err := c.Propose(t0+2, []byte("msg-104")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range decodeFrames(t, rd.Frames) {
		if p, ok := f.body.(*frame.Payload); ok && f.t == frame.Data {
			got = append(got, fmt.Sprintf("%d %s", f.h.Seq, p.Data))
		}
	}
	if want := "100 msg-100; 102 msg-102; 103 msg-103"; strings.Join(got, "; ") != want {
		t.Fatalf("Data of the Ready after a Propose: %q, want %q", strings.Join(got, "; "), want)
	}
	c.Advance()
	step(t, c, t0+3, in{sender: 1, seq: 99, acks: []uint32{104, 100}, body: &frame.Empty{T: frame.Ack}})
	frames, _, _ := ready(t, c)
	if len(frames) == 0 || frames[0].h.Seq != 104 || string(frames[0].body.(*frame.Payload).Data) != "msg-104" {
		t.Fatalf("after Advance: %+v, want Data 104 msg-104", frames)
	}
}

// Removals grows in the Step or Tick that changes Live or HasLeft, and
// only then: the membership layer keeps its count of reachable members
// until it grows (reliable/view). Member 1 leaves, member 2 fails.
func TestRemovalsTrackLiveness(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	check := func(when string, want uint64, live1, left1, live2 bool) {
		t.Helper()
		if got := c.Removals(); got != want || c.Live(1) != live1 || c.HasLeft(1) != left1 || c.Live(2) != live2 {
			t.Fatalf("%s: Removals %d, Live(1) %v, HasLeft(1) %v, Live(2) %v; want %d, %v, %v, %v",
				when, got, c.Live(1), c.HasLeft(1), c.Live(2), want, live1, left1, live2)
		}
	}
	check("at start", 0, true, false, true)
	step(t, c, t0+1, in{sender: 2, seq: 100, body: data("y")})
	step(t, c, t0+1, in{sender: 1, seq: 101, body: data("b")})
	step(t, c, t0+1, in{sender: 1, seq: 102, body: &frame.Empty{T: frame.Leave}})
	check("Leave ahead of a gap", 0, true, false, true)
	step(t, c, t0+2, in{sender: 1, seq: 100, body: data("a")})
	check("member 1's gap filled", 1, false, true, true)
	ready(t, c)
	c.Tick(t0 + 2)
	check("a Tick before member 2's timeout", 1, false, true, true)
	c.Tick(t0 + 1 + Time(DefaultFailureTimeout))
	check("member 2 silent for the failure timeout", 2, false, true, false)
	ready(t, c)
	c.Tick(t0 + 2*Time(DefaultFailureTimeout))
	check("later", 2, false, true, false)
}

// PendingMessages is counted as messages are accepted, bundled, numbered
// and frozen (asked every turn by the layers over the membership core, it
// walked the pending frames each time): it matches a count of the
// pending frames' messages at every step, and Freeze returns that many.
func TestPendingMessagesCounted(t *testing.T) {
	cfg := testConfig(PBP2, 0, 2)
	cfg.Window = 2
	c := newCore(t, cfg)
	check := func(when string) {
		t.Helper()
		n := 0
		for i := range c.pending {
			n += c.history[(c.nextSeq+uint32(i))&c.hmask].count
		}
		if got := c.PendingMessages(); got != n {
			t.Fatalf("%s: PendingMessages %d, the pending frames hold %d", when, got, n)
		}
	}
	big := make([]byte, c.cfg.maxPayload-4) // alone in its frame
	now := t0
	propose := func(ms ...[]byte) {
		t.Helper()
		for i, m := range ms {
			now++
			if err := c.Propose(now, m); err != nil {
				t.Fatalf("message %d of %d: %v", i, len(ms), err)
			}
			check(fmt.Sprintf("message %d of %d proposed", i, len(ms)))
		}
		c.Ready()
		c.Advance()
		check("after Ready")
	}
	small := []byte("small")
	// Two frames go (the window), a bundle of three and one waits.
	propose(big)
	propose(small)
	propose(small, small, small, big)
	if c.pending != 2 {
		t.Fatalf("%d frames pending; want 2", c.pending)
	}
	// Member 1 acknowledges: both go.
	step(t, c, now, in{sender: 1, seq: 99, acks: []uint32{c.nextSeq, 100}, body: &frame.Empty{T: frame.Ack}})
	check("acknowledged")
	c.Ready()
	c.Advance()
	check("acknowledged, after Ready")
	propose(small, small, big)
	want := c.PendingMessages()
	if want != 3 || c.pending != 2 {
		t.Fatalf("%d messages in %d pending frames; want 3 in 2", want, c.pending)
	}
	if got := len(c.Freeze()); got != want {
		t.Fatalf("Freeze returned %d messages; PendingMessages said %d", got, want)
	}
	check("frozen")
	if c.PendingMessages() != 0 {
		t.Fatalf("frozen: PendingMessages %d, want 0", c.PendingMessages())
	}
}
