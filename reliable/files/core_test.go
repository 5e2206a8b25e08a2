package files

import (
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 0xa}
	macB = [6]byte{2, 0, 0, 0, 0, 0xb}
	macC = [6]byte{2, 0, 0, 0, 0, 0xc}
)

func members() []frame.MemberInfo {
	return []frame.MemberInfo{{ID: 1, MAC: macA, Incarnation: 11}, {ID: 2, MAC: macB, Incarnation: 22}, {ID: 3, MAC: macC, Incarnation: 33}}
}

func newCore(t *testing.T, self frame.MemberID, sink Sink, edit func(*Config)) *Core {
	t.Helper()
	cfg := Config{Group: 9, Self: self, Members: members(), Sink: sink}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(1)
	return c
}

// sent decodes the frames of c's Ready and advances it.
func sent(t *testing.T, c *Core) (dsts [][6]byte, vs []frame.View) {
	t.Helper()
	for _, f := range c.Ready().Frames {
		e, body, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.ParseGroup(append([]byte{}, body...), 9)
		if err != nil {
			t.Fatal(err)
		}
		dsts, vs = append(dsts, e.Dst()), append(vs, v)
	}
	c.Advance()
	return dsts, vs
}

// encode builds a frame from member `from` (incarnation inc).
func encode(t *testing.T, from frame.MemberID, inc, seq uint32, flags frame.Flags, body frame.Body) frame.View {
	t.Helper()
	h := frame.Header{Group: 9, Sender: from, Incarnation: inc, Seq: seq, Flags: flags}
	b, err := frame.Append(nil, &h, body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := frame.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		text string
	}{
		{func(c *Config) { c.Self = 7 }, "Self 7 is not among the 3 Members"},
		{func(c *Config) { c.Members = append(c.Members, c.Members[0]) }, "member id 1 listed twice"},
		{func(c *Config) { c.BlockSize = 1500 }, "BlockSize is 1500, want 1..1464 at MTU 1500"},
		{func(c *Config) { c.Rate = 10 }, "Rate is 10 bytes/s"},
		{func(c *Config) { c.Credit = 70000 }, "Credit is 70000, want 1..65535"},
		{func(c *Config) { c.RepairPercent = 101 }, "RepairPercent is 101, want 1..100"},
		{func(c *Config) { c.SlowPercent = -1 }, "SlowPercent is -1, want 1..1000"},
		{func(c *Config) { c.MinTimer, c.MaxTimer = 2*Millisecond, Millisecond }, "MinTimer 2ms exceeds MaxTimer 1ms"},
		{func(c *Config) { c.FailureTimeout = 100 * Millisecond }, "FailureTimeout 100ms must exceed 4 × MaxTimer 100ms"},
		{func(c *Config) { c.MaxReceiving = -1 }, "MaxReceiving is -1, want at least 1 (0 means 64)"},
	} {
		cfg := Config{Group: 9, Self: 1, Members: members()}
		c.edit(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("err = %v, want ErrConfig saying %q", err, c.text)
		}
	}
}

func TestBlockSet(t *testing.T) {
	s := newBlockSet(200)
	for _, b := range []uint32{0, 1, 2, 5, 64, 65, 66, 130, 199} {
		if !s.add(b) {
			t.Fatalf("add(%d) not new", b)
		}
	}
	if s.add(5) || s.add(200) {
		t.Fatal("a second add, or one past the end, counted")
	}
	if s.first != 3 || s.held != 9 {
		t.Fatalf("first %d held %d", s.first, s.held)
	}
	got := s.missing(nil, 200, 100)
	want := []frame.Range{{First: 3, Last: 4}, {First: 6, Last: 63}, {First: 67, Last: 129}, {First: 131, Last: 198}}
	if !slices.Equal(got, want) {
		t.Fatalf("missing = %v, want %v", got, want)
	}
	if got := s.missing(nil, 70, 100); !slices.Equal(got, []frame.Range{{First: 3, Last: 4}, {First: 6, Last: 63}, {First: 67, Last: 69}}) {
		t.Fatalf("missing below 70 = %v", got)
	}
	if got := s.missing(nil, 200, 2); len(got) != 2 {
		t.Fatalf("missing capped at 2 gave %v", got)
	}
	for b := range uint32(200) {
		s.add(b)
	}
	if !s.complete() || s.first != 200 || len(s.missing(nil, 200, 10)) != 0 {
		t.Fatalf("complete %v first %d", s.complete(), s.first)
	}
}

// TestTableI: the receiver's first frame of a transfer (IBRMP Table I):
// an offer opens the sink and reports; a block or an end without the
// offer asks for it (BOF_REQUEST) at the sender's MAC.
func TestTableI(t *testing.T) {
	data := []byte("twelve bytes")
	hash := sha256.Sum256(data)
	offer := &frame.FileOfferBody{ID: 4, Size: uint64(len(data)), BlockSize: 5, Stamp: 77, Hash: hash, Name: []byte("f")}
	for _, c := range []struct {
		name  string
		first frame.View
		state frame.FileState
	}{
		{"offer", encode(t, 1, 11, 0, 0, offer), frame.FileReceiving},
		{"data", encode(t, 1, 11, 1, 0, &frame.FileDataBody{ID: 4, Data: data[5:10]}), frame.FileNeedOffer},
		{"end", encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: 3, SRTT: 100, Stamp: 80, Awaited: []frame.MemberID{2}}), frame.FileNeedOffer},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
			r := newCore(t, 2, sink, nil)
			if err := r.Step(10, macA, macB, c.first); err != nil {
				t.Fatal(err)
			}
			r.Tick(10)
			dsts, vs := sent(t, r)
			if len(vs) != 1 || vs[0].Type() != frame.FileStatus || dsts[0] != macA {
				t.Fatalf("sent %d frames %v to %v, want one FileStatus to the sender", len(vs), vs, dsts)
			}
			st := vs[0].FileStatus()
			if st.ID != 4 || st.Incarnation != 11 || st.State != c.state || st.Credit != DefaultCredit {
				t.Fatalf("report %+v, want file 4 of incarnation 11 %v", st, c.state)
			}
			if c.state == frame.FileNeedOffer {
				// The offer again, to it alone: then every block.
				if err := r.Step(20, macA, macB, encode(t, 1, 11, 0, frame.FlagRetransmit, offer)); err != nil {
					t.Fatal(err)
				}
			}
			for b := range uint32(3) {
				end := min(int(b+1)*5, len(data))
				if err := r.Step(30, macA, macB, encode(t, 1, 11, b, 0, &frame.FileDataBody{ID: 4, Data: data[b*5 : end]})); err != nil {
					t.Fatal(err)
				}
			}
			rep := r.Reports()
			if len(rep) != 1 || rep[0].Kind != Received || rep[0].Meta.Name != "f" || string(sink.stored["f"]) != string(data) {
				t.Fatalf("reports %v, stored %q", rep, sink.stored["f"])
			}
			_, vs = sent(t, r)
			last := vs[len(vs)-1].FileStatus()
			if last.State != frame.FileDone || last.Held != 3 {
				t.Fatalf("last report %+v, want done with 3 blocks", last)
			}
		})
	}
}

// TestResumeReportsHeld: a receiver whose sink verified blocks reports
// them held, and asks only for the others.
func TestResumeReportsHeld(t *testing.T) {
	data := make([]byte, 100)
	for i := range data {
		data[i] = byte(i)
	}
	m := Meta{Sender: 1, Incarnation: 11, ID: 4, Name: "f", Size: 100, BlockSize: 10, Hash: sha256.Sum256(data), HashAlg: frame.FileHashSHA256}
	sink := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
	p, _, _ := sink.Open(m)
	for b := range uint32(6) {
		p.WriteBlock(b, data[b*10:b*10+10])
	}
	p.(*partial).data[50] ^= 1 // block 5 torn: its hash no longer matches
	p.Abort(true)
	r := newCore(t, 2, sink, nil)
	r.Step(10, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: 10, Awaited: []frame.MemberID{2}}))
	sent(t, r)
	r.Step(20, macA, macB, encode(t, 1, 11, 0, frame.FlagRetransmit, &frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Hash: m.Hash, Name: []byte("f")}))
	_, vs := sent(t, r)
	st := vs[0].FileStatus()
	missing := ranges(vs[0].FileMissing())
	if st.Held != 5 || st.Top != 10 || !slices.Equal(missing, []frame.Range{{First: 5, Last: 9}}) {
		t.Fatalf("report %+v missing %v, want 5 held (block 5 torn), 5..9 missing", st, missing)
	}
	if r.stats.Resumed != 1 {
		t.Fatalf("Resumed = %d", r.stats.Resumed)
	}
}

func ranges(rl frame.RangeList) []frame.Range {
	var rs []frame.Range
	for i := range rl.Len() {
		rs = append(rs, rl.At(i))
	}
	return rs
}

// TestStaleReportGoneOnce (§III.E): a report on a file closed at the
// sender is answered with FileGone once per receiver and file; on a file
// never sent, with "unknown".
func TestStaleReportGoneOnce(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.Members = members()[:2]; c.FileTimeout = Second })
	src := &memSource{data: []byte("x"), bs: 1464, fail: -1}
	id, err := s.Send(2, Outgoing{Name: "x", Size: 1, Hash: sha256.Sum256(src.data), Source: src})
	if err != nil {
		t.Fatal(err)
	}
	s.Tick(3)
	_, vs := sent(t, s)
	if types := frameTypes(vs); !slices.Equal(types, []frame.Type{frame.FileOffer, frame.FileData, frame.FileEnd}) {
		t.Fatalf("sent %v", types)
	}
	done := &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileDone, Held: 1, Top: 1}
	s.Step(4, macB, macA, encode(t, 2, 22, 0, 0, done))
	if rep := s.Reports(); len(rep) != 1 || !rep[0].OK() || !slices.Equal(rep[0].Done, []frame.MemberID{2}) {
		t.Fatalf("reports %v", rep)
	}
	sent(t, s)
	s.Tick(Time(2 * Second))
	if len(s.open) != 0 || src.closed != 1 {
		t.Fatalf("%d open, source closed %d times after the file timeout", len(s.open), src.closed)
	}
	for i, want := range []int{1, 0} {
		s.Step(Time(3*Second), macB, macA, encode(t, 2, 22, uint32(1+i), 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileNeedOffer}))
		dsts, vs := sent(t, s)
		if len(vs) != want {
			t.Fatalf("report %d on the closed file: %d frames %v, want %d", i, len(vs), frameTypes(vs), want)
		}
		if want == 1 && (vs[0].Type() != frame.FileGone || vs[0].FileGone().Reason != frame.FileClosed || dsts[0] != macB) {
			t.Fatalf("answered %v %+v to %v", vs[0].Type(), vs[0].FileGone(), dsts[0])
		}
	}
	s.Step(Time(3*Second), macB, macA, encode(t, 2, 22, 5, 0, &frame.FileStatusBody{ID: 99, Incarnation: 11, State: frame.FileNeedOffer}))
	if _, vs := sent(t, s); len(vs) != 1 || vs[0].FileGone().Reason != frame.FileUnknown {
		t.Fatalf("a report on file 99: %v", vs)
	}
}

func frameTypes(vs []frame.View) []frame.Type {
	var ts []frame.Type
	for _, v := range vs {
		ts = append(ts, v.Type())
	}
	return ts
}

// TestRepairToOneOrGroup: a block one receiver lacks goes to its MAC; a
// block two lack goes once to the group.
func TestRepairToOneOrGroup(t *testing.T) {
	// One frame a millisecond, so that both reports are in before the
	// pacer sends a repair.
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Burst = 1; c.Rate = 60_000 })
	data := make([]byte, 100)
	src := &memSource{data: data, bs: 10, fail: -1}
	id, _ := s.Send(2, Outgoing{Name: "x", Size: 100, Hash: sha256.Sum256(data), Source: src})
	now := Time(Millisecond)
	for ; s.passing() != nil || len(s.queue) > 0; now += Time(Millisecond) {
		s.Tick(now)
		sent(t, s)
	}
	report := func(from frame.MemberID, inc, seq uint32, mac [6]byte, missing ...frame.Range) {
		s.Step(now, mac, macA, encode(t, from, inc, seq, 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileReceiving,
			Credit: 10, Held: 8, Top: 10, Missing: missing}))
	}
	report(2, 22, 0, macB, frame.Range{First: 3, Last: 3}, frame.Range{First: 7, Last: 7})
	report(3, 33, 0, macC, frame.Range{First: 7, Last: 7}, frame.Range{First: 9, Last: 9})
	var dsts [][6]byte
	var vs []frame.View
	for range 20 {
		now += Time(Millisecond)
		s.Tick(now)
		d, v := sent(t, s)
		dsts, vs = append(dsts, d...), append(vs, v...)
	}
	got := map[uint32][6]byte{}
	for i, v := range vs {
		if v.Type() == frame.FileData {
			if !v.Retransmission() {
				t.Fatalf("repair of block %d without the retransmission flag", v.Seq())
			}
			if _, dup := got[v.Seq()]; dup {
				t.Fatalf("block %d repaired twice", v.Seq())
			}
			got[v.Seq()] = dsts[i]
		}
	}
	want := map[uint32][6]byte{3: macB, 7: frame.Broadcast, 9: macC}
	if len(got) != 3 || got[3] != want[3] || got[7] != want[7] || got[9] != want[9] {
		t.Fatalf("repairs %v, want %v", got, want)
	}
}

var _ core.Core = (*Core)(nil)

// TestSkipCRC: after SkipCRC (core.CRCSkipper: the link writes every
// frame's CRC) the core's frames, an offer, its blocks and its end
// alike, carry a zero CRC and are otherwise those it encodes without it.
func TestSkipCRC(t *testing.T) {
	frames := func(skip bool) [][]byte {
		s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10 })
		if skip {
			core.CRCSkipper(s).SkipCRC()
		}
		data := []byte("twenty-five bytes of file")
		src := &memSource{data: data, bs: 10, fail: -1}
		if _, err := s.Send(2, Outgoing{Name: "x", Size: uint64(len(data)), Hash: sha256.Sum256(data), Source: src}); err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for now := Time(Millisecond); now < Time(20*Millisecond); now += Time(Millisecond) {
			s.Tick(now)
			for _, f := range s.Ready().Frames {
				out = append(out, append([]byte(nil), f...))
			}
			s.Advance()
		}
		return out
	}
	with, without := frames(false), frames(true)
	if len(with) < 4 || len(with) != len(without) {
		t.Fatalf("%d frames with the CRC, %d without; want the same, at least 4", len(with), len(without))
	}
	types := map[frame.Type]bool{}
	for i, f := range without {
		v := frame.View(f[frame.EthernetHeaderLen:])
		types[v.Type()] = true
		if v.CRC() != 0 {
			t.Fatalf("frame %d (%v): CRC %#08x after SkipCRC", i, v.Type(), v.CRC())
		}
		frame.SetCRC(f[frame.EthernetHeaderLen:])
		if !slices.Equal(f, with[i]) {
			t.Fatalf("frame %d (%v) differs beyond its CRC:\n%x\n%x", i, v.Type(), f, with[i])
		}
	}
	if !types[frame.FileOffer] || !types[frame.FileData] {
		t.Fatalf("types sent %v, want an offer and blocks", types)
	}
}

// TestWindowWaitsForSlowReceiver: the pass runs at most Window blocks
// ahead of a receiver behind the median too (one that takes the frames
// slower than the others: its ring would overflow and every block it
// lost be repaired), but it waits so for SlowPercent of its own time
// plus a MaxTimer at most: a receiver that stays slow holds the others
// back that long, then catches up by repair.
func TestWindowWaitsForSlowReceiver(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Burst = 4; c.Rate = 1e9; c.Window = 10 })
	data := make([]byte, 10_000)
	id, _ := s.Send(1, Outgoing{Name: "x", Size: uint64(len(data)), Hash: sha256.Sum256(data), Source: &memSource{data: data, bs: 10, fail: -1}})
	var seq uint32
	report := func(now Time, from frame.MemberID, inc uint32, mac [6]byte, top uint32) {
		seq++
		s.Step(now, mac, macA, encode(t, from, inc, seq, 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileReceiving,
			Credit: 10, Held: top, Top: top}))
	}
	const slowTop = 5
	var heldFrom, heldUntil Time
	for now := Time(Millisecond); now <= Time(300*Millisecond); now += Time(Millisecond) {
		s.Tick(now)
		sent(t, s)
		f := s.passing()
		if f == nil {
			t.Fatalf("the pass ended at %v", now)
		}
		// Receiver 2 keeps up, receiver 3 stays at block 5.
		report(now, 2, 22, macB, f.next)
		report(now, 3, 33, macC, slowTop)
		switch {
		case heldFrom == 0 && f.next == slowTop+10:
			heldFrom = now
		case heldUntil == 0 && f.next > slowTop+10:
			heldUntil = now
			if heldFrom == 0 || now <= Time(100*Millisecond) {
				t.Fatalf("at %v the pass sent block %d, more than Window 10 past the slow receiver's %d", now, f.next-1, slowTop)
			}
		}
		if d := s.Deadline(); heldUntil == 0 && f.next == slowTop+10 && (d == 0 || d > heldFrom.Add(102*Millisecond)) {
			t.Fatalf("at %v, waiting for the slow receiver since %v, the deadline is %v: not when the wait's share runs out", now, heldFrom, d)
		}
	}
	// MaxTimer (100 ms) and 20 % of the pass's own time before the wait
	// (a few ms), then a tick.
	if heldUntil == 0 || heldUntil.Sub(heldFrom) < 100*Millisecond || heldUntil.Sub(heldFrom) > 102*Millisecond {
		t.Fatalf("the pass waited for the slow receiver from %v until %v, want 100..102 ms", heldFrom, heldUntil)
	}
}
