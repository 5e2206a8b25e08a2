package pbp

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// Can one turn's output point into a retention buffer that the same turn
// reuses (issue 19)? With Retain a frame's messages are delivered from
// its retention slot (keep copies the frame there; keepHeld gives the
// slot the reorder ring's buffer it waited in), and the slot of frame s
// is the slot of s+ringSize. Within one turn (Steps and Ticks, then
// Ready, read, Advance) a sender that counts this member delivers at most
// a window of frames here: it numbers s+Window only once every member
// acknowledged frame s, our acknowledgement goes out only in a Ready's
// frames, so the last one it heard names at most E, the next frame due
// when the turn began, and every frame delivered in the turn lies in
// [E, E+Window). The ring has a power of two >= Window slots, so no two
// of them share a slot, and a slot's previous buffer was handed out in
// an earlier turn, Advanced already; a slot whose buffer a layer pinned
// gets a new one. The tests below drive that worst case (a gap repaired
// behind a full window, the reorder ring's frames and in-order ones in
// one turn, a hold released, bundles, PBP1 and PBP2) and check every
// delivered message at the moment the Ready is read, and after Advance
// that the last window is retained: with a ring one slot smaller, or
// with a delivered buffer recycled before Advance, they fail.
//
// A sender that no longer counts us (it removed us: we were stalled past
// its FailureTimeout) was bounded by nothing: removedUs judged a frame
// against expected as it moved, so frames that arrived in order passed
// it however far they went, and a turn that read more than a window of
// them wrapped the ring. keep then copied a later frame into a buffer
// the same turn had handed out; it now gives that slot a new buffer.
// removedUs now judges against E and removes such a sender at E+Window
// (TestRemovedUsWithinOneTurn), but frames another member relays
// (Config.Relay) are judged against expected as it moves, so more than
// a window of them in one turn still reaches keep
// (TestRetainTurnBeyondWindow).

// turnMsgs is what member 0 sends in frame seq: one message (a lone
// Data frame) or a bundle of two or three, of sizes that vary. From 100
// to 163 each message is longer than the one in its place in any later
// frame: a frame copied into a retention slot that an earlier one left
// fits in place, so an overwrite is not hidden by append moving the copy
// to a new array.
// The messages are built once per seq (turnMemo): the tests read them
// at every frame they step and every delivery and retained frame they
// check. Nothing writes to them.
func turnMsgs(seq uint32) [][]byte {
	turnMemo.Lock()
	defer turnMemo.Unlock()
	ms, ok := turnMemo.m[seq]
	if !ok {
		ms = makeTurnMsgs(seq)
		turnMemo.m[seq] = ms
	}
	return ms
}

var turnMemo = struct {
	sync.Mutex
	m map[uint32][][]byte
}{m: map[uint32][][]byte{}}

func makeTurnMsgs(seq uint32) [][]byte {
	n := int(seq%3) + 1
	out := make([][]byte, n)
	for i := range out {
		size := int(seq*7+uint32(i)*13) % 50
		if seq-100 < 64 {
			size += 300 + 8*int(163-seq)
		}
		pad := strings.Repeat(string(rune('a'+seq%26)), size)
		out[i] = []byte(fmt.Sprintf("m%d.%d:%s", seq, i, pad))
	}
	return out
}

// turnFrame is member 0's frame seq as member 2 receives it.
func turnFrame(seq uint32, retx bool) in {
	ms := turnMsgs(seq)
	var body frame.Body = &frame.Payload{T: frame.Data, Data: ms[0]}
	if len(ms) > 1 {
		body = &frame.Bundle{T: frame.Data, Msgs: ms}
	}
	var fl frame.Flags
	if retx {
		fl = frame.FlagRetransmit
	}
	return in{sender: 0, seq: seq, flags: fl, acks: []uint32{100, 100, 100}, body: body}
}

// turnRig is member 2 of three with Retain, receiving member 0's frames
// in turns; member 1's acknowledgements of member 0 (needKeep) are fed
// as the test says.
type turnRig struct {
	t    *testing.T
	c    *Core
	now  Time
	next uint32 // the next frame of member 0 due for delivery
	pins []turnPin
	// allKept: every frame is retained (member 1 acknowledges none), so
	// the last window delivered must be (for a view change's relays).
	allKept bool
	relay   bool // member 0's frames come relayed by member 1
}

type turnPin struct {
	seq  uint32
	data []byte
	want []byte
}

func newTurnRig(t *testing.T, mode Mode, window int) *turnRig {
	cfg := testConfig(mode, 2, 3)
	cfg.Retain, cfg.Window = true, window
	return &turnRig{t: t, c: newCore(t, cfg), now: t0, next: 100}
}

// ack has member 1 acknowledge member 0's frames before a.
func (r *turnRig) ack(a uint32) {
	r.t.Helper()
	if err := step(r.t, r.c, r.now, in{sender: 1, seq: 99, acks: []uint32{a, 100, 100}, body: &frame.Empty{T: frame.Ack}}); err != nil {
		r.t.Fatal(err)
	}
}

// frames steps member 0's frames seqs in this turn.
func (r *turnRig) frames(seqs []uint32, retx bool) {
	r.t.Helper()
	for _, s := range seqs {
		f := turnFrame(s, retx)
		if r.relay {
			f = relayedBy1(r.t, f)
		}
		if err := step(r.t, r.c, r.now, f); err != nil {
			r.t.Fatalf("frame %d: %v", s, err)
		}
	}
}

// end ends the turn: every delivery of its Ready, read before Advance,
// must be the next message of member 0 as sent; the layer pins some
// (pin: every how many deliveries, 0 none). After Advance, pinned
// messages and retained frames must read as sent. It returns how many
// frames the turn delivered.
func (r *turnRig) end(what string, pin int) int {
	t := r.t
	t.Helper()
	rd := r.c.Ready()
	first, idx := r.next, 0
	for i, d := range rd.Deliveries {
		want := turnMsgs(r.next)
		if d.From != 0 || d.Seq != r.next || d.Index != idx || !bytes.Equal(d.Data, want[idx]) {
			t.Fatalf("%s: delivery %d of the turn is %d/%d/%d %q; want 0/%d/%d %q",
				what, i, d.From, d.Seq, d.Index, d.Data, r.next, idx, want[idx])
		}
		if pin > 0 && i%pin == 0 && r.c.Pin(0, d.Seq, d.Data) {
			r.pins = append(r.pins, turnPin{seq: d.Seq, data: d.Data, want: want[idx]})
		}
		if idx++; idx == len(want) {
			r.next, idx = r.next+1, 0
		}
	}
	if idx != 0 {
		t.Fatalf("%s: frame %d delivered in part", what, r.next)
	}
	r.c.Advance()
	for _, p := range r.pins {
		if !bytes.Equal(p.data, p.want) {
			t.Fatalf("%s: pinned message of frame %d reads %q, want %q", what, p.seq, p.data, p.want)
		}
	}
	from := first
	if r.allKept {
		from = max(r.next-uint32(r.c.cfg.Window), 100)
	}
	for s := from; s != r.next; s++ {
		data, bundled, ok := r.c.Retained(0, s)
		if !ok && r.allKept {
			t.Fatalf("%s: frame %d of the last window delivered (up to %d) not retained", what, s, r.next)
		}
		if !ok {
			continue
		}
		if ms := turnMsgs(s); bundled != (len(ms) > 1) || !bytes.Equal(data, bundleForm(ms)) {
			t.Fatalf("%s: Retained(%d) = %q (bundled %v), want %q", what, s, data, bundled, ms)
		}
	}
	return int(r.next - first)
}

// unpinAll ends the layer's pins.
func (r *turnRig) unpinAll() {
	for _, p := range r.pins {
		r.c.Unpin(0, p.seq)
	}
	r.pins = r.pins[:0]
}

// bundleForm is msgs as a frame's body carries them: a lone message as
// it is, a bundle with each message after its 2-byte length.
func bundleForm(msgs [][]byte) []byte {
	if len(msgs) == 1 {
		return msgs[0]
	}
	var b []byte
	for _, m := range msgs {
		b = append(b, byte(len(m)>>8), byte(len(m)))
		b = append(b, m...)
	}
	return b
}

// offsets returns base+o for each o.
func offsets(base uint32, os ...int) []uint32 {
	s := make([]uint32, len(os))
	for i, o := range os {
		s[i] = base + uint32(o)
	}
	return s
}

// span is base+from .. base+to-1, in order (from < to) or reversed.
func span(base uint32, from, to int, reverse bool) []uint32 {
	var s []uint32
	for o := from; o < to; o++ {
		s = append(s, base+uint32(o))
	}
	if reverse {
		for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
			s[i], s[j] = s[j], s[i]
		}
	}
	return s
}

// The honest worst cases, each run twice over so that the second pass
// finds every slot's buffer from the first: a full window in order in
// one turn; in reverse (all but the first wait in the reorder ring); a
// gap at the window's start repaired after the rest of the window came;
// the reorder ring's frames delivered in the same turn as in-order ones
// after them, or as frames that wait after them (in buffers from the
// pool); a hold of the whole window released at Tick. Every frame is
// kept (member 1 acknowledges nothing) or, in the mixed runs, the
// window's second half, and the layer pins some messages in some runs.
func TestRetainTurnWorstCase(t *testing.T) {
	type turnFn func(r *turnRig, base uint32, w int)
	cases := []struct {
		name  string
		turns []turnFn
	}{
		{"window in order", []turnFn{
			func(r *turnRig, b uint32, w int) { r.frames(span(b, 0, w, false), false) },
		}},
		{"window reversed", []turnFn{
			func(r *turnRig, b uint32, w int) { r.frames(span(b, 0, w, true), false) },
		}},
		{"gap repaired behind a window", []turnFn{
			func(r *turnRig, b uint32, w int) { r.frames(span(b, 1, w, false), false) },
			func(r *turnRig, b uint32, w int) { r.frames(offsets(b, 0), true) },
		}},
		{"held then in order", []turnFn{
			func(r *turnRig, b uint32, w int) { r.frames(span(b, 1, (w+1)/2, false), false) },
			func(r *turnRig, b uint32, w int) {
				r.frames(offsets(b, 0), true)
				r.frames(span(b, (w+1)/2, w, false), false)
			},
		}},
		{"in order, held, in order", []turnFn{
			func(r *turnRig, b uint32, w int) {
				r.frames(offsets(b, 0), false)
				r.frames(span(b, 2, w-1, true), false)
				r.frames(offsets(b, 1, w-1), true)
			},
		}},
		{"drained then held", []turnFn{
			func(r *turnRig, b uint32, w int) {
				r.frames(offsets(b, 1), false)
				r.frames(offsets(b, 0), true)
				r.frames(span(b, 3, w, false), false)
			},
			func(r *turnRig, b uint32, w int) { r.frames(offsets(b, 2), true) },
		}},
		{"hold released", []turnFn{
			func(r *turnRig, b uint32, w int) {
				r.c.HoldFrom(0, r.now.Add(Second))
				r.frames(span(b, 0, w, false), false)
			},
			func(r *turnRig, b uint32, w int) {
				r.c.ReleaseFrom(0)
				r.c.Tick(r.now)
			},
		}},
	}
	for _, mode := range []Mode{PBP1, PBP2} {
		for _, w := range []int{4, 5, 16} {
			for _, tc := range cases {
				for _, mix := range []string{"all kept", "half kept", "pinned"} {
					name := fmt.Sprintf("%v/window %d/%s/%s", mode, w, tc.name, mix)
					t.Run(name, func(t *testing.T) {
						r := newTurnRig(t, mode, w)
						r.allKept = mix != "half kept"
						pin := 0
						if mix == "pinned" {
							pin = 3
						}
						for pass := 0; pass < 3; pass++ {
							base := r.next
							for i, turn := range tc.turns {
								r.now += Time(Millisecond)
								if mix == "half kept" {
									// Member 1 holds the window's first
									// half: those frames are not kept.
									r.ack(base + uint32(w/2))
								}
								turn(r, base, w)
								r.end(fmt.Sprintf("pass %d turn %d", pass, i), pin)
							}
							if r.next != base+uint32(w) {
								t.Fatalf("pass %d: delivered up to %d, want %d", pass, r.next, base+uint32(w))
							}
							if pass == 1 {
								r.unpinAll()
							}
						}
						if st := r.c.Counters(); st.Kept == 0 {
							t.Fatalf("nothing kept: %+v", st)
						}
					})
				}
			}
		}
	}
}

// An honest sender at random: each turn it sends new frames up to a
// window past what this member acknowledged when the turn began, and the
// turn brings a random part of what is missing here, shuffled, some
// retransmitted, with old duplicates; member 1 acknowledges at random
// (some frames kept, some not); holds come and go; the layer pins and
// unpins; the core is frozen part way. Every delivery must read as sent
// when the Ready is read, and some turns must deliver a whole window.
func TestRetainTurnRandom(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	full := 0 // turns that delivered a whole window
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		for _, mode := range []Mode{PBP1, PBP2} {
			rng := rand.New(rand.NewPCG(seed, 0x19))
			w := []int{2, 4, 7, 8, 32}[rng.IntN(5)]
			r := newTurnRig(t, mode, w)
			sent := uint32(100)
			for turn := 0; turn < 60; turn++ {
				r.now += Time(rng.IntN(int(Millisecond)) + 1)
				e := r.next // acknowledged when the turn began
				if limit := e + uint32(w); sent != limit {
					sent += uint32(rng.IntN(int(limit-sent) + 1))
				}
				var seqs []uint32
				for s := e; s != sent; s++ {
					if rng.IntN(4) != 0 {
						seqs = append(seqs, s)
					}
				}
				if e > 100 && rng.IntN(3) == 0 {
					seqs = append(seqs, e-1-uint32(rng.IntN(int(min(e-100, uint32(w))))))
				}
				rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })
				switch rng.IntN(8) {
				case 0:
					r.c.HoldFrom(0, r.now.Add(Duration(rng.IntN(3))*Millisecond))
				case 1:
					r.c.ReleaseFrom(0)
				case 2:
					if turn > 30 {
						r.c.Freeze()
					}
				}
				for i := range seqs {
					if rng.IntN(5) == 0 {
						r.ack(max(sent-uint32(rng.IntN(w+1)), 100))
					}
					r.frames(seqs[i:i+1], rng.IntN(2) == 0)
				}
				if rng.IntN(2) == 0 {
					r.c.Tick(r.now)
				}
				if n := r.end(fmt.Sprintf("%v seed %d window %d turn %d", mode, seed, w, turn), rng.IntN(4)); n == w {
					full++
				}
				if rng.IntN(4) == 0 {
					r.unpinAll()
				}
			}
			if r.next == 100 {
				t.Fatalf("%v seed %d: nothing delivered", mode, seed)
			}
		}
	}
	if full == 0 {
		t.Fatal("no turn delivered a full window")
	}
}

// More than a window of a sender's frames in one turn, in order: since
// removedUs judges against the acknowledgement last sent, only frames
// relayed by another member (onRelay judges them against expected as it
// moves) come so. The retention slot of frame s is then the slot of
// s+Window in the same turn: a frame copied there overwrote the buffer
// frame s was delivered from, before the turn's Ready was read. Also
// when frame s waited in the reorder ring (its buffer became the slot's,
// and goes back to the pool only at Advance).
func TestRetainTurnBeyondWindow(t *testing.T) {
	rig := func(t *testing.T, mode Mode, w int) *turnRig {
		cfg := testConfig(mode, 2, 3)
		cfg.Retain, cfg.Relay, cfg.Window = true, true, w
		return &turnRig{t: t, c: newCore(t, cfg), now: t0, next: 100, relay: true}
	}
	for _, mode := range []Mode{PBP1, PBP2} {
		for _, w := range []int{4, 16} {
			t.Run(fmt.Sprintf("%v/window %d/in order", mode, w), func(t *testing.T) {
				r := rig(t, mode, w)
				r.frames(span(100, 0, 3*w+1, false), false)
				if n := r.end("three windows in one turn", 0); n != 3*w+1 {
					t.Fatalf("delivered %d frames, want %d", n, 3*w+1)
				}
				r.frames(span(r.next, 0, 2*w, false), false)
				r.end("two more windows", 0)
			})
			t.Run(fmt.Sprintf("%v/window %d/held first", mode, w), func(t *testing.T) {
				r := rig(t, mode, w)
				r.frames(offsets(100, 1), false)
				r.end("101 waits", 0)
				r.frames(offsets(100, 0), true)
				r.frames(span(100, 2, 2*w+2, false), false)
				// And one that waits for a gap, in a buffer from the
				// pool: not the one 101 was delivered from.
				r.frames(offsets(100, 2*w+3), false)
				if n := r.end("gap filled, two windows behind it", 0); n != 2*w+2 {
					t.Fatalf("delivered %d frames, want %d", n, 2*w+2)
				}
				r.frames(offsets(100, 2*w+2), true)
				r.end("the next gap filled", 0)
			})
		}
	}
}

// relayedBy1 is f, a frame of member 0's, as member 1 relays it
// (Config.Relay).
func relayedBy1(t *testing.T, f in) in {
	t.Helper()
	h := frame.Header{Flags: f.flags, Group: testGroup, Sender: f.sender, Incarnation: 7, Seq: f.seq, Acks: f.acks}
	b, err := frame.Append(nil, &h, f.body)
	if err != nil {
		t.Fatal(err)
	}
	return in{sender: 1, seq: 99, acks: []uint32{100, 100, 100}, body: &frame.ViewRelayBody{Frame: b}}
}

// A sender that removed us sends two windows in one turn, in order: the
// first frame at or past E+Window (E: the next due when the turn began,
// the most our acknowledgements that have left say) removes it, in that
// turn, as StalledRemovedUs; the window before it is delivered. Judged
// against expected as it moved, every frame passed and no turn removed
// it. Its Ack naming such a frame removes it too; an honest sender, a
// window per turn as our acknowledgement lets it, is never removed.
func TestRemovedUsWithinOneTurn(t *testing.T) {
	for _, mode := range []Mode{PBP1, PBP2} {
		for _, w := range []int{4, 16} {
			for _, last := range []string{"Data", "Ack"} {
				t.Run(fmt.Sprintf("%v/window %d/%s", mode, w, last), func(t *testing.T) {
					cfg := testConfig(mode, 2, 3)
					cfg.Window = w
					c := newCore(t, cfg)
					now := t0
					// Honest turns first: a window each, up to E+Window-1.
					e := uint32(100)
					for turn := range 3 {
						now += Time(Millisecond)
						for s := e; s != e+uint32(w); s++ {
							if err := step(t, c, now, dataFrom0(s, 0)); err != nil {
								t.Fatalf("honest turn %d, frame %d: %v", turn, s, err)
							}
						}
						if _, ds, evs := ready(t, c); len(ds) != w || len(evs) != 0 {
							t.Fatalf("honest turn %d: %d delivered, events %v; want %d, none", turn, len(ds), evs, w)
						}
						e += uint32(w)
					}
					now += Time(Millisecond)
					n := 2 * w
					if last == "Ack" {
						n = w
					}
					var errs []error
					for s := e; s != e+uint32(n); s++ {
						errs = append(errs, step(t, c, now, dataFrom0(s, 0)))
					}
					if last == "Ack" {
						// Its Ack names frame E+Window as the last it sent.
						errs = append(errs, step(t, c, now, in{sender: 0, seq: e + uint32(w), acks: []uint32{100, 100, 100}, body: &frame.Empty{T: frame.Ack}}))
					}
					for i, err := range errs {
						if i < w && err != nil {
							t.Fatalf("frame %d: %v", e+uint32(i), err)
						}
						if i > w && !errors.Is(err, ErrRemoved) {
							t.Fatalf("frame %d after the removal: %v, want %v", e+uint32(i), err, ErrRemoved)
						}
					}
					_, ds, evs := ready(t, c)
					want := Event{Kind: MemberStalled, Member: 0, At: now, Delivered: e + uint32(w), Reason: StalledRemovedUs}
					if len(evs) != 1 || evs[0] != want {
						t.Fatalf("events %v, want %v", evs, want)
					}
					if len(ds) != w || ds[0].Seq != e || ds[w-1].Seq != e+uint32(w)-1 {
						t.Fatalf("delivered %d frames (%v), want %d..%d", len(ds), ds, e, e+uint32(w)-1)
					}
					if st := c.Counters(); st.BeyondWindow != 1 || st.MembersFailed != 1 {
						t.Fatalf("BeyondWindow %d, MembersFailed %d; want 1, 1", st.BeyondWindow, st.MembersFailed)
					}
				})
			}
		}
	}
}
