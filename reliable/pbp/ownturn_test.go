package pbp

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// Can one turn (Advance to Advance) of our own core hand out a frame from
// a history slot that the same turn gives to a later frame (issue 19)?
// The history holds 2×Window slots (a power of two at least that): at
// any moment the frames it must keep are [stable, nextSeq+pending), at
// most Window in flight and Window waiting, so no two of them share a
// slot. Within a turn, though, numbering is not bounded by the ring: a
// member alone makes every frame stable as it is sent, and a Ready,
// Propose, Ready again (as the Stepper allows) numbers Window more each
// time; with others, a turn may retransmit the oldest frame (a Nack, or
// PBP1's resend timer), see the window open (their acks), number the
// Window frames that waited, and take Window more Proposes between Ready
// and Advance, into the slots of the frames it retransmitted. What keeps
// the turn's output intact is not a bound on numbering but where bytes
// are written: sending writes only the headers and CRC around a frame's
// body (in the slot, or apart when the frame went out already in this
// turn), and the only writer of a body is Propose, which gives a new
// frame a buffer of its own when its slot's buffer was handed out in
// this turn (sent.emitted) or a layer pinned it (Pin, as vtotal does for
// its own messages, read with Own). The test drives those worst cases
// and checks every frame of the turn's output, read before Advance,
// against what was proposed, and the layer's pinned Own bodies after
// their slots were taken. With the history one slot smaller (2×Window-1,
// indexed by remainder) it fails: the last waiting frame shares the
// oldest in-flight frame's slot, and the Nack's retransmission sends the
// wrong body; without the emitted check in Propose it fails too.

// ownMsg is message k this member proposes; a frame holds one message
// that starts a group (300 bytes and more: the next group's does not fit
// behind it) and up to two small ones bundled with it.
func ownMsg(k int) []byte {
	size := 40 + (k*13)%50
	if ownGroupStart(k) {
		size = 300 + (k*37)%100
	}
	return []byte(fmt.Sprintf("o%d:%s", k, strings.Repeat(string(rune('a'+k%26)), size)))
}

// Groups: 1, 2, 3, 1, 2, 3, ... messages; ownGroupStart reports whether
// message k starts one.
func ownGroupStart(k int) bool {
	for g, first := 0, 0; ; g++ {
		if k == first {
			return true
		}
		if first += g%3 + 1; first > k {
			return false
		}
	}
}

type ownRig struct {
	t     *testing.T
	c     *Core
	now   Time
	next  int               // the next message to propose
	seen  int               // messages seen in first transmissions
	first map[uint32][]byte // body of each frame's first transmission
	pins  []turnPin
}

// propose proposes n groups of messages.
func (r *ownRig) propose(groups int) {
	r.t.Helper()
	for g := 0; g < groups; {
		if err := r.c.Propose(r.now, ownMsg(r.next)); err != nil {
			r.t.Fatalf("Propose of message %d: %v", r.next, err)
		}
		if r.next++; ownGroupStart(r.next) {
			g++
		}
	}
}

// ready reads the Ready and has the layer read the body of every frame
// numbered since (Own), and pin every third, as vtotal pins its own
// messages (the others rely on the emitted check alone).
func (r *ownRig) ready(from uint32) {
	r.c.Ready()
	for s := from; s != r.c.Sent(); s++ {
		body, _, ok := r.c.Own(s)
		if !ok {
			r.t.Fatalf("Own(%d) of a frame numbered in this turn: not held", s)
		}
		if s%3 == 0 && r.c.Pin(r.c.cfg.Self, s, body) {
			r.pins = append(r.pins, turnPin{seq: s, data: body, want: append([]byte(nil), body...)})
		}
	}
}

// check checks every frame of the Ready (before Advance): each first
// transmission of Data carries the next messages proposed, in order, and
// each retransmission the body of its first; then Advance, and the
// pinned bodies must read as numbered.
func (r *ownRig) check(what string) {
	t := r.t
	t.Helper()
	rd := r.c.Ready()
	for i, f := range decodeFrames(t, rd.Frames) {
		if f.t != frame.Data {
			continue
		}
		var ms [][]byte
		var body []byte
		switch b := f.body.(type) {
		case *frame.Payload:
			ms, body = [][]byte{b.Data}, b.Data
		case *frame.Bundle:
			ms, body = b.Msgs, bundleForm(b.Msgs)
		}
		seq := f.h.Seq
		if f.h.Flags&frame.FlagRetransmit != 0 {
			if want, ok := r.first[seq]; !ok || !bytes.Equal(body, want) {
				t.Fatalf("%s: frame %d of the Ready, a retransmission of %d, carries %.40q..., want %.40q...", what, i, seq, body, want)
			}
			continue
		}
		if _, ok := r.first[seq]; ok {
			t.Fatalf("%s: frame %d of the Ready: %d sent twice as new", what, i, seq)
		}
		for j, m := range ms {
			if want := ownMsg(r.seen); !bytes.Equal(m, want) {
				t.Fatalf("%s: frame %d of the Ready, Data %d, message %d is %.40q..., want %.40q...", what, i, seq, j, m, want)
			}
			r.seen++
		}
		if !ownGroupStart(r.seen) {
			t.Fatalf("%s: Data %d ends before message %d, inside a group", what, seq, r.seen)
		}
		r.first[seq] = append([]byte(nil), body...)
	}
	r.c.Advance()
	for _, p := range r.pins {
		if !bytes.Equal(p.data, p.want) {
			t.Fatalf("%s: pinned Own body of frame %d reads %.40q..., want %.40q...", what, p.seq, p.data, p.want)
		}
	}
}

// nacks has member 1 ask for [from, to] first, and member 2 for from (the
// second asker: a broadcast, the frame's second copy in the turn).
func (r *ownRig) nacks(n int, from, to uint32) {
	r.t.Helper()
	acks := make([]uint32, n)
	for i := range acks {
		acks[i] = 100
	}
	for q, last := range []uint32{to, from} {
		nack := in{sender: frame.MemberID(q + 1), seq: 99, acks: acks, body: &frame.NackBody{Target: 0, Ranges: []frame.Range{{First: from, Last: last}}}}
		if err := step(r.t, r.c, r.now, nack); err != nil {
			r.t.Fatal(err)
		}
	}
}

// ackAll has every other member acknowledge all our frames before a.
func (r *ownRig) ackAll(n int, a uint32) {
	r.t.Helper()
	for q := 1; q < n; q++ {
		acks := make([]uint32, n)
		for i := range acks {
			acks[i] = 100
		}
		acks[0] = a
		if err := step(r.t, r.c, r.now, in{sender: frame.MemberID(q), seq: 99, acks: acks, body: &frame.Empty{T: frame.Ack}}); err != nil {
			r.t.Fatal(err)
		}
	}
}

func TestOwnTurnWorstCase(t *testing.T) {
	for _, mode := range []Mode{PBP1, PBP2} {
		for _, w := range []int{1, 4, 5, 8} {
			for _, n := range []int{1, 3} {
				t.Run(fmt.Sprintf("%v/window %d/%d members", mode, w, n), func(t *testing.T) {
					cfg := testConfig(mode, 0, n)
					cfg.Window, cfg.MaxPayload = w, 600
					r := &ownRig{t: t, c: newCore(t, cfg), now: t0, first: map[uint32][]byte{}}
					for pass := 0; pass < 3; pass++ {
						base := r.c.Sent()
						if n == 1 {
							// Alone: every frame is stable once sent, and
							// one turn numbers three windows.
							r.now += Time(Millisecond)
							for range 3 {
								from := r.c.Sent()
								r.propose(w)
								r.ready(from)
								if got := r.c.Sent() - from; got != uint32(w) {
									t.Fatalf("pass %d: a Ready numbered %d frames, want %d", pass, got, w)
								}
							}
							r.check(fmt.Sprintf("pass %d, three windows in one turn", pass))
							continue
						}
						// A window in flight, a window waiting.
						r.now += Time(Millisecond)
						r.propose(w)
						r.ready(base)
						r.check(fmt.Sprintf("pass %d, a window sent", pass))
						r.now += Time(Millisecond)
						r.propose(w)
						r.ready(base + uint32(w))
						r.check(fmt.Sprintf("pass %d, a window waiting", pass))
						// The turn: the oldest frames asked for, the
						// resend timer (PBP1: the whole window again),
						// the window opening, the waiting window
						// numbered, and a window proposed into the
						// slots just retransmitted.
						r.now += Time(Millisecond)
						r.nacks(n, base, base+uint32(w)-1)
						r.now += Time(DefaultResendTimeoutPBP2 << maxBackoff)
						r.c.Tick(r.now)
						r.ackAll(n, base+uint32(w))
						r.ready(base + uint32(w))
						if got := r.c.Sent(); got != base+2*uint32(w) {
							t.Fatalf("pass %d: sent up to %d, want %d", pass, got, base+2*uint32(w))
						}
						r.propose(w)
						r.ready(base + 2*uint32(w))
						r.check(fmt.Sprintf("pass %d, the worst turn", pass))
						// Drain: the rest is acknowledged and sent.
						r.now += Time(Millisecond)
						r.ackAll(n, base+2*uint32(w))
						r.ready(base + 2*uint32(w))
						r.check(fmt.Sprintf("pass %d, the next turn", pass))
						r.now += Time(Millisecond)
						r.ackAll(n, base+3*uint32(w))
						r.check(fmt.Sprintf("pass %d, all acknowledged", pass))
						if pass == 1 {
							for _, p := range r.pins {
								r.c.Unpin(r.c.cfg.Self, p.seq)
							}
							r.pins = r.pins[:0]
						}
					}
					if r.seen != r.next {
						t.Fatalf("%d messages sent, %d proposed", r.seen, r.next)
					}
					if st := r.c.Counters(); n > 1 && st.Retransmitted == 0 {
						t.Fatalf("nothing retransmitted: %+v", st)
					}
				})
			}
		}
	}
}
