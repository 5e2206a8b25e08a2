package files

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// A sender with MaxOpen files open and none judged yet (its receivers
// slow to report) has nothing to do until a report or a timer judges
// one: its deadline is that timer, not now. A deadline of now had the
// runtime spin, and its link's read, given a deadline already past,
// time out before reading the reports that would judge the files: rbcastd
// sendfile of a directory of 100 small files named every receiver of
// the first 64 silent after the failure timeout, though each had stored
// the file within milliseconds.
func TestSenderAtMaxOpenWaits(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Members = members()[:2]; c.MaxOpen = 1 })
	data := make([]byte, 10)
	var ids []uint32
	for _, name := range []string{"a", "b"} {
		id, err := s.Send(2, Outgoing{Name: name, Size: 10, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	now := Time(3)
	s.Tick(now)
	sent(t, s)
	if p := s.Progress(); len(p) != 2 || p[0].State == "queued" || p[1].State != "queued" {
		t.Fatalf("progress %+v, want file %d open and file %d queued", p, ids[0], ids[1])
	}
	if d := s.Deadline(); d <= now {
		t.Fatalf("deadline %d at %d with the one slot held by a file not judged: want a later timer", d, now)
	}
	// Member 2 holds the first file: it is judged, closed, and the
	// second's pass starts with that report.
	now++
	s.Step(now, macB, macA, encode(t, 2, 22, 1, frame.FlagHashAlg, &frame.FileStatusBody{ID: ids[0], Incarnation: 11, State: frame.FileDone, Held: 1, Top: 1}))
	sent(t, s)
	if p := s.Progress(); len(p) != 1 || p[0].Meta.ID != ids[1] || p[0].State == "queued" {
		t.Fatalf("progress %+v, want file %d alone open", p, ids[1])
	}
}

// A receiver taking MaxReceiving files already answers a further offer
// as one it lacks (needs offer), opens nothing for it, drops its blocks,
// and takes it once one of those files ends: at once, from the offer it
// kept, reporting it receiving with every block missing, which the
// sender repairs. Nothing is lost and nothing is refused.
func TestReceiverWaitsAtMaxReceiving(t *testing.T) {
	sink := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
	r := newCore(t, 2, sink, func(c *Config) { c.MaxReceiving = 1 })
	one, two := []byte("first file"), []byte("second one")
	offer := func(id uint32, data []byte) frame.View {
		return encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: id, Size: uint64(len(data)), BlockSize: 5, Stamp: 77, Hash: sha256.Sum256(data), Name: fmt.Appendf(nil, "f%d", id)})
	}
	block := func(id, b uint32, data []byte) frame.View {
		return encode(t, 1, 11, b, 0, &frame.FileDataBody{ID: id, Data: data[b*5 : b*5+5]})
	}
	report := func(now Time) frame.FileStatusBody {
		t.Helper()
		_, vs := sent(t, r)
		if len(vs) != 1 || vs[0].Type() != frame.FileStatus {
			t.Fatalf("at %d sent %v, want one report", now, vs)
		}
		return vs[0].FileStatus()
	}
	for _, v := range []frame.View{offer(1, one), block(1, 0, one)} {
		if err := r.Step(10, macA, macB, v); err != nil {
			t.Fatal(err)
		}
	}
	sent(t, r)
	if err := r.Step(11, macA, macB, offer(2, two)); err != nil {
		t.Fatal(err)
	}
	if st := report(11); st.ID != 2 || st.State != frame.FileNeedOffer {
		t.Fatalf("report %+v, want file 2 needs offer", st)
	}
	if err := r.Step(12, macA, macB, block(2, 0, two)); err != nil {
		t.Fatal(err)
	}
	if sink.opened != 1 || r.stats.FilesDeferred != 1 {
		t.Fatalf("%d copies open, %d offers waiting, want 1 and 1", sink.opened, r.stats.FilesDeferred)
	}
	if p := r.Progress(); len(p) != 2 || p[1].State != "waiting: as many files being received as MaxReceiving" {
		t.Fatalf("progress %+v, want file 2 waiting", p)
	}
	// File 1 ends: file 2 opens at once and asks for both blocks.
	if err := r.Step(13, macA, macB, block(1, 1, one)); err != nil {
		t.Fatal(err)
	}
	_, vs := sent(t, r)
	var st2 *frame.FileStatusBody
	for _, v := range vs {
		if st := v.FileStatus(); st.ID == 2 {
			st2 = &st
		}
	}
	if st2 == nil || st2.State != frame.FileReceiving || st2.Held != 0 {
		t.Fatalf("reports %v, want file 2 receiving, nothing held", vs)
	}
	for b := range uint32(2) {
		if err := r.Step(14, macA, macB, block(2, b, two)); err != nil {
			t.Fatal(err)
		}
	}
	if string(sink.stored["f1"]) != string(one) || string(sink.stored["f2"]) != string(two) || sink.mostOpen != 1 {
		t.Fatalf("stored %q and %q, %d open at most; want both files, one at a time", sink.stored["f1"], sink.stored["f2"], sink.mostOpen)
	}
}

// Receivers that ask for the offer (here: both, waiting for room at
// MaxReceiving) take no block of the pass and do not hold it back: the
// pass runs to its end, not Window blocks past their position 0, and
// they are repaired what they lack once they take the offer.
func TestPassNotHeldByNeedOffer(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Window = 4; c.Burst = 2 })
	data := make([]byte, 400)
	id, err := s.Send(2, Outgoing{Name: "x", Size: 400, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	count := func() {
		_, vs := sent(t, s)
		for _, v := range vs {
			if v.Type() == frame.FileData && v.Flags()&frame.FlagRetransmit == 0 {
				blocks++
			}
		}
	}
	s.Tick(3)
	count()
	for i, m := range []struct {
		id  frame.MemberID
		inc uint32
		mac [6]byte
	}{{2, 22, macB}, {3, 33, macC}} {
		s.Step(4, m.mac, macA, encode(t, m.id, m.inc, uint32(i), frame.FlagHashAlg, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileNeedOffer}))
		count()
	}
	for now := Time(5); now < Time(50*Millisecond); now += Time(Millisecond) {
		s.Tick(now)
		count()
	}
	if blocks != 40 || s.stats.WindowStalls != 0 {
		t.Fatalf("the pass sent %d of 40 blocks, %d window stalls; want all, none", blocks, s.stats.WindowStalls)
	}
}

// A transfer waiting for room (MaxReceiving) asked for the offer when it
// came, and asks again at its retry timer; the pass's blocks, which it
// drops, do not each make it ask once more. Each did: a receiver waiting
// out a long file sent its sender a report per block of the pass, and
// drew an offer in answer every rto.
func TestWaitingAsksNotPerBlock(t *testing.T) {
	sink := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
	r := newCore(t, 2, sink, func(c *Config) { c.MaxReceiving = 1 })
	one := []byte("first file")
	two := make([]byte, 500)
	offer := func(id uint32, data []byte) frame.View {
		return encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: id, Size: uint64(len(data)), BlockSize: 5, Stamp: 77, Hash: sha256.Sum256(data), Name: fmt.Appendf(nil, "f%d", id)})
	}
	for _, v := range []frame.View{offer(1, one), offer(2, two)} {
		if err := r.Step(10, macA, macB, v); err != nil {
			t.Fatal(err)
		}
	}
	asks := func() (n int) {
		_, vs := sent(t, r)
		for _, v := range vs {
			if v.Type() == frame.FileStatus && v.FileStatus().ID == 2 {
				if st := v.FileStatus(); st.State != frame.FileNeedOffer {
					t.Fatalf("report %+v, want file 2 needs offer", st)
				}
				n++
			}
		}
		return n
	}
	if n := asks(); n != 1 || r.stats.FilesDeferred != 1 {
		t.Fatalf("%d reports of file 2, %d offers waiting; want 1 and 1", n, r.stats.FilesDeferred)
	}
	// 100 blocks of file 2 within a millisecond, less than its retry
	// timer (4 × the initial round trip).
	now, n := Time(10), 0
	for b := range uint32(100) {
		now += Time(10 * Microsecond)
		if err := r.Step(now, macA, macB, encode(t, 1, 11, b, 0, &frame.FileDataBody{ID: 2, Data: two[b*5 : b*5+5]})); err != nil {
			t.Fatal(err)
		}
		r.Tick(now)
		n += asks()
	}
	if n != 0 {
		t.Fatalf("file 2, waiting, asked for its offer %d times more over 100 of its blocks in %v; want none before its retry timer", n, Duration(now-10))
	}
	if sink.opened != 1 || r.stats.Dropped != 100 {
		t.Fatalf("%d copies open, %d blocks dropped; want 1 and 100", sink.opened, r.stats.Dropped)
	}
}
