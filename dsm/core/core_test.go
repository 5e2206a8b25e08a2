package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

func newCore(t testing.TB, self frame.MemberID, max int, unbuffered bool) *Core {
	t.Helper()
	c, err := New(Config{Self: self, Members: []frame.MemberID{1, 2, 3}, MaxMessage: max, Unbuffered: unbuffered})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// drain takes the outbox, decoding every message.
func drain(t testing.TB, c *Core) []Message {
	t.Helper()
	var out []Message
	for {
		b, ok := c.Next()
		if !ok {
			return out
		}
		if len(b) > c.MaxMessage() {
			t.Fatalf("queued a %d-byte message, MaxMessage is %d", len(b), c.MaxMessage())
		}
		m, err := Decode(bytes.Clone(b))
		if err != nil {
			t.Fatalf("queued a message that does not decode: %v", err)
		}
		out = append(out, m)
		c.Sent()
	}
}

func locations(m Message) (n int) {
	m.Records(func(r Record) { n += r.Count() })
	return n
}

// Buffering (thesis §5.1): a segment's writes collect into messages no
// larger than MaxMessage; consecutive writes extend one record.
func TestBuffering(t *testing.T) {
	const max = 200
	c := newCore(t, 1, max, false)
	s, err := c.Create(1, Geometry{Locations: 1000, LocationSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, c) // the announcement
	v := make([]byte, 8)
	for i := range 100 { // consecutive: one record per message
		binary.BigEndian.PutUint64(v, uint64(i))
		if err := c.Write(s, i, v); err != nil {
			t.Fatal(err)
		}
	}
	c.FlushAll()
	msgs := drain(t, c)
	// (200-8-6)/8 = 23 locations per message.
	if len(msgs) != 5 || locations(msgs[0]) != 23 || locations(msgs[4]) != 100-4*23 {
		t.Fatalf("100 consecutive writes: %d messages, first with %d locations", len(msgs), locations(msgs[0]))
	}
	for range 100 { // scattered: a record each, 14 bytes per write
		if err := c.Write(s, 999, v); err != nil {
			t.Fatal(err)
		}
		if err := c.Write(s, 500, v); err != nil {
			t.Fatal(err)
		}
	}
	c.FlushAll()
	msgs = drain(t, c)
	// (200-8)/14 = 13 records per message.
	if len(msgs) != 16 || locations(msgs[0]) != 13 {
		t.Fatalf("200 scattered writes: %d messages, first with %d locations", len(msgs), locations(msgs[0]))
	}
	// Unbuffered: a message per write.
	u := newCore(t, 1, max, true)
	su, _ := u.Create(1, Geometry{Locations: 10, LocationSize: 8})
	drain(t, u)
	for i := range 5 {
		u.Write(su, i, v)
	}
	if msgs := drain(t, u); len(msgs) != 5 {
		t.Fatalf("unbuffered: %d messages for 5 writes", len(msgs))
	}
}

// Every buffer is flushed before a synchronisation message, and a bulk
// write first flushes its segment's buffer (thesis §2.3.2, §5.1.1).
func TestFlushBeforeSync(t *testing.T) {
	c := newCore(t, 1, 1400, false)
	a, _ := c.Create(1, Geometry{Locations: 10, LocationSize: 8})
	b, _ := c.Create(2, Geometry{Locations: 10, LocationSize: 4})
	drain(t, c)
	c.Write(a, 1, make([]byte, 8))
	c.Write(b, 2, make([]byte, 4))
	c.EnterBarrier(7)
	var types []Type
	for _, m := range drain(t, c) {
		types = append(types, m.Type)
	}
	if len(types) != 2 || types[0] != TypeUpdate || types[1] != TypeUpdateBarrier {
		t.Fatalf("barrier: outbox %v, want both updates, the barrier riding on the last", types)
	}
	c.BarrierPassed()
	c.Write(a, 1, make([]byte, 8))
	if _, err := c.WriteBulk(a, 0, make([]byte, 80), false); err != nil {
		t.Fatal(err)
	}
	msgs := drain(t, c)
	if len(msgs) != 2 || locations(msgs[0]) != 1 || locations(msgs[1]) != 10 {
		t.Fatalf("bulk write: %d messages", len(msgs))
	}
	c.Write(b, 0, make([]byte, 4))
	c.RequestLock(3)
	msgs = drain(t, c)
	if len(msgs) != 2 || msgs[0].Type != TypeUpdate || msgs[1].Type != TypeLockRequest {
		t.Fatalf("lock request: outbox %+v", msgs)
	}
}

// A barrier arrival rides on the last queued update only when it fits and
// that message is not being sent (Next handed it out); otherwise it is a
// Barrier message of its own. Either way a peer sees the updates, then
// the arrival.
func TestBarrierRidesOnUpdate(t *testing.T) {
	const max = 100
	c := newCore(t, 1, max, false)
	peer := newCore(t, 2, max, false)
	s, _ := c.Create(1, Geometry{Locations: 100, LocationSize: 4})
	for _, m := range drain(t, c) {
		if err := peer.Receive(1, m.Append(nil)); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := peer.Join(1, Geometry{Locations: 100, LocationSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, want []Type, seq uint32) {
		t.Helper()
		var types []Type
		for {
			b, ok := c.Next()
			if !ok {
				break
			}
			m, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			types = append(types, m.Type)
			if err := peer.Receive(1, b); err != nil {
				t.Fatalf("%s: peer refused %v: %v", name, m.Type, err)
			}
			c.Sent()
		}
		if fmt.Sprint(types) != fmt.Sprint(want) {
			t.Fatalf("%s: outbox %v, want %v", name, types, want)
		}
		if p := peer.peer(1); p.barriers != seq {
			t.Fatalf("%s: peer counted %d barriers from member 1, want %d", name, p.barriers, seq)
		}
		if !bytes.Equal(ps.Memory(), s.Memory()) {
			t.Fatalf("%s: peer's memory differs", name)
		}
		c.inBarrier = false
		// The peer crosses too (WC holds the messages of a member that
		// is a barrier ahead of it).
		peer.barriers = seq
	}
	v := []byte{1, 2, 3, 4}
	// Nothing buffered: a Barrier of its own.
	c.EnterBarrier(1)
	check("empty", []Type{TypeBarrier}, 1)
	// One write: it carries the barrier.
	c.Write(s, 3, v)
	c.EnterBarrier(2)
	check("one write", []Type{TypeUpdateBarrier}, 2)
	// A full buffer (no room for the trailer): separate messages.
	for i := range 18 {
		c.Write(s, 2*i, v) // separate records, 10 bytes each: 9 (98 bytes) per message
	}
	c.EnterBarrier(3)
	check("full", []Type{TypeUpdate, TypeUpdate, TypeBarrier}, 3)
	// The update at the head is being sent: it is not touched.
	c.Write(s, 50, []byte{5, 6, 7, 8})
	c.FlushAll()
	b, _ := c.Next()
	before := bytes.Clone(b)
	c.EnterBarrier(4)
	if !bytes.Equal(b, before) {
		t.Fatal("a message being sent was changed")
	}
	check("taken", []Type{TypeUpdate, TypeBarrier}, 4)
	if got := c.Counters().Barriers; got != 4 {
		t.Fatalf("Barriers = %d, want 4", got)
	}
}

// A TypeUpdateBarrier whose barrier seq is out of order is refused whole:
// no memory changes.
func TestUpdateBarrierOutOfOrder(t *testing.T) {
	c := newCore(t, 1, 1400, false)
	if err := c.Receive(2, AppendSegment(nil, 7, Geometry{Locations: 4, LocationSize: 4}, true)); err != nil {
		t.Fatal(err)
	}
	s, _ := c.Join(7, Geometry{Locations: 4, LocationSize: 4})
	msg := AppendUpdateHeader(nil, TypeUpdate, 7, 4)
	msg = AppendBarrierTrailer(AppendRecord(msg, 0, 1, []byte{9, 9, 9, 9}), 1, 2)
	err := c.Receive(2, msg)
	if err == nil || !strings.Contains(err.Error(), "barrier message 2 from member 2, want 1") {
		t.Fatalf("error %v", err)
	}
	if !bytes.Equal(s.Memory(), make([]byte, 16)) {
		t.Fatal("memory changed")
	}
}

// A bulk write larger than a message goes out in as few messages as fit,
// and a location as large as a message allows fits.
func TestBulkSplitsAndLargestLocation(t *testing.T) {
	const max = 1000
	c := newCore(t, 1, max, false)
	s, _ := c.Create(1, Geometry{Locations: 1000, LocationSize: 10})
	drain(t, c)
	vals := make([]byte, 10*1000)
	for i := range vals {
		vals[i] = byte(i)
	}
	if n, err := c.WriteBulk(s, 0, vals, false); err != nil || n != 1000 {
		t.Fatal(n, err)
	}
	msgs := drain(t, c)
	per := (max - UpdateOverhead) / 10
	if len(msgs) != (1000+per-1)/per {
		t.Fatalf("%d messages for 10000 bytes at %d locations each", len(msgs), per)
	}
	// Applied at another member, they rebuild the range.
	r := newCore(t, 2, max, false)
	if err := r.Receive(1, AppendSegment(nil, 1, Geometry{Locations: 1000, LocationSize: 10}, true)); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := r.Receive(1, m.Append(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(r.segs[1].Memory(), vals) {
		t.Fatal("bulk write applied differs from the values written")
	}
	big, err := c.Create(2, Geometry{Locations: 2, LocationSize: max - UpdateOverhead})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	c.Write(big, 1, make([]byte, max-UpdateOverhead))
	c.Write(big, 0, make([]byte, max-UpdateOverhead))
	if msgs := drain(t, c); len(msgs) != 2 {
		t.Fatalf("two full-frame locations: %d messages", len(msgs))
	}
	if _, err := c.Create(3, Geometry{Locations: 1, LocationSize: max - UpdateOverhead + 1}); err == nil {
		t.Fatal("a location larger than a message was accepted")
	}
}

// deliverAll drains cores[from] and hands each message to every other core,
// as from member from+1.
func deliverAll(t *testing.T, cores []*Core, from int) {
	t.Helper()
	for _, m := range drain(t, cores[from]) {
		for to := range cores {
			if to != from {
				if err := cores[to].Receive(frame.MemberID(from+1), m.Append(nil)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// Ricart–Agrawala: two requests with equal timestamps — the lower id goes
// first; the other's answer waits for the release.
func TestLockTieBreak(t *testing.T) {
	cores := []*Core{newCore(t, 1, 1400, false), newCore(t, 2, 1400, false), newCore(t, 3, 1400, false)}
	deliver := func(from int) { deliverAll(t, cores, from) }
	cores[0].RequestLock(5)
	cores[1].RequestLock(5)
	deliver(0)
	deliver(1)
	deliver(2)
	deliver(0)
	deliver(1)
	if !cores[0].Holding(5) || cores[1].Holding(5) {
		t.Fatalf("equal timestamps: member 1 holds %v, member 2 holds %v; want member 1 only", cores[0].Holding(5), cores[1].Holding(5))
	}
	if err := cores[1].RequestLock(6); !errors.Is(err, ErrSecondLock) {
		t.Fatalf("second request while requesting: %v", err)
	}
	if err := cores[0].Unlock(5); err != nil {
		t.Fatal(err)
	}
	deliver(0)
	if !cores[1].Holding(5) {
		t.Fatal("member 2 did not get the lock after member 1 released it")
	}
	// A member that goes away no longer holds anyone up.
	cores[2].RequestLock(5)
	deliver(2)
	cores[2].MemberGone(2)
	deliver(0)
	if !cores[2].Holding(5) {
		t.Fatal("member 3 waits for a member that left")
	}
}

// A member removed as failed that comes back (reliable.Total's
// MemberReturned) still gets the reply deferred to it before it went, so
// its Lock does not wait forever, and is waited for again.
func TestLockMemberBack(t *testing.T) {
	cores := []*Core{newCore(t, 1, 1400, false), newCore(t, 2, 1400, false), newCore(t, 3, 1400, false)}
	deliver := func(from int) { deliverAll(t, cores, from) }
	cores[0].RequestLock(5)
	deliver(0)
	deliver(1)
	deliver(2)
	if !cores[0].Holding(5) {
		t.Fatal("member 1 did not get the lock")
	}
	cores[1].RequestLock(5)
	deliver(1) // member 1 defers its answer
	deliver(2)
	cores[0].MemberGone(2)
	if live := cores[0].Live(); len(live) != 2 {
		t.Fatalf("live %v after member 2 failed", live)
	}
	cores[0].MemberBack(2)
	if live := cores[0].Live(); len(live) != 3 {
		t.Fatalf("live %v after member 2 returned", live)
	}
	if err := cores[0].Unlock(5); err != nil {
		t.Fatal(err)
	}
	deliver(0)
	if !cores[1].Holding(5) {
		t.Fatal("member 2 waits for the reply member 1 deferred before member 2 was removed and taken back")
	}
	// Member 1 waits for member 2 again.
	cores[0].RequestLock(5)
	deliver(0)
	deliver(2)
	if cores[0].Holding(5) {
		t.Fatal("member 1 holds the lock member 2 holds")
	}
	cores[1].Unlock(5)
	deliver(1)
	if !cores[0].Holding(5) {
		t.Fatal("member 1 did not get the lock after member 2 released it")
	}
}

// Zero copy: an update is applied from the received message into segment
// memory without allocating; a buffered write allocates nothing once the
// outbox's buffers exist.
func TestZeroAllocs(t *testing.T) {
	r := newCore(t, 2, 1400, false)
	r.Receive(1, AppendSegment(nil, 1, Geometry{Locations: 1000, LocationSize: 8}, true))
	msg := AppendUpdateHeader(nil, TypeUpdate, 1, 8)
	for i := range 50 {
		msg = AppendRecord(msg, i*3, 2, make([]byte, 16))
	}
	if a := testing.AllocsPerRun(1000, func() {
		if err := r.Receive(1, msg); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("applying an update: %.1f allocations", a)
	}
	c := newCore(t, 1, 1400, false)
	s, _ := c.Create(1, Geometry{Locations: 1000, LocationSize: 8})
	v := make([]byte, 8)
	i := 0
	write := func() {
		c.Write(s, (i*7)%1000, v)
		i++
		for c.Pending() > 0 {
			c.Sent()
		}
	}
	for range 1000 {
		write()
	}
	if a := testing.AllocsPerRun(1000, write); a != 0 {
		t.Errorf("a buffered write: %.2f allocations", a)
	}
}

// BenchmarkApply: applying a full update message of 8-byte locations (one
// record of 180 consecutive locations, as a bulk or a run of writes
// makes) and of scattered ones (100 records of one location).
func BenchmarkApply(b *testing.B) {
	for _, c := range []struct {
		name    string
		records int
		count   int
	}{{"run", 1, 180}, {"scattered", 100, 1}} {
		b.Run(c.name, func(b *testing.B) {
			r := newCore(b, 2, 1456, false)
			r.Receive(1, AppendSegment(nil, 1, Geometry{Locations: 1000, LocationSize: 8}, true))
			msg := AppendUpdateHeader(nil, TypeUpdate, 1, 8)
			for i := range c.records {
				msg = AppendRecord(msg, i*3, c.count, make([]byte, 8*c.count))
			}
			b.SetBytes(int64(8 * c.records * c.count))
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Receive(1, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrite: one buffered 8-byte write, consecutive or scattered.
func BenchmarkWrite(b *testing.B) {
	for _, stride := range []int{1, 7} {
		b.Run(fmt.Sprintf("stride%d", stride), func(b *testing.B) {
			c := newCore(b, 1, 1456, false)
			s, _ := c.Create(1, Geometry{Locations: 1 << 16, LocationSize: 8})
			v := make([]byte, 8)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				c.Write(s, (i*stride)&(1<<16-1), v)
				i++
				for c.Pending() > 0 {
					c.Sent()
				}
			}
		})
	}
}

// Issue 21: a process admitted into the running group is an outsider:
// one Refuse tells it how far Self is, its messages are dropped without
// counting as bad, and the process refused takes the first Refuse naming
// it as its *LateJoinError.
func TestOutsiderRefused(t *testing.T) {
	c := newCore(t, 1, 1400, false)
	if err := c.EnterBarrier(7); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	for _, p := range []frame.MemberID{2, 3} {
		if err := c.Receive(p, AppendBarrier(nil, 7, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := c.BarrierPassed(); !ok || err != nil {
		t.Fatalf("barrier 7: %v, %v", ok, err)
	}
	if c.Outsider(2, true) || c.Outsider(1, true) {
		t.Fatal("a member (or Self) taken as an outsider")
	}
	if !c.Outsider(4, true) || c.Outsider(4, true) {
		t.Fatal("outsider 4: want new once")
	}
	out := drain(t, c)
	if len(out) != 1 || out[0].Type != TypeRefuse || out[0].To != 4 || out[0].Crossed != 1 {
		t.Fatalf("queued %+v, want one Refuse of member 4 after 1 barrier", out)
	}
	if !c.Outsider(5, false) || len(drain(t, c)) != 0 {
		t.Fatal("outsider 5 without refuse: want recorded, nothing queued")
	}
	for _, from := range []frame.MemberID{4, 5} {
		if err := c.Receive(from, AppendSegment(nil, 9, Geometry{Locations: 1, LocationSize: 1}, true)); err != nil {
			t.Fatalf("from outsider %d: %v", from, err)
		}
	}
	if err := c.Receive(6, AppendBarrier(nil, 7, 1)); err == nil || !strings.Contains(err.Error(), "member 6, which is not in the group") {
		t.Fatalf("from member 6: %v", err)
	}
	if got := c.Counters(); got.Outsiders != 2 || got.BadMessages != 1 || c.Known(9) {
		t.Fatalf("outsiders %d, bad %d, segment 9 known %v; want 2, 1, false", got.Outsiders, got.BadMessages, c.Known(9))
	}

	late, err := New(Config{Self: 4, Members: []frame.MemberID{1, 2, 3, 4}, MaxMessage: 1400})
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Receive(2, AppendRefuse(nil, 5, 3)); err != nil || late.Refused() != nil {
		t.Fatalf("a Refuse of member 5: %v, refused %v", err, late.Refused())
	}
	if err := late.Receive(1, out[0].Append(nil)); err != nil {
		t.Fatal(err)
	}
	late.Receive(2, AppendRefuse(nil, 4, 3)) // the first one stands
	var lj *LateJoinError
	if err := late.Refused(); !errors.As(err, &lj) || !errors.Is(err, ErrLateJoin) || *lj != (LateJoinError{Self: 4, By: 1, Crossed: 1}) {
		t.Fatalf("refused: %#v", err)
	}
	want := "dsm: member 4 joined the running group after the computation began: the computation (member 1) has passed barrier 1 and its members are the group's first view; joining later needs a snapshot of the segments, which is not supported (docs/dsm.md, issue 21)"
	if got := late.Refused().Error(); got != want {
		t.Fatalf("error:\n got %s\nwant %s", got, want)
	}
}

// A member's arrival at barrier 1 can reach a process admitted before
// that barrier ahead of the member's Refuse (its sender goroutine sends
// in the new view before its event loop handles the view). WC would
// then hold the Refuse until the process crossed barrier 1, or forever
// if it waits for an announcement made before it joined: a Refuse, like
// a lock message, changes no memory and is not held.
func TestRefuseNotHeld(t *testing.T) {
	late, err := New(Config{Self: 4, Members: []frame.MemberID{1, 2, 3, 4}, MaxMessage: 1400})
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Receive(1, AppendBarrier(nil, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := late.Receive(1, AppendRefuse(nil, 4, 0)); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(late.Refused(), ErrLateJoin) {
		t.Fatalf("refused: %v, want ErrLateJoin (held %d)", late.Refused(), late.Counters().Held)
	}
}

// Issue 21: a core whose first view was not the founding one
// (Unconfirmed) crosses no barrier until a Confirm names it, though
// every peer's arrival is in — they may have come ahead of a Refuse. WC
// does not hold the Confirm behind a peer's arrival. An unconfirmed core
// confirms nobody; a confirmed one confirms its live peers only.
func TestUnconfirmedCrossesOnlyConfirmed(t *testing.T) {
	c, err := New(Config{Self: 3, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400, Unconfirmed: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Confirmed() || c.Confirm(1) {
		t.Fatal("unconfirmed: want Confirmed false and no Confirm queued")
	}
	if err := c.EnterBarrier(1); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	for _, p := range []frame.MemberID{1, 2} {
		if err := c.Receive(p, AppendBarrier(nil, 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := c.BarrierPassed(); ok || err != nil {
		t.Fatalf("every arrival, no Confirm: passed %v, %v; want waiting", ok, err)
	}
	if err := c.Receive(1, AppendConfirm(nil, 2)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.BarrierPassed(); ok {
		t.Fatal("passed on a Confirm of member 2")
	}
	if err := c.Receive(1, AppendConfirm(nil, 3)); err != nil {
		t.Fatal(err)
	}
	if got := c.Counters(); got.Held != 0 || got.BadMessages != 0 {
		t.Fatalf("held %d, bad %d; want the Confirm handled at once", got.Held, got.BadMessages)
	}
	if ok, err := c.BarrierPassed(); !ok || err != nil || !c.Confirmed() {
		t.Fatalf("confirmed: passed %v, %v, Confirmed %v", ok, err, c.Confirmed())
	}
	c.MemberGone(2)
	if !c.Confirm(1) || c.Confirm(2) || c.Confirm(3) || c.Confirm(9) {
		t.Fatal("confirmed: want a Confirm of live peer 1 only (not gone 2, Self or stranger 9)")
	}
	if out := drain(t, c); len(out) != 1 || out[0].Type != TypeConfirm || out[0].To != 1 {
		t.Fatalf("queued %+v, want one Confirm of member 1", out)
	}
}

// BarrierReady says what BarrierPassed would, without crossing: false
// until every peer arrived, true once they have (or a peer's barrier
// names another id), and the barrier is still the one waited at until
// BarrierPassed crosses it.
func TestBarrierReadyDoesNotCross(t *testing.T) {
	c := newCore(t, 1, 1400, false)
	if !c.BarrierReady() {
		t.Fatal("outside a barrier: BarrierReady false, want true (nothing to wait for)")
	}
	if err := c.EnterBarrier(7); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	if err := c.Receive(2, AppendBarrier(nil, 7, 1)); err != nil {
		t.Fatal(err)
	}
	if c.BarrierReady() {
		t.Fatal("member 3 has not arrived: BarrierReady true")
	}
	if err := c.Receive(3, AppendBarrier(nil, 7, 1)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if !c.BarrierReady() {
			t.Fatal("every member arrived: BarrierReady false")
		}
		if id, in := c.InBarrier(); !in || id != 7 {
			t.Fatalf("BarrierReady crossed: in barrier %v (id %d), want still at 7", in, id)
		}
	}
	if ok, err := c.BarrierPassed(); !ok || err != nil {
		t.Fatalf("barrier 7: %v, %v", ok, err)
	}
	if _, in := c.InBarrier(); in {
		t.Fatal("BarrierPassed did not cross")
	}

	// A mismatch is ready too: the waiter must wake to see the error.
	if err := c.EnterBarrier(8); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	if err := c.Receive(2, AppendBarrier(nil, 9, 2)); err != nil {
		t.Fatal(err)
	}
	if !c.BarrierReady() {
		t.Fatal("member 2 arrived at barrier 9 as this member's barrier 8: BarrierReady false, want true (the barrier fails)")
	}
	if _, in := c.InBarrier(); !in {
		t.Fatal("BarrierReady crossed a failing barrier")
	}
	if _, err := c.BarrierPassed(); !errors.Is(err, ErrBarrierMismatch) {
		t.Fatalf("BarrierPassed: %v, want ErrBarrierMismatch", err)
	}
}

// Holds on the global channel (Channels): an unconfirmed member holds
// nobody there, for the Confirm it waits for may come behind a peer's
// arrival and must overtake what WC holds; once confirmed it holds a
// peer that arrived at the barrier it waits at, as a founder does.
func TestHoldsGlobalOnlyConfirmed(t *testing.T) {
	c, err := New(Config{Self: 3, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400, Unconfirmed: true,
		Channels: true, WCCopies: 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnterBarrier(1); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	if err := c.Receive(1, AppendBarrier(nil, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if c.Holds(Global, 1) {
		t.Fatal("unconfirmed: Holds(Global, 1) true, want false (its Confirm must overtake)")
	}
	if err := c.Receive(1, AppendConfirm(nil, 3)); err != nil {
		t.Fatal(err)
	}
	if !c.Confirmed() {
		t.Fatal("not confirmed by the Confirm naming it")
	}
	if !c.Holds(Global, 1) {
		t.Fatal("confirmed, member 1 arrived at barrier 1, Self waits there: Holds(Global, 1) false, want true")
	}
	if c.Holds(Global, 2) {
		t.Fatal("Holds(Global, 2) true for a member that has not arrived")
	}
}

// Holds on the global channel over one group (no Channels): a peer that
// arrived at the barrier Self waits at is held past WCCopies, except
// while there is lock traffic — a peer's lock request seen (until its
// next message that is not a lock message nor an unreliable update,
// which is not in its order) or Self's own request — since
// a lock message of the held peer would wait behind what the window
// holds; and never with Timed.
func TestHoldsGlobalOneGroupLockTraffic(t *testing.T) {
	update := AppendRecord(AppendUpdateHeader(nil, TypeUpdate, 1, 8), 0, 1, make([]byte, 8))
	unreliable := AppendRecord(AppendUpdateHeader(nil, TypeUnreliable, 1, 8), 0, 1, make([]byte, 8))
	recv := func(from frame.MemberID, msg []byte) func(*Core) error {
		return func(c *Core) error { return c.Receive(from, msg) }
	}
	// Member 1 arrived at barrier 1, Self waits there.
	arrived := func(c *Core) error {
		if err := c.Receive(1, AppendSegment(nil, 1, Geometry{Locations: 4, LocationSize: 8}, false)); err != nil {
			return err
		}
		if err := c.EnterBarrier(1); err != nil {
			return err
		}
		drain(t, c)
		return c.Receive(1, AppendBarrier(nil, 1, 1))
	}
	// Each step does what it does (nothing if nil), then Holds(Global,
	// member) must be want (false with Timed).
	type step struct {
		do     func(*Core) error
		member frame.MemberID
		want   bool
		when   string
	}
	peerRequests := []step{
		{nil, 1, true, "member 1 arrived at barrier 1, Self waits there"},
		{nil, 2, false, "member 2 has not arrived"},
		{recv(2, AppendLockRequest(nil, 5, 1)), 1, false, "member 2 requested a lock"},
		{recv(2, AppendLockReply(nil, 6, 3, 9)), 1, false, "member 2 requested a lock, then replied to another request"},
		{recv(2, unreliable), 1, false, "member 2 requested a lock, then an unreliable update of before it came"},
		{recv(2, update), 1, false, "member 2 wrote after its request, which lacks member 1's reply"},
		{recv(1, AppendLockReply(nil, 5, 2, 1)), 1, true, "every live member answered member 2's request: it was granted"},
		{func(c *Core) error {
			err := c.Receive(2, AppendLockRequest(nil, 5, 2))
			c.MemberGone(2)
			return err
		}, 1, true, "the requester died"},
		{func(c *Core) error { c.MemberBack(2); return nil }, 1, false, "the requester is back, its request outstanding"},
		{recv(2, update), 1, false, "member 2 wrote after its request, which lacks member 1's reply"},
		{recv(1, AppendLockReply(nil, 5, 2, 2)), 1, true, "member 1 answered member 2's request"},
		{recv(1, update), 1, true, "member 1 wrote after its arrival (held by WC)"},
	}
	for _, tc := range []struct {
		name  string
		timed bool
		setup func(*Core) error
		steps []step
	}{
		{"a peer requests", false, arrived, peerRequests},
		{"a peer requests, Timed", true, arrived, peerRequests},
		// Self requests a lock while not in a barrier, member 1 a
		// partial barrier ahead.
		{"Self requests", false, recv(1, AppendBarrier(nil, 1, 1|SeqPartial)), []step{
			{nil, 1, true, "member 1 crossed partial barrier 1 ahead of Self"},
			{func(c *Core) error { return c.RequestLock(5) }, 1, false, "Self requests a lock (member 1's reply would wait behind the hold)"},
		}},
	} {
		c, err := New(Config{Self: 3, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400, Timed: tc.timed})
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.setup(c); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, st := range tc.steps {
			if st.do != nil {
				if err := st.do(c); err != nil {
					t.Fatalf("%s, %s: %v", tc.name, st.when, err)
				}
			}
			if want := st.want && !tc.timed; c.Holds(Global, st.member) != want {
				t.Fatalf("%s, %s: Holds(Global, %d) %v, want %v", tc.name, st.when, st.member, !want, want)
			}
		}
	}
}
