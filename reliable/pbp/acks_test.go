package pbp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// The acknowledgement matrix: once a group is quiet, every member knows
// that every member holds every sender's whole stream (each row heard from
// the others' Acks and Heartbeats), with loss too; before, a member knew
// only who held its own stream. Unknown ids are refused.
func TestAckMatrix(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   testnet.Impairment
	}{{"lossless", testnet.Impairment{}}, {"loss-10", testnet.Impairment{Loss: 0.1}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := scenario{seed: 5, members: 4, k: 150, window: 16, crash: -1, leaver: -1, link: simtest.Link{MTU: 1500, In: tc.in}}
			r := runScenario(t, s)
			if err := r.verdict(); err != nil {
				t.Fatal(err)
			}
			r.Net.RunFor(2 * time.Second) // quiet: heartbeats carry the final vectors
			for _, m := range r.Members {
				for _, snd := range r.Members {
					end := snd.Core.nextSeq
					for _, o := range r.Members {
						if h, ok := m.Core.Holds(o.ID, snd.ID); !ok || h != end {
							t.Errorf("member %d: Holds(%d, %d) = %d, %v; want %d (all of %d's %d frames)", m.ID, o.ID, snd.ID, h, ok, end, snd.ID, end-s.initialSeq)
						}
					}
					if st, ok := m.Core.StableFrom(snd.ID); !ok || st != end {
						t.Errorf("member %d: StableFrom(%d) = %d, %v; want %d", m.ID, snd.ID, st, ok, end)
					}
				}
				if _, ok := m.Core.Holds(999, r.Members[0].ID); ok {
					t.Errorf("member %d: Holds of an unknown member: ok", m.ID)
				}
				if _, ok := m.Core.StableFrom(frame.MemberID(999)); ok {
					t.Errorf("member %d: StableFrom of an unknown sender: ok", m.ID)
				}
			}
		})
	}
}

// A frozen core acknowledges what it had delivered when frozen, no more
// (what the membership layer's flush reports): it goes on delivering,
// but its ack vector, and Holds for itself, stay there, so no member
// reads from the matrix that it holds a frame a view change's cut may
// leave out. Its stall detector waits meanwhile: the others' acks stop
// too.
func TestFrozenAcksStayAtFreeze(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	step(t, c, t0+1, in{sender: 1, seq: 100, body: data("a")})
	c.Ready()
	c.Advance()
	c.Freeze()
	step(t, c, t0+2, in{sender: 1, seq: 101, body: data("b")})
	rd := c.Ready()
	if len(rd.Deliveries) != 1 || string(rd.Deliveries[0].Data) != "b" {
		t.Fatalf("frozen: delivered %+v, want b", rd.Deliveries)
	}
	c.Advance()
	if d, _ := c.DeliveredFrom(1); d != 102 {
		t.Fatalf("DeliveredFrom(1) = %d, want 102", d)
	}
	if h, _ := c.Holds(0, 1); h != 101 {
		t.Fatalf("Holds(self, 1) = %d frozen at 101, want 101", h)
	}
	c.Tick(t0 + 2 + Time(DefaultAckDelay))
	frames, _, _ := ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Ack {
		t.Fatalf("after AckDelay: %+v, want one Ack", frames)
	}
	if got := frames[0].h.Acks; got[1] != 101 || got[2] != 100 {
		t.Fatalf("frozen ack vector %v, want member 1's at 101 (frozen), member 2's at 100", got)
	}
}

// Frozen, a member whose acks stopped (it froze too, or its acks are
// capped) is not removed as stalled: a view change is under way, and the
// membership layer decides who goes on. Heard from, it stays live.
func TestFrozenNoStall(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 2))
	if err := c.Propose(t0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ready(t, c)
	c.Freeze()
	end := t0 + 3*Time(c.cfg.FailureTimeout)
	for now := t0 + 1; now < end; now += Time(c.cfg.HeartbeatInterval) {
		step(t, c, now, in{sender: 1, seq: 99, acks: []uint32{100, 100}, body: &frame.Empty{T: frame.Heartbeat}})
		c.Tick(now)
		if _, _, evs := ready(t, c); len(evs) > 0 {
			t.Fatalf("frozen, at %d: events %+v, want none", now-t0, evs)
		}
		if d := c.Deadline(); d <= now {
			t.Fatalf("at %d: deadline %d, not after now (a stall timer that never fires)", now-t0, d-t0)
		}
	}
	if !c.Live(1) {
		t.Fatal("member 1 was removed while frozen")
	}
}

// PromptAcks, the sender: a lone Data frame asks for a prompt
// acknowledgement (FlagAckRequest); in a stream every frame half a
// window (128) after the last that asked does;
// once the sender stops with frames after the last that asked, an Ack
// asking for acks goes out promptTail after its last frame (a probe),
// and none when every frame is acknowledged already. Retransmissions ask
// too. Without PromptAcks no Data frame asks.
func TestPromptAcksSender(t *testing.T) {
	asks := func(fs []out) (data, asking []uint32) {
		for _, f := range fs {
			if f.t == frame.Data {
				data = append(data, f.h.Seq)
				if f.h.Flags&frame.FlagAckRequest != 0 {
					asking = append(asking, f.h.Seq)
				}
			}
		}
		return data, asking
	}
	cfg := testConfig(PBP2, 0, 3)
	cfg.PromptAcks = true
	c := newCore(t, cfg)
	now := t0 + 1
	if err := c.Propose(now, []byte("lone")); err != nil {
		t.Fatal(err)
	}
	frames, _, _ := ready(t, c)
	if _, asking := asks(frames); len(asking) != 1 || asking[0] != 100 {
		t.Fatalf("a lone frame: %+v, want Data 100 asking for acks", frames)
	}
	// Acknowledged by both: nothing in flight, no probe due.
	for _, m := range []frame.MemberID{1, 2} {
		step(t, c, now+1, in{sender: m, seq: 99, acks: []uint32{101, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	}
	// A stream of 140 frames, one per turn, none acknowledged meanwhile.
	var asking []uint32
	for i := range 140 {
		now = t0 + 10 + Time(i)*Time(5*Microsecond)
		if err := c.Propose(now, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		c.Tick(now)
		frames, _, _ = ready(t, c)
		_, a := asks(frames)
		asking = append(asking, a...)
	}
	if want := []uint32{101, 229}; !slices.Equal(asking, want) {
		t.Fatalf("a stream of frames 101..240: %v asked for acks, want %v (the first, lone, then every 128th: half the window)", asking, want)
	}
	// The stream stops: the probe asks for 230..240 promptTail after 240.
	if d := c.Deadline(); d != now+Time(promptTail) {
		t.Fatalf("deadline %d after the stream, want the probe's %d", d-t0, now+Time(promptTail)-t0)
	}
	c.Tick(now + Time(promptTail))
	frames, _, _ = ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Ack || frames[0].h.Flags&frame.FlagAckRequest == 0 || frames[0].h.Seq != 240 {
		t.Fatalf("the probe: %+v, want an Ack of Seq 240 asking for acks", frames)
	}
	// A retransmission asks for acks.
	step(t, c, now+Time(promptTail)+1, in{sender: 1, seq: 99, acks: []uint32{101, 100, 100}, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 120, Last: 120}}}})
	frames, _, _ = ready(t, c)
	if data, a := asks(frames); len(data) != 1 || data[0] != 120 || len(a) != 1 {
		t.Fatalf("the answer to a Nack: %+v, want Data 120 asking for acks", frames)
	}

	// Without PromptAcks, nothing asks.
	c = newCore(t, testConfig(PBP2, 0, 3))
	if err := c.Propose(t0+1, []byte("lone")); err != nil {
		t.Fatal(err)
	}
	if _, a := asks(decodeFrames(t, c.Ready().Frames)); len(a) != 0 {
		t.Fatalf("without PromptAcks, frames %v asked for acks", a)
	}
}

// PromptAcks or AnswerAckRequests, a receiver: a Data frame that asks
// is acknowledged in the same Ready; one that does not waits for the ack
// timer (AckDelay). An Ack that asks is answered at once; without either
// it starts the ack timer (PBP2's resend probe).
func TestPromptAcksReceiver(t *testing.T) {
	for _, mode := range []string{"PromptAcks", "AnswerAckRequests"} {
		cfg := testConfig(PBP2, 2, 3)
		cfg.PromptAcks, cfg.AnswerAckRequests = mode == "PromptAcks", mode == "AnswerAckRequests"
		c := newCore(t, cfg)
		step(t, c, t0+1, in{sender: 0, seq: 100, body: data("a")})
		if frames, ds, _ := ready(t, c); len(ds) != 1 || len(frames) != 0 {
			t.Fatalf("%s, a frame that does not ask: %d deliveries, frames %+v; want 1, none", mode, len(ds), frames)
		}
		step(t, c, t0+2, in{sender: 0, seq: 101, body: data("b"), flags: frame.FlagAckRequest})
		frames, ds, _ := ready(t, c)
		if len(ds) != 1 || len(frames) != 1 || frames[0].t != frame.Ack || frames[0].h.Acks[0] != 102 {
			t.Fatalf("%s, a frame that asks: %d deliveries, frames %+v; want 1 and an Ack with member 0's entry at 102", mode, len(ds), frames)
		}
		step(t, c, t0+3, in{sender: 0, seq: 101, flags: frame.FlagAckRequest, body: &frame.Empty{T: frame.Ack}})
		if frames, _, _ := ready(t, c); len(frames) != 1 || frames[0].t != frame.Ack {
			t.Fatalf("%s, an Ack that asks: frames %+v, want an Ack", mode, frames)
		}
	}

	c := newCore(t, testConfig(PBP2, 2, 3))
	step(t, c, t0+2, in{sender: 0, seq: 100, body: data("b"), flags: frame.FlagAckRequest})
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("without PromptAcks, a frame that asks: frames %+v, want none before AckDelay", frames)
	}
}

// With Retain a frame's messages are delivered from its retained copy,
// which a layer may Pin: a pinned copy stays unchanged when a later frame
// takes its slot (that frame gets a new buffer), Retained goes on
// returning the slot's frame, and Pin refuses bytes that are not in the
// retained copy of the frame it names. Unpinned, the slot's buffer is
// reused.
func TestPinRetained(t *testing.T) {
	cfg := testConfig(PBP2, 2, 3)
	cfg.Retain, cfg.Window = true, 4
	c := newCore(t, cfg)
	step(t, c, t0+1, in{sender: 0, seq: 100, body: data("first")})
	rd := c.Ready()
	if len(rd.Deliveries) != 1 {
		t.Fatalf("%d deliveries, want 1", len(rd.Deliveries))
	}
	first := rd.Deliveries[0].Data
	if kept, _, ok := c.Retained(0, 100); !ok || unsafe.SliceData(kept) != unsafe.SliceData(first) {
		t.Fatal("the delivery is not the frame's retained copy")
	}
	if c.Pin(0, 100, []byte("first")) || c.Pin(0, 101, first) || c.Pin(1, 100, first) {
		t.Fatal("Pin took bytes outside the named frame's retained copy")
	}
	if !c.Pin(0, 100, first) {
		t.Fatal("Pin of a delivered message refused")
	}
	c.Advance()
	// Frames 101..104: 104 takes the slot of 100 (a window of 4).
	for s := uint32(101); s <= 104; s++ {
		step(t, c, t0+2, in{sender: 0, seq: s, body: data(fmt.Sprintf("frame%d", s))})
	}
	c.Ready()
	c.Advance()
	if string(first) != "first" {
		t.Fatalf("the pinned message reads %q after its slot was reused, want first", first)
	}
	if kept, _, ok := c.Retained(0, 104); !ok || string(kept) != "frame104" {
		t.Fatalf("Retained(104) = %q, %v; want frame104", kept, ok)
	}
	// Unpinned, the slot's buffer is reused: 108 lands where 104 is.
	at104, _, _ := c.Retained(0, 104)
	if !c.Pin(0, 104, at104) {
		t.Fatal("Pin of 104 refused")
	}
	c.Unpin(0, 104)
	for s := uint32(105); s <= 108; s++ {
		step(t, c, t0+3, in{sender: 0, seq: s, body: data(fmt.Sprintf("frame%d", s))})
	}
	c.Ready()
	c.Advance()
	if at108, _, _ := c.Retained(0, 108); unsafe.SliceData(at108) != unsafe.SliceData(at104) {
		t.Fatal("an unpinned slot's buffer was not reused")
	}
}

// With Retain, a frame every other member holds already (their ack
// vectors say so) is not copied: it is delivered from the received bytes
// and Retained does not return it, since no view change relays it. With
// two members that is every frame; with three, those the third
// acknowledged before they arrived here. Frozen for a change, the core
// keeps every frame again.
func TestRetainSkipsHeldFrames(t *testing.T) {
	cfg := testConfig(PBP2, 1, 2)
	cfg.Retain = true
	c := newCore(t, cfg)
	step(t, c, t0+1, in{sender: 0, seq: 100, body: data("two")})
	if _, ds, _ := ready(t, c); len(ds) != 1 || string(ds[0].Data) != "two" {
		t.Fatalf("two members: deliveries %+v, want one of %q", ds, "two")
	}
	if kept, _, ok := c.Retained(0, 100); ok {
		t.Fatalf("two members: frame 100 retained (%q); only the sender and this member hold it", kept)
	}
	if st := c.Counters(); st.Kept != 0 || st.KeepSkipped != 1 {
		t.Fatalf("two members: Kept %d, KeepSkipped %d; want 0, 1", st.Kept, st.KeepSkipped)
	}

	cfg = testConfig(PBP2, 2, 3)
	cfg.Retain = true
	c = newCore(t, cfg)
	step(t, c, t0+1, in{sender: 0, seq: 100, body: data("m100")})
	ready(t, c)
	if kept, _, ok := c.Retained(0, 100); !ok || string(kept) != "m100" {
		t.Fatalf("three members, member 1 not heard: Retained(100) = %q, %v; want m100", kept, ok)
	}
	// Member 1 holds member 0's frames up to 101.
	step(t, c, t0+2, in{sender: 1, seq: 100, acks: []uint32{102, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	step(t, c, t0+2, in{sender: 0, seq: 101, body: data("m101")})
	step(t, c, t0+2, in{sender: 0, seq: 102, body: data("m102")})
	if _, ds, _ := ready(t, c); len(ds) != 2 || string(ds[0].Data) != "m101" || string(ds[1].Data) != "m102" {
		t.Fatalf("deliveries %+v, want m101, m102", ds)
	}
	if kept, _, ok := c.Retained(0, 101); ok {
		t.Fatalf("Retained(101) = %q; member 1 acknowledged it, want it not kept", kept)
	}
	if kept, _, ok := c.Retained(0, 102); !ok || string(kept) != "m102" {
		t.Fatalf("Retained(102) = %q, %v; member 1 has not acknowledged it, want m102", kept, ok)
	}
	if kept, _, ok := c.Retained(0, 100); !ok || string(kept) != "m100" {
		t.Fatalf("Retained(100) = %q, %v after later frames; want m100", kept, ok)
	}
	// Frozen: kept although member 1 holds it.
	step(t, c, t0+3, in{sender: 1, seq: 100, acks: []uint32{110, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	c.Freeze()
	step(t, c, t0+3, in{sender: 0, seq: 103, body: data("m103")})
	ready(t, c)
	if kept, _, ok := c.Retained(0, 103); !ok || string(kept) != "m103" {
		t.Fatalf("frozen: Retained(103) = %q, %v; want m103", kept, ok)
	}
}

// With Retain, a frame that waited in the reorder ring (it came after a
// gap) is retained in the ring's buffer it waited in, not copied: its
// messages are delivered from there, Retained returns those bytes, and
// the buffer is not recycled for the frames that wait next, so the
// retained frame reads the same after them (a view change may relay
// it). Its predecessor, delivered from the received bytes, is copied.
func TestRetainKeepsHeldBuffer(t *testing.T) {
	cfg := testConfig(PBP2, 2, 3)
	cfg.Retain = true
	c := newCore(t, cfg)
	step(t, c, t0+1, in{sender: 0, seq: 101, body: data("m101")}) // waits for 100
	c.Ready()
	c.Advance()
	step(t, c, t0+2, in{sender: 0, seq: 100, body: data("m100")})
	rd := c.Ready()
	if len(rd.Deliveries) != 2 || string(rd.Deliveries[1].Data) != "m101" {
		t.Fatalf("deliveries %+v, want m100, m101", rd.Deliveries)
	}
	at101 := rd.Deliveries[1].Data
	if kept, _, ok := c.Retained(0, 101); !ok || unsafe.SliceData(kept) != unsafe.SliceData(at101) {
		t.Fatalf("Retained(101) = %q, %v; want the bytes it was delivered from", kept, ok)
	}
	if st := c.Counters(); st.Kept != 2 || st.KeptHeld != 1 {
		t.Fatalf("Kept %d, KeptHeld %d; want 2 (m100 copied, m101 in its buffer), 1", st.Kept, st.KeptHeld)
	}
	c.Advance()
	// 103 and 104 wait for 102 in buffers from the pool, which would be
	// 101's had it gone back there.
	step(t, c, t0+3, in{sender: 0, seq: 103, body: data("m103")})
	step(t, c, t0+3, in{sender: 0, seq: 104, body: data("m104")})
	c.Ready()
	c.Advance()
	step(t, c, t0+4, in{sender: 0, seq: 102, body: data("m102")})
	if _, ds, _ := ready(t, c); len(ds) != 3 || string(ds[2].Data) != "m104" {
		t.Fatalf("deliveries %+v, want m102, m103, m104", ds)
	}
	for s, want := range map[uint32]string{100: "m100", 101: "m101", 102: "m102", 103: "m103", 104: "m104"} {
		if kept, _, ok := c.Retained(0, s); !ok || string(kept) != want {
			t.Errorf("Retained(%d) = %q, %v; want %s", s, kept, ok, want)
		}
	}
}

// PromptAcks, a sender whose stream waits on the window: no probe goes
// out while messages wait for window room. The frame that asked half a
// window back brings the acks that open the window, and the stream goes
// on (and asks again); a probe then cost an Ack of the sender and one of
// every receiver per stall. Once nothing waits, the tail is probed.
func TestPromptAcksNoProbeWhileBlocked(t *testing.T) {
	cfg := testConfig(PBP2, 0, 3)
	cfg.PromptAcks, cfg.Window = true, 8
	c := newCore(t, cfg)
	now := t0 + 1
	var frames []out
	for i := range 12 {
		if err := c.Propose(now, bytes.Repeat([]byte{byte(i)}, 1000)); err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			frames, _, _ = ready(t, c)
		}
	}
	if fs, _, _ := ready(t, c); len(fs) != 0 {
		t.Fatalf("the window full: %+v sent, want none", fs)
	}
	if len(frames) != 8 || c.Stats().Pending != 4 {
		t.Fatalf("12 messages, window 8: %d frames sent, %d pending; want 8 and 4", len(frames), c.Stats().Pending)
	}
	// The stream waits on the window past promptTail: no probe.
	for _, at := range []Time{now + Time(promptTail), now + 4*Time(promptTail)} {
		c.Tick(at)
		if frames, _, _ = ready(t, c); len(frames) != 0 {
			t.Fatalf("%d after the window filled, with 4 messages waiting: %+v, want no frame (no probe)", at-now, frames)
		}
	}
	// Both acknowledge 100..104 (104 asked): the 4 waiting go out, 108
	// asking (half the window after 104).
	now += 5 * Time(promptTail)
	for _, m := range []frame.MemberID{1, 2} {
		step(t, c, now, in{sender: m, seq: 99, acks: []uint32{105, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	}
	frames, _, _ = ready(t, c)
	var asking []uint32
	for _, f := range frames {
		if f.h.Flags&frame.FlagAckRequest != 0 {
			asking = append(asking, f.h.Seq)
		}
	}
	if len(frames) != 4 || c.Stats().Pending != 0 || !slices.Equal(asking, []uint32{108}) {
		t.Fatalf("the window opened by 4: %d frames sent (%v asking), %d pending; want 4 (108 asking) and 0", len(frames), asking, c.Stats().Pending)
	}
	// Nothing waits now: the probe asks for the tail.
	c.Tick(c.Deadline())
	frames, _, _ = ready(t, c)
	if len(frames) != 1 || frames[0].t != frame.Ack || frames[0].h.Flags&frame.FlagAckRequest == 0 || frames[0].h.Seq != 111 {
		t.Fatalf("the probe: %+v, want an Ack of Seq 111 asking for acks", frames)
	}
}

// ProposePrompt without PromptAcks (a Safe message in an Agreed group):
// only the frames holding such messages ask, by PromptAcks's rule read
// over them alone. A prompt frame sent while only plain frames are in
// flight asks (nothing that wants prompt acks is in flight); the next,
// sent while it is, does not, and the probe asks for it promptTail
// later; plain frames ask for nothing and arm no probe. A prompt frame's
// retransmission asks, a plain one's does not. A receiver with
// AnswerAckRequests acknowledges at once a frame that asks.
func TestProposePrompt(t *testing.T) {
	type sentFrame struct {
		t      frame.Type
		seq    uint32
		asking bool
	}
	sent := func(fs []out) (got []sentFrame) {
		for _, f := range fs {
			got = append(got, sentFrame{f.t, f.h.Seq, f.h.Flags&frame.FlagAckRequest != 0})
		}
		return got
	}
	c := newCore(t, testConfig(PBP2, 0, 3))
	now := t0 + 1
	turn := func(prompt bool, msg string) []sentFrame {
		t.Helper()
		return sent(proposeReady(t, c, now, prompt, msg))
	}
	if got, want := turn(false, "a"), []sentFrame{{frame.Data, 100, false}}; !slices.Equal(got, want) {
		t.Fatalf("a plain frame: %+v, want %+v", got, want)
	}
	if d := c.Deadline(); d == now+Time(promptTail) {
		t.Fatal("a plain frame armed the probe")
	}
	now++
	if got, want := turn(true, "s"), []sentFrame{{frame.Data, 101, true}}; !slices.Equal(got, want) {
		t.Fatalf("a prompt frame with only a plain one in flight: %+v, want %+v", got, want)
	}
	now++
	if got, want := turn(true, "t"), []sentFrame{{frame.Data, 102, false}}; !slices.Equal(got, want) {
		t.Fatalf("a prompt frame with one in flight that asked: %+v, want %+v", got, want)
	}
	if d := c.Deadline(); d != now+Time(promptTail) {
		t.Fatalf("deadline %d, want the probe's %d", d-t0, now+Time(promptTail)-t0)
	}
	now += Time(promptTail)
	c.Tick(now)
	frames, _, _ := ready(t, c)
	if got, want := sent(frames), []sentFrame{{frame.Ack, 102, true}}; !slices.Equal(got, want) {
		t.Fatalf("the probe: %+v, want %+v", got, want)
	}
	now++
	if got, want := turn(false, "b"), []sentFrame{{frame.Data, 103, false}}; !slices.Equal(got, want) {
		t.Fatalf("a plain frame after the probe: %+v, want %+v", got, want)
	}
	now += Time(promptTail)
	c.Tick(now)
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("promptTail after a plain frame: %+v, want no probe", sent(frames))
	}
	step(t, c, now+1, in{sender: 1, seq: 99, acks: []uint32{100, 100, 100}, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: 100, Last: 101}}}})
	frames, _, _ = ready(t, c)
	if got, want := sent(frames), []sentFrame{{frame.Data, 100, false}, {frame.Data, 101, true}}; !slices.Equal(got, want) {
		t.Fatalf("the answer to a Nack for 100 and 101: %+v, want %+v", got, want)
	}

	// The receivers' side (AnswerAckRequests): TestPromptAcksReceiver.
}

// A prompt frame that did not ask and became stable before its probe
// leaves nothing to ask for: the plain frames after it arm no probe (one
// asked every member for an Ack at once). Nor do a prompt frame's marks
// fall 2^32 frames behind (the state below, set by hand, is the one
// 2^32 plain frames after a prompt one leave): the next prompt frame
// sent with only plain ones in flight still asks.
func TestProposePromptStableLeavesNothingToAsk(t *testing.T) {
	c := newCore(t, testConfig(PBP2, 0, 3))
	now := t0 + 1
	send := func(prompt bool, msg string) []out {
		t.Helper()
		frames := proposeReady(t, c, now, prompt, msg)
		if len(frames) != 1 || frames[0].t != frame.Data {
			t.Fatalf("proposing %q: frames %+v, want one Data frame", msg, frames)
		}
		return frames
	}
	asks := func(f out) bool { return f.h.Flags&frame.FlagAckRequest != 0 }
	if f := send(true, "s"); !asks(f[0]) {
		t.Fatalf("the first prompt frame: %+v, want it to ask", f)
	}
	now++
	if f := send(true, "t"); asks(f[0]) {
		t.Fatalf("a prompt frame with one in flight that asked: %+v, want no ask", f)
	}
	for _, m := range []frame.MemberID{1, 2} {
		step(t, c, now, in{sender: m, seq: 99, acks: []uint32{102, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	}
	if c.inFlight() != 0 {
		t.Fatalf("%d frames in flight after both acks, want 0", c.inFlight())
	}
	now += Time(promptTail)
	c.Tick(now)
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("the probe with nothing in flight: %+v, want none", frames)
	}
	now++
	if f := send(false, "b"); asks(f[0]) {
		t.Fatalf("a plain frame: %+v, want no ask", f)
	}
	now += Time(promptTail)
	c.Tick(now)
	if frames, _, _ := ready(t, c); len(frames) != 0 {
		t.Fatalf("promptTail after a plain frame sent once the prompt ones were stable: %+v, want no probe", frames)
	}

	for _, m := range []frame.MemberID{1, 2} {
		step(t, c, now, in{sender: m, seq: 99, acks: []uint32{103, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	}
	c.promptTo, c.asked = c.stable+1, c.stable+1 // 2^32-1 frames behind
	now++
	send(false, "c")
	now++
	if f := send(true, "u"); !asks(f[0]) {
		t.Fatalf("a prompt frame with only a plain one in flight, 2^32 frames after the last prompt one: %+v, want it to ask", f)
	}
}

// proposeReady proposes msg to c at now (by ProposePrompt if prompt)
// and returns the frames its next Ready sends.
func proposeReady(t *testing.T, c *Core, now Time, prompt bool, msg string) []out {
	t.Helper()
	propose := c.Propose
	if prompt {
		propose = c.ProposePrompt
	}
	if err := propose(now, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	frames, _, _ := ready(t, c)
	return frames
}

// The acknowledgement matrix row of a member is the entry-wise maximum of
// every ack vector heard from it, whatever changed between two of them:
// only the sender's own entry (what a stream's Data frames change, which
// noteAcks takes alone), one other entry, several, none (a repeat), or
// entries back (an older frame arriving late). A random walk of the
// sender's vector, its frames taken newest or late, checked against that
// maximum after every frame, from senders whose own entry is either of a
// pair of entries or the odd last one, in groups of 5 and 8.
func TestAckMatrixRowIsMaxOfVectors(t *testing.T) {
	for _, tc := range []struct {
		n      int
		sender frame.MemberID
	}{{5, 2}, {5, 1}, {5, 4}, {8, 3}, {8, 6}} {
		n, sender := tc.n, tc.sender
		t.Run(fmt.Sprintf("members=%d/sender=%d", n, sender), func(t *testing.T) {
			c := newCore(t, testConfig(PBP2, 0, n))
			rng := rand.New(rand.NewPCG(uint64(sender), 19))
			cur := slices.Repeat([]uint32{100}, n)
			want := slices.Clone(cur)
			var sent [][]uint32
			for i := range 3000 {
				switch r := rng.IntN(10); {
				case r < 5: // a stream's frame: its own entry moves
					cur[sender]++
				case r < 7: // one other entry moves (never ours: nothing sent)
					cur[1+rng.IntN(n-1)] += uint32(1 + rng.IntN(3))
				case r < 8: // several move
					for s := 1; s < n; s++ {
						cur[s] += uint32(rng.IntN(2))
					}
				} // else a repeat of the last vector
				vec := slices.Clone(cur)
				sent = append(sent, vec)
				if len(sent) > 1 && rng.IntN(4) == 0 { // an older one arrives late
					vec = sent[len(sent)-1-rng.IntN(min(len(sent), 8))]
				}
				for s := range want {
					if frame.SeqLess(want[s], vec[s]) {
						want[s] = vec[s]
					}
				}
				if err := step(t, c, t0+Time(i+1), in{sender: sender, seq: 99, acks: vec, body: &frame.Empty{T: frame.Ack}}); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				for s := range n {
					if h, ok := c.Holds(sender, frame.MemberID(s)); !ok || h != want[s] {
						t.Fatalf("frame %d, vector %v: Holds(%d, %d) = %d, %v; want %d (row %v)", i, vec, sender, s, h, ok, want[s], want)
					}
				}
			}
		})
	}
}

// The premise of noteAcks' row (acks.go): the ack vectors one member
// sends in one core form a chain, each at least the one sent before it,
// entry by entry, so that the latest of them is the maximum of all. Every
// vector every member sends, over simulated runs of both protocols with
// loss, reordering, crashes, leaves, holds and relays, is checked against
// that member's previous one.
func TestSentAckVectorsFormAChain(t *testing.T) {
	type key struct {
		ep   int // the rogue's forged frames (sim_test.go) come from its own
		id   frame.MemberID
		inc  uint32
		base frame.MemberID
	}
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		s := newScenario(seed)
		group := 0x0bb0 + uint32(seed%7) // runScenario's
		last := map[key][]uint32{}
		var bad error
		r := runScenario(t, s, func(e testnet.Event) {
			if e.Kind != testnet.EventSend || bad != nil || len(e.Frame) < frame.EthernetHeaderLen {
				return
			}
			v, err := frame.ParseNoCRC(e.Frame[frame.EthernetHeaderLen:])
			if err != nil || v.Group() != group { // the rogue's foreign frames
				return
			}
			switch v.Type() {
			case frame.Data, frame.Ack, frame.Heartbeat, frame.Nack, frame.Leave, frame.ViewRelay:
			default:
				return
			}
			k := key{e.From, v.Sender(), v.Incarnation(), v.AckBase()}
			prev := last[k]
			vec := make([]uint32, v.AckCount())
			for i := range vec {
				vec[i] = v.Ack(i)
				if i < len(prev) && frame.SeqLess(vec[i], prev[i]) {
					bad = fmt.Errorf("member %d sent ack vector %v after %v (%v frame, seq %d, at %v)",
						k.id, vec[:i+1], prev, v.Type(), v.Seq(), e.Time)
				}
			}
			last[k] = vec
		})
		if bad != nil {
			t.Fatalf("%v: %v", s, bad)
		}
		if err := r.verdict(); err != nil {
			t.Fatalf("%v: %v", s, err)
		}
	}
}

// An id between members (one that left, say) has a slot in the ack
// vector that no member fills: every header carries 0 there. The row a
// core keeps of a peer starts as that peer's first vector would be, so
// that a pure receiver's vectors, whose own entry never moves, are taken
// by their first entry that differs: with InitialSeq 100 and a row
// starting at 100 in the gap, the gap's 0 made every vector of member 3
// look older than the row, and member 2 never learned that member 3
// holds its message.
func TestAckMatrixRowWithIDGap(t *testing.T) {
	ms := []frame.MemberInfo{
		{ID: 0, MAC: testMAC(0), Incarnation: 7},
		{ID: 2, MAC: testMAC(2), Incarnation: 7},
		{ID: 3, MAC: testMAC(3), Incarnation: 7},
	}
	cfg := func(self frame.MemberID) Config {
		return Config{Group: testGroup, Self: self, Members: ms, Mode: PBP2, InitialSeq: 100}
	}
	snd, rcv := newCore(t, cfg(2)), newCore(t, cfg(3))
	// carry steps every frame c sent into to.
	carry := func(c, to *Core, now Time) {
		t.Helper()
		for _, b := range c.Ready().Frames {
			eth, rest, err := frame.SplitEthernet(b, frame.EtherType)
			if err != nil {
				t.Fatal(err)
			}
			v, err := frame.ParseGroup(rest, testGroup)
			if err != nil {
				t.Fatal(err)
			}
			if err := to.Step(now, eth.Src(), eth.Dst(), v); err != nil {
				t.Fatal(err)
			}
		}
		c.Advance()
	}
	now := t0
	if err := snd.Propose(now, []byte("x")); err != nil {
		t.Fatal(err)
	}
	carry(snd, rcv, now)
	for range 20 { // the receiver's acknowledgement, whenever it is due
		now += Time(50 * Millisecond)
		rcv.Tick(now)
		carry(rcv, snd, now)
		snd.Tick(now)
		carry(snd, rcv, now)
	}
	if h, ok := rcv.Holds(3, 2); !ok || h != 101 {
		t.Fatalf("receiver: Holds(3, 2) = %d, %v; want 101", h, ok)
	}
	if h, ok := snd.Holds(3, 2); !ok || h != 101 {
		t.Errorf("sender: Holds(3, 2) = %d, %v; want 101 (member 3's acks heard)", h, ok)
	}
}

// TestCopyVec checks the ack row's copy at every vector length up to 12
// members: the 16-byte blocks of 4 to 8 members overlap, and must write
// exactly vec, nothing past it.
func TestCopyVec(t *testing.T) {
	for n := 0; n <= 12*frame.AckEntryLen; n += frame.AckEntryLen {
		vec := make([]byte, n)
		for i := range vec {
			vec[i] = byte(i + 1)
		}
		buf := bytes.Repeat([]byte{0xee}, n+16)
		copyVec(buf[:n], vec)
		if !bytes.Equal(buf[:n], vec) {
			t.Errorf("%d bytes: row % x, want % x", n, buf[:n], vec)
		}
		if want := bytes.Repeat([]byte{0xee}, 16); !bytes.Equal(buf[n:], want) {
			t.Errorf("%d bytes: wrote past the row: % x", n, buf[n:])
		}
	}
}

// A vector of another shape (another base, another count) leaves the row
// as it is, and noteAcks reports no entry for this member.
func TestNoteAcksOtherShape(t *testing.T) {
	c := newCore(t, Config{Group: testGroup, Self: 0, Members: testMembers(3), Mode: PBP2})
	p, _ := c.peer(1)
	view := func(base frame.MemberID, acks ...uint32) frame.View {
		t.Helper()
		h := frame.Header{Group: testGroup, Sender: 1, Seq: 1, AckBase: base, Acks: acks}
		b, err := frame.Append(nil, &h, &frame.Empty{T: frame.Ack})
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if ours, ok := c.noteAcks(p, view(0, 5, 6, 7)); !ok || ours != 5 {
		t.Fatalf("a vector of the group's shape: noteAcks = %d, %v; want 5, true", ours, ok)
	}
	want := fmt.Sprint(p.vec)
	for _, v := range []frame.View{view(1, 9, 9, 9), view(0, 9, 9), view(0, 9, 9, 9, 9), view(0x100, 9, 9, 9)} {
		if ours, ok := c.noteAcks(p, v); ok {
			t.Errorf("base %d, %d entries: noteAcks = %d, true; want not ok", v.AckBase(), v.AckCount(), ours)
		}
		if got := fmt.Sprint(p.vec); got != want {
			t.Errorf("base %d, %d entries: row %s, want %s (unchanged)", v.AckBase(), v.AckCount(), got, want)
		}
	}
}
