package files

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// heldSetup is a receiver (member 2) whose sink stores "f" with the bytes
// stored, and the file data member 1 offers without a hash (id 4, ten
// blocks of 10 bytes).
func heldSetup(t *testing.T, stored []byte) (r *Core, sink *memSink, data []byte) {
	t.Helper()
	data = make([]byte, 100)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sink = newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
	sink.stored["f"] = stored
	return newCore(t, 2, sink, nil), sink, data
}

func zeroOffer(t *testing.T) frame.View {
	return encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Stamp: 5, Name: []byte("f")})
}

func blockFrame(t *testing.T, data []byte, b uint32, flags frame.Flags) frame.View {
	return encode(t, 1, 11, b, flags, &frame.FileDataBody{ID: 4, Data: data[b*10 : b*10+10]})
}

func endFrame(t *testing.T, hash [32]byte) frame.View {
	return encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: 10, Stamp: 9, Awaited: []frame.MemberID{2}, Hash: hash})
}

// A receiver that stores the file an offer without a hash names (same
// name, same size) needs none of its blocks: it says it holds them all,
// drops the pass's blocks, and once FileEnd's hash matches the stored
// file's it reports the file received and held.
func TestZeroHashOfferHeld(t *testing.T) {
	r, sink, data := heldSetup(t, nil)
	sink.stored["f"] = bytes.Clone(data)
	r.Step(10, macA, macB, zeroOffer(t))
	_, vs := sent(t, r)
	if len(vs) != 1 || vs[0].Type() != frame.FileStatus {
		t.Fatalf("answered the offer with %v, want one report", frameTypes(vs))
	}
	if st := vs[0].FileStatus(); st.State != frame.FileReceiving || st.Held != 10 || st.Top != 10 || vs[0].FileMissing().Len() != 0 {
		t.Fatalf("report %+v, want receiving with every block held and none missing", st)
	}
	for b := range uint32(10) {
		r.Step(Time(20+b), macA, macB, blockFrame(t, data, b, 0)) // memSink fails a write of a held block
	}
	if _, vs := sent(t, r); len(vs) != 0 {
		t.Fatalf("the pass's blocks made it send %v", frameTypes(vs))
	}
	if r.stats.Duplicates != 10 || r.stats.BlocksReceived != 0 {
		t.Fatalf("stats %+v, want the ten blocks dropped as duplicates", r.stats)
	}
	r.Step(40, macA, macB, endFrame(t, sha256.Sum256(data)))
	rep := r.Reports()
	if len(rep) != 1 || rep[0].Kind != Received || !rep[0].Held || rep[0].Replaced || rep[0].Meta.Hash != sha256.Sum256(data) {
		t.Fatalf("reports %v, want received and held", rep)
	}
	if !strings.Contains(rep[0].String(), "held already") {
		t.Fatalf("report says %q", rep[0])
	}
	if _, vs := sent(t, r); len(vs) != 1 || vs[0].FileStatus().State != frame.FileDone {
		t.Fatalf("after FileEnd sent %v, want a done report", frameTypes(vs))
	}
	if got := sink.commits[inKey{1, 11, 4}]; !bytes.Equal(got, data) || r.stats.FilesHeld != 1 || r.stats.HashMismatches != 0 {
		t.Fatalf("committed %d bytes, stats %+v", len(got), r.stats)
	}
}

// A stored file of the same name and size that FileEnd's hash shows to
// be another: the receiver asks for every block, says so in its report,
// and ends with the sender's bytes; the stored file's mismatch does not
// spend the retry a corrupted transfer gets.
func TestZeroHashOfferHeldMismatch(t *testing.T) {
	other := make([]byte, 100)
	r, sink, data := heldSetup(t, other)
	hash := sha256.Sum256(data)
	r.Step(10, macA, macB, zeroOffer(t))
	sent(t, r)
	r.Step(40, macA, macB, endFrame(t, hash))
	if rep := r.Reports(); len(rep) != 0 {
		t.Fatalf("reports %v after the mismatch, want none yet", rep)
	}
	_, vs := sent(t, r)
	if len(vs) != 1 {
		t.Fatalf("sent %v, want one report", frameTypes(vs))
	}
	st := vs[0].FileStatus()
	if st.State != frame.FileReceiving || st.Held != 0 || !slices.Equal(ranges(vs[0].FileMissing()), []frame.Range{{First: 0, Last: 9}}) {
		t.Fatalf("report %+v missing %v, want every block missing", st, ranges(vs[0].FileMissing()))
	}
	if r.stats.HeldMismatches != 1 || r.stats.HashMismatches != 1 {
		t.Fatalf("stats %+v", r.stats)
	}
	// The repairs: block 3 corrupted in flight; the whole-file check
	// catches it and fetches every block once more (the retry).
	for b := range uint32(10) {
		blk := data
		if b == 3 {
			blk = bytes.Clone(data)
			blk[35] ^= 1
		}
		r.Step(Time(50+b), macA, macB, blockFrame(t, blk, b, frame.FlagRetransmit))
	}
	if rep := r.Reports(); len(rep) != 0 {
		t.Fatalf("reports %v after a corrupted copy, want a second fetch", rep)
	}
	sent(t, r)
	for b := range uint32(10) {
		r.Step(Time(70+b), macA, macB, blockFrame(t, data, b, frame.FlagRetransmit))
	}
	rep := r.Reports()
	if len(rep) != 1 || rep[0].Kind != Received || rep[0].Held || !rep[0].Replaced {
		t.Fatalf("reports %v, want received, replacing the stored file", rep)
	}
	if !strings.Contains(rep[0].String(), "replacing another file") {
		t.Fatalf("report says %q", rep[0])
	}
	if got := sink.stored["f"]; !bytes.Equal(got, data) {
		t.Fatal("the stored file is not the sender's bytes")
	}
	if r.stats.HashMismatches != 2 || r.stats.FilesHeld != 0 {
		t.Fatalf("stats %+v", r.stats)
	}
}

// passToEnd has member 1 of a group of two send member 2 a file of ten
// blocks of 10 bytes, offered without a hash, until FileEnd (a frame a
// millisecond: the pass ends 10 ms after the offer), and fails the test
// if an offer carries a hash: the sender, the file's id, the stamps of
// its offer and of FileEnd, and the millisecond after FileEnd's.
func passToEnd(t *testing.T) (s *Core, id, offerStamp, endStamp uint32, now Time) {
	t.Helper()
	s = newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Burst = 1; c.Rate = 60_000; c.Members = members()[:2] })
	id, _ = s.Send(2, Outgoing{Name: "x", Size: 100, Source: &memSource{data: make([]byte, 100), bs: 10, fail: -1}})
	for now = Time(Millisecond); endStamp == 0; now += Time(Millisecond) {
		s.Tick(now)
		_, vs := sent(t, s)
		for _, v := range vs {
			switch v.Type() {
			case frame.FileOffer:
				o := v.FileOffer()
				if o.Hash != ([32]byte{}) {
					t.Fatalf("offer with hash %x, want zeros", o.Hash[:4])
				}
				offerStamp = o.Stamp
			case frame.FileEnd:
				_, _, _, endStamp = v.FileEnd()
			}
		}
	}
	return s, id, offerStamp, endStamp, now
}

// An rbcastd from before offers without a hash drops their FileEnd (its
// hash makes it longer than that version decodes), takes the offer's
// zeros for the file's hash, and reports a hash mismatch echoing the
// offer's stamp: the verdict names it as too old. A receiver of this
// version reports a mismatch only after FileEnd, echoing its stamp: a
// hash mismatch.
func TestOldReceiverNamed(t *testing.T) {
	for _, old := range []bool{true, false} {
		s, id, offerStamp, endStamp, now := passToEnd(t)
		if int32(offerStamp-endStamp) >= 0 {
			t.Fatalf("offer stamp %d, FileEnd's %d", offerStamp, endStamp)
		}
		echo := endStamp
		if old {
			echo = offerStamp
		}
		s.Step(now, macB, macA, encode(t, 2, 22, 0, 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileFailed,
			Reason: frame.FileHashMismatch, Held: 0, Top: 10, Echo: echo}))
		rep := s.Reports()
		want := CauseHash
		if old {
			want = CauseOldReceiver
		}
		if len(rep) != 1 || rep[0].Kind != Verdict || len(rep[0].Missing) != 1 || rep[0].Missing[0].Cause != want {
			t.Fatalf("old %v: reports %v, want member 2 missing for %v", old, rep, want)
		}
		if old && (!strings.Contains(rep[0].String(), "rbcastd too old") || s.stats.OldReceivers != 1) {
			t.Fatalf("verdict says %q, stats %+v", rep[0], s.stats)
		}
	}
}

// An rbcastd from before offers without a hash empties its copy at its
// first hash mismatch (against the offer's zeros, before FileEnd) and
// asks for every block again: the sender names it an old receiver at
// that report, and sends it no block again, instead of the whole file a
// second time for a second mismatch. A receiver of this version whose
// held blocks drop after FileEnd (its mismatch against FileEnd's hash),
// or one restarted (another incarnation), is served as before.
func TestOldReceiverStoppedAtFirstMismatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		endEcho bool   // the report after the drop echoes FileEnd's stamp
		inc     uint32 // the incarnation of that report
		old     bool
	}{{"old", false, 22, true}, {"this version", true, 22, false}, {"restarted", false, 23, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, id, offerStamp, endStamp, now := passToEnd(t)
			s.Step(now, macB, macA, encode(t, 2, 22, 1, 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileReceiving,
				Held: 10, Top: 10, Credit: 64, Echo: offerStamp}))
			echo := offerStamp
			if tc.endEcho {
				echo = endStamp
			}
			s.Step(now, macB, macA, encode(t, 2, tc.inc, 2, 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileReceiving,
				Held: 0, Top: 0, Credit: 64, Echo: echo}))
			rep := s.Reports()
			blocks := 0
			for end := now + Time(200*Millisecond); now < end; now += Time(Millisecond) {
				s.Tick(now)
				_, vs := sent(t, s)
				for _, v := range vs {
					if v.Type() == frame.FileData {
						blocks++
					}
				}
				if now == end-Time(100*Millisecond) {
					// It asks again: still not served.
					s.Step(now, macB, macA, encode(t, 2, tc.inc, 3, 0, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileReceiving,
						Held: 0, Top: 0, Credit: 64, Echo: echo}))
				}
			}
			rep = append(rep, s.Reports()...)
			if tc.old {
				if len(rep) != 1 || rep[0].Kind != Verdict || len(rep[0].Missing) != 1 || rep[0].Missing[0].Cause != CauseOldReceiver ||
					s.stats.OldReceivers != 1 || blocks != 0 {
					t.Fatalf("reports %v, old receivers %d, %d blocks sent after its mismatch; want a verdict naming member 2 too old, none sent",
						rep, s.stats.OldReceivers, blocks)
				}
				return
			}
			if len(rep) != 0 || s.stats.OldReceivers != 0 || blocks < 10 {
				t.Fatalf("reports %v, old receivers %d, %d blocks sent after its report; want no verdict, every block again",
					rep, s.stats.OldReceivers, blocks)
			}
		})
	}
}
