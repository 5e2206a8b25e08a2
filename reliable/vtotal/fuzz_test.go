package vtotal

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/view"
)

// fakeInner is enough of a membership core for the layer's decoding.
type fakeInner struct{ core.Core }

func (fakeInner) Info() core.Info                         { return core.Info{MaxMessage: 1400} }
func (fakeInner) OwnOut() uint64                          { return 0 }
func (fakeInner) SentInView() uint32                      { return 0 }
func (fakeInner) HeldByAll(frame.MemberID) (uint32, bool) { return 0, false }

func newTestCore() *Core {
	c := New(fakeInner{})
	c.startView(0, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}, {ID: 2}}})
	return c
}

// What a member of the group sends reaches the layer as FIFO deliveries:
// any bytes must leave it consistent (no panic), and malformed ones are
// reported with ErrBadMessage.
func FuzzDeliveries(f *testing.F) {
	f.Add([]byte{kindData, 'h', 'i'}, []byte{kindOrder, 0, 0, 0, 7, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{}, []byte{kindOrder, 0, 0, 0, 7, 0, 1})
	f.Add([]byte{9}, []byte{kindOrder})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		c := newTestCore()
		c.fromGroup(core.Delivery{From: 1, Data: a})
		c.fromGroup(core.Delivery{From: 0, Data: b})
		c.drain()
		c.endView()
		if c.err != nil && !errors.Is(c.err, ErrBadMessage) {
			t.Fatalf("error %v does not wrap ErrBadMessage", c.err)
		}
	})
}

// FuzzDeliveryOrder: whatever the members' FIFO streams hold (data
// messages, Safe ones, order messages naming anything, in any mix), a
// view that ends without an error has delivered every data message
// exactly once, each member's in the order it sent them, each at the
// next place of one order, its bytes as sent. The input is a list of
// messages: sender (0, the sequencer, to 2) and length (u8 each), bytes.
func FuzzDeliveryOrder(f *testing.F) {
	f.Add([]byte{2, 3, kindData, 'b', '0', 1, 3, kindData, 'a', '0', 1, 3, kindData, 'a', '1',
		0, 17, kindOrder, 0, 0, 0, 7, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{1, 2, kindData, 'x', 0, 3, kindSafe, 's', '0', 0, 11, kindOrder, 0, 0, 0, 7, 0, 1, 0, 0, 0, 0,
		0, 11, kindOrder, 0, 0, 0, 7, 0, 1, 0, 0, 0, 0, 1, 2, kindSafe, 'y'})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newTestCore()
		var sent [3][][]byte // each member's data messages' payloads
		var seq [3]uint32
		for len(in) >= 2 {
			from, n := frame.MemberID(in[0]%3), min(int(in[1]), len(in)-2)
			m := in[2 : 2+n]
			in = in[2+n:]
			if len(m) > 0 && (m[0] == kindData || m[0] == kindSafe) {
				sent[from] = append(sent[from], m[1:])
			}
			seq[from]++
			c.fromGroup(core.Delivery{From: from, Seq: seq[from], Data: m})
			if c.err != nil {
				if !errors.Is(c.err, ErrBadMessage) {
					t.Fatalf("error %v does not wrap ErrBadMessage", c.err)
				}
				return
			}
			c.drain()
		}
		c.endView()
		if c.err != nil {
			t.Fatalf("the view ended with an error: %v", c.err)
		}
		var got [3]int
		for i, d := range c.dl {
			if d.Global != uint32(i+1) {
				t.Fatalf("delivery %d at global %d", i, d.Global)
			}
			if int(d.From) >= len(sent) || got[d.From] >= len(sent[d.From]) {
				t.Fatalf("delivered %q from %d, beyond the %d it sent", d.Data, d.From, got[min(int(d.From), 2)])
			}
			if k := got[d.From]; int(d.Seq) != k || !bytes.Equal(d.Data, sent[d.From][k]) {
				t.Fatalf("delivered %d's message %d, %q, where its message %d, %q, was due", d.From, d.Seq, d.Data, k, sent[d.From][k])
			}
			got[d.From]++
		}
		for id := range sent {
			if got[id] != len(sent[id]) {
				t.Fatalf("member %d sent %d data messages, %d were delivered", id, len(sent[id]), got[id])
			}
		}
	})
}

// The sequencer's order message names member 1's data messages; they are
// delivered in its order, and once a view ends what it did not name
// follows by sender id.
func TestOrderAndViewEnd(t *testing.T) {
	c := newTestCore()
	data := func(s string) []byte { return append([]byte{kindData}, s...) }
	c.fromGroup(core.Delivery{From: 2, Data: data("b0")})
	c.fromGroup(core.Delivery{From: 1, Data: data("a0")})
	c.fromGroup(core.Delivery{From: 1, Data: data("a1")})
	// The sequencer (member 0) orders a1's sender's first, then b0.
	c.fromGroup(core.Delivery{From: 0, Data: []byte{kindOrder, 0, 0, 0, 7, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}})
	c.drain()
	c.endView()
	var got []string
	for _, d := range c.dl {
		got = append(got, string(d.Data))
	}
	if want := []string{"b0", "a0", "a1"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	// A malformed order message says what was wrong.
	c = newTestCore()
	c.fromGroup(core.Delivery{From: 0, Data: []byte{kindOrder, 0, 0}})
	if c.Err() == nil || c.Err().Error() != "vtotal: malformed message: an order message of 3 bytes from member 0" {
		t.Fatalf("Err %v", c.Err())
	}
}

// The sequencer's own data messages are named by nobody: each takes its
// place in the order where it stands in the sequencer's FIFO stream,
// among its order messages. A message held past the Ready that brought it
// is copied (own): the FIFO group's buffer is reused after Advance.
func TestSequencerDataInPlace(t *testing.T) {
	c := New(fakeInner{})
	c.startView(2, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}, {ID: 2}}})
	data := func(s string) []byte { return append([]byte{kindData}, s...) }
	a1 := data("a1")
	c.fromGroup(core.Delivery{From: 1, Data: data("a0")})
	c.fromGroup(core.Delivery{From: 1, Data: a1})
	// The sequencer's stream: s0, an order naming member 1's first, s1.
	c.fromGroup(core.Delivery{From: 0, Data: data("s0")})
	c.fromGroup(core.Delivery{From: 0, Data: []byte{kindOrder, 0, 0, 0, 7, 0, 1, 0, 0, 0, 0}})
	c.fromGroup(core.Delivery{From: 0, Data: data("s1")})
	c.drain()
	c.own()
	var got []string
	for _, d := range c.dl {
		got = append(got, string(d.Data))
	}
	if want := "[s0 a0 s1]"; fmt.Sprint(got) != want {
		t.Fatalf("delivered %v, want %s", got, want)
	}
	if c.borrowed != 0 {
		t.Fatalf("%d held messages still borrowed after own", c.borrowed)
	}
	// a1, held, was copied: the FIFO group reusing its buffer changes
	// nothing.
	c.dl = c.dl[:0]
	copy(a1, "xxx")
	c.endView()
	if len(c.dl) != 1 || string(c.dl[0].Data) != "a1" {
		t.Fatalf("at the view's end delivered %d messages (%v); want a1", len(c.dl), c.dl)
	}
}

// scripted is a membership core whose Ready hands out the deliveries
// queued in it and whose acknowledgement matrix says stable.
type scripted struct {
	fakeInner
	ds     []core.Delivery
	stable uint32
}

func (s *scripted) Ready() core.Ready {
	rd := core.Ready{Deliveries: s.ds}
	s.ds = nil
	return rd
}
func (s *scripted) Advance()                                {}
func (s *scripted) Tick(core.Time)                          {}
func (s *scripted) Deadline() core.Time                     { return 0 }
func (s *scripted) HeldByAll(frame.MemberID) (uint32, bool) { return s.stable, true }

// Under Safe a message waits for every member's acks, so it is copied out
// of the FIFO group's buffer; the copies come from a pool, given back
// once the delivery that handed one out was carried out (Advance): the
// second message's copy reuses the first's buffer, and what was handed
// out stays intact until Advance.
func TestSafeCopiesFromPool(t *testing.T) {
	in := &scripted{}
	c := NewSafe(in)
	c.startView(1, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}}})
	var firstBuf *byte
	for i, text := range []string{"first", "other"} {
		seq := uint32(100 + i)
		c.Tick(0) // the first's buffer is free once a Tick or Step follows its Advance
		// The sequencer's own data message: in place, held until stable.
		in.ds = []core.Delivery{{From: 0, Seq: seq, Data: append([]byte{kindSafe}, text...)}}
		if rd := c.Ready(); len(rd.Deliveries) != 0 {
			t.Fatalf("%s: delivered %d before every member held it", text, len(rd.Deliveries))
		}
		c.Advance()
		in.stable = seq + 1
		rd := c.Ready()
		if len(rd.Deliveries) != 1 || string(rd.Deliveries[0].Data) != text {
			t.Fatalf("%s: delivered %+v once stable", text, rd.Deliveries)
		}
		p := unsafe.SliceData(rd.Deliveries[0].Data)
		if i == 0 {
			firstBuf = p
		} else if p != firstBuf {
			t.Fatal("the second copy did not reuse the first's buffer")
		}
		c.Advance()
	}
}

// recorder is a membership core in which every proposed message goes out
// at once; it records each, as the FIFO group frames it.
type recorder struct {
	fakeInner
	sent [][]byte
}

func (r *recorder) Propose(_ core.Time, m []byte) error {
	r.sent = append(r.sent, append([]byte(nil), m...))
	return nil
}
func (r *recorder) OwnOut() uint64      { return uint64(len(r.sent)) }
func (r *recorder) Ready() core.Ready   { return core.Ready{} }
func (r *recorder) Advance()            {}
func (r *recorder) Tick(core.Time)      {}
func (r *recorder) Deadline() core.Time { return 0 }

// A data message goes to the FIFO group as its kind byte and then the
// payload (the wire format of revision 3, unchanged now that pool buffers
// frame it), and is delivered here with exactly the payload, whatever the
// application does with its slice after Propose and whatever the pool
// buffer held before. A buffer handed out in a delivery stays unchanged
// until the Step or Tick after Advance, also when Propose is called
// meanwhile; from then on Propose reuses it instead of allocating.
func TestDataMessageFraming(t *testing.T) {
	in := &recorder{}
	c := New(in)
	c.startView(0, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}}})
	big := func(b byte) []byte { return bytes.Repeat([]byte{b}, c.Info().MaxMessage) }
	n := 0 // messages proposed
	propose := func(payload []byte) {
		t.Helper()
		m := append([]byte(nil), payload...)
		if err := c.Propose(0, m); err != nil {
			t.Fatalf("message %d: Propose: %v", n, err)
		}
		if want := append([]byte{kindData}, payload...); !bytes.Equal(in.sent[n], want) {
			t.Fatalf("message %d: proposed %d bytes % x…, want %d bytes % x…", n,
				len(in.sent[n]), in.sent[n][:min(8, len(in.sent[n]))], len(want), want[:min(8, len(want))])
		}
		n++
		for j := range m {
			m[j] = 'z' // the application reuses its slice
		}
	}
	seen := map[*byte]bool{} // the pool's buffers, after the first round
	for i, payload := range [][]byte{big('a'), []byte("short"), {}, big('b'), []byte("x")} {
		propose(payload)
		rd := c.Ready()
		if len(rd.Deliveries) != 1 || !bytes.Equal(rd.Deliveries[0].Data, payload) {
			t.Fatalf("round %d: delivered %d messages, want one of its %d bytes", i, len(rd.Deliveries), len(payload))
		}
		d := rd.Deliveries[0].Data
		// Proposed while d is out (before Advance) and after Advance
		// before a Tick: neither may take d's buffer.
		q := big('q')
		propose(q)
		c.Advance()
		propose(q)
		if !bytes.Equal(d, payload) {
			t.Fatalf("round %d: a Propose before the next Tick overwrote a delivery", i)
		}
		c.Tick(0)
		rd = c.Ready()
		if len(rd.Deliveries) != 2 || !bytes.Equal(rd.Deliveries[0].Data, q) || !bytes.Equal(rd.Deliveries[1].Data, q) {
			t.Fatalf("round %d: %d deliveries of the two proposed meanwhile", i, len(rd.Deliveries))
		}
		for _, b := range [][]byte{d[:cap(d)], rd.Deliveries[0].Data, rd.Deliveries[1].Data} {
			p := unsafe.SliceData(b)
			if i == 0 {
				seen[p] = true
			} else if !seen[p] {
				t.Fatalf("round %d: a message was framed in a new buffer, not one of the pool", i)
			}
		}
		c.Advance()
		c.Tick(0)
	}
}

// counter is a membership core in which every proposed message goes out
// at once, counted and not kept.
type counter struct {
	recorder
	n uint64
}

func (c *counter) Propose(core.Time, []byte) error { c.n++; return nil }
func (c *counter) OwnOut() uint64                  { return c.n }

// In steady state, sending a message and delivering it here allocates
// nothing: its framing buffer comes from the pool.
func TestProposeAllocatesNothing(t *testing.T) {
	in := &counter{}
	c := New(in)
	c.startView(0, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}}})
	m := bytes.Repeat([]byte{'m'}, c.Info().MaxMessage)
	turn := func() {
		if err := c.Propose(0, m); err != nil {
			t.Fatal(err)
		}
		if rd := c.Ready(); len(rd.Deliveries) != 1 || len(rd.Deliveries[0].Data) != len(m) {
			t.Fatalf("delivered %d messages, want one of %d bytes", len(rd.Deliveries), len(m))
		}
		c.Advance()
		c.Tick(0)
	}
	for range 10 {
		turn() // the pool and the layer's slices grow to their size
	}
	if n := testing.AllocsPerRun(1000, turn); n != 0 {
		t.Fatalf("%.1f allocations per message sent and delivered, want 0", n)
	}
}

// pinning is a scripted membership core that lets its deliveries be
// pinned (view.Core.Pin) and records the pins.
type pinning struct {
	scripted
	pins, unpins []pin
}

func (p *pinning) Pin(view uint32, id frame.MemberID, seq uint32, data []byte) bool {
	p.pins = append(p.pins, pin{view, id, seq})
	return true
}
func (p *pinning) Unpin(view uint32, id frame.MemberID, seq uint32) {
	p.unpins = append(p.unpins, pin{view, id, seq})
}

// Under Safe a message held beyond its turn stays where the FIFO group
// delivered it (its retained copy of the frame), pinned, instead of
// being copied: the delivery hands out the same bytes, and the frame is
// unpinned at the Step or Tick after the delivery was carried out, not
// before. A membership core that cannot pin gets a copy
// (TestSafeCopiesFromPool).
func TestSafePinsHeldMessages(t *testing.T) {
	in := &pinning{}
	c := NewSafe(in)
	c.startView(1, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}}})
	c.Tick(0)
	fifo := append([]byte{kindSafe}, "held"...)
	in.ds = []core.Delivery{{From: 0, Seq: 100, Data: fifo}}
	if rd := c.Ready(); len(rd.Deliveries) != 0 {
		t.Fatalf("delivered %d before every member held it", len(rd.Deliveries))
	}
	if want := []pin{{7, 0, 100}}; !slices.Equal(in.pins, want) {
		t.Fatalf("pins %v, want %v", in.pins, want)
	}
	c.Advance()
	c.Tick(1)
	in.stable = 101
	rd := c.Ready()
	if len(rd.Deliveries) != 1 || unsafe.SliceData(rd.Deliveries[0].Data) != &fifo[dataHeader] {
		t.Fatalf("delivered %+v, want the FIFO group's own bytes of the message", rd.Deliveries)
	}
	c.Advance()
	if len(in.unpins) != 0 {
		t.Fatalf("unpinned %v before the Step or Tick after the delivery", in.unpins)
	}
	c.Tick(2)
	if want := []pin{{7, 0, 100}}; !slices.Equal(in.unpins, want) {
		t.Fatalf("unpins %v after the delivery, want %v", in.unpins, want)
	}
}

// The membership core frames this member's messages for the layer.
var (
	_ framer = (*view.Core)(nil)
	_ pinner = (*view.Core)(nil)
)

// watched is scripted with each member's acknowledgement of sender 0
// (holds, members 0 and 1) and the membership core's stability calls
// counted: walks of the view's members (HeldByAll, HeldByAllLow) and
// single reads (HeldBy).
type watched struct {
	scripted
	holds        [2]uint32
	walks, reads int
}

func (w *watched) HeldByAll(s frame.MemberID) (uint32, bool) {
	next, _, ok := w.HeldByAllLow(s)
	return next, ok
}

func (w *watched) HeldByAllLow(s frame.MemberID) (uint32, frame.MemberID, bool) {
	w.walks++
	if s != 0 {
		return 0, frame.NoMember, false
	}
	low := frame.MemberID(0)
	if frame.SeqLess(w.holds[1], w.holds[0]) {
		low = 1
	}
	return w.holds[low], low, true
}

func (w *watched) HeldBy(m, s frame.MemberID) (uint32, bool) {
	w.reads++
	if s != 0 || m > 1 {
		return 0, false
	}
	return w.holds[m], true
}

// Under Safe the order's head waits for the member whose acks hold
// stability back; turns in which that member's ack did not move past it
// skip the drain (one read of that member's ack, no walk of the view),
// also when another member's ack moves; the turn in which it does
// delivers, and the next wait is on the member then lowest.
func TestSafeDrainWaitsForLowMember(t *testing.T) {
	in := &watched{holds: [2]uint32{101, 100}}
	c := NewSafe(in)
	c.startView(1, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}}})
	in.ds = []core.Delivery{
		{From: 0, Seq: 100, Data: []byte{kindSafe, 'a'}},
		{From: 0, Seq: 101, Data: []byte{kindSafe, 'b'}},
	}
	ready := func() string {
		rd := c.Ready()
		s := ""
		for _, d := range rd.Deliveries {
			s += string(d.Data)
		}
		c.Advance()
		return s
	}
	if got := ready(); got != "" {
		t.Fatalf("delivered %q before member 1 held it", got)
	}
	for i := range 10 {
		in.holds[0] = 102 + uint32(i) // not the member waited for
		if got := ready(); got != "" {
			t.Fatalf("turn %d: delivered %q before member 1 held it", i, got)
		}
	}
	if in.walks != 1 || c.drains != 1 || in.reads != 10 {
		t.Fatalf("waiting turns: %d walks, %d drains, %d reads; want 1, 1, 10", in.walks, c.drains, in.reads)
	}
	in.holds = [2]uint32{101, 101} // member 1 holds a, member 0 fell back
	if got := ready(); got != "a" {
		t.Fatalf("delivered %q once member 1 held a; want a", got)
	}
	if c.wait.m != 0 || c.wait.next != 102 {
		t.Fatalf("waiting for member %d to hold %d; want member 0 to hold 102", c.wait.m, c.wait.next)
	}
	in.holds = [2]uint32{102, 102}
	if got := ready(); got != "b" {
		t.Fatalf("delivered %q once all held b; want b", got)
	}
	if c.drains != 3 {
		t.Fatalf("%d drains; want 3", c.drains)
	}
}

// levels runs the layer over a scripted membership core of two members,
// member 1 this one and 0 the sequencer, whose own data messages take
// their place in its stream: each turn steps deliveries ds of the FIFO
// group with stability (HeldByAll) at stable, and returns what the
// total order delivered.
type levels struct {
	in *scripted
	c  *Core
}

func newLevels(safe bool) *levels {
	in := &scripted{}
	c := New(in)
	if safe {
		c = NewSafe(in)
	}
	c.startView(1, &core.ViewInfo{ID: 7, Members: []frame.MemberInfo{{ID: 0}, {ID: 1}}})
	return &levels{in, c}
}

func (l *levels) turn(stable uint32, ds ...core.Delivery) string {
	l.in.ds, l.in.stable = ds, stable
	rd := l.c.Ready()
	s := ""
	for _, d := range rd.Deliveries {
		s += string(d.Data)
	}
	l.c.Advance()
	return s
}

// A Safe message holds every message after it in the order, of either
// level, until every member holds it and its place; the Agreed message
// behind it then comes at once, in the same turn. In an Agreed group and
// in a Safe one alike.
func TestAgreedBehindSafeWaits(t *testing.T) {
	for _, safe := range []bool{false, true} {
		l := newLevels(safe)
		got := l.turn(100,
			core.Delivery{From: 0, Seq: 100, Data: []byte{kindSafe, 'S'}},
			core.Delivery{From: 0, Seq: 101, Data: []byte{kindData, 'a'}})
		if got != "" {
			t.Fatalf("safe group %v: delivered %q before every member held the Safe message", safe, got)
		}
		if got := l.turn(100); got != "" {
			t.Fatalf("safe group %v: delivered %q while the Safe message is not stable", safe, got)
		}
		if got := l.turn(101); got != "Sa" {
			t.Fatalf("safe group %v: delivered %q once the Safe message was stable; want Sa", safe, got)
		}
	}
}

// An Agreed message waits for its place in the order alone, not for
// stability, in a Safe group as in an Agreed one; a Safe message after
// it waits.
func TestAgreedAloneDoesNotWait(t *testing.T) {
	for _, safe := range []bool{false, true} {
		l := newLevels(safe)
		got := l.turn(0,
			core.Delivery{From: 0, Seq: 100, Data: []byte{kindData, 'a'}},
			core.Delivery{From: 0, Seq: 101, Data: []byte{kindData, 'b'}},
			core.Delivery{From: 0, Seq: 102, Data: []byte{kindSafe, 'S'}})
		if got != "ab" {
			t.Fatalf("safe group %v: delivered %q with nothing stable; want the Agreed ab at once", safe, got)
		}
		if got := l.turn(103); got != "S" {
			t.Fatalf("safe group %v: delivered %q once stable; want S", safe, got)
		}
	}
}

// ProposeLevel frames a message with the kind byte of its level, and
// Propose with the group's: kindSafe in a Safe group, kindData in an
// Agreed one.
func TestProposeLevelKind(t *testing.T) {
	for _, safe := range []bool{false, true} {
		r := &recorder{}
		c := New(r)
		if safe {
			c = NewSafe(r)
		}
		c.Propose(0, []byte("g"))
		c.ProposeLevel(0, []byte("s"), true)
		c.ProposeLevel(0, []byte("a"), false)
		want := [][]byte{{kindData, 'g'}, {kindSafe, 's'}, {kindData, 'a'}}
		if safe {
			want[0][0] = kindSafe
		}
		for i, w := range want {
			if !bytes.Equal(r.sent[i], w) {
				t.Fatalf("safe group %v: message %d framed % x; want % x", safe, i, r.sent[i], w)
			}
		}
	}
}
