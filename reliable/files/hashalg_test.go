package files

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/rbcast/rbcast/frame"
)

// librarySum is data's hash as the algorithm's own library computes it.
func librarySum(a frame.FileHashAlg, data []byte) [32]byte {
	if a == frame.FileHashBLAKE3 {
		return blake3.Sum256(data)
	}
	return sha256.Sum256(data)
}

var hashAlgs = []frame.FileHashAlg{frame.FileHashSHA256, frame.FileHashBLAKE3}

// sendAlg queues data as "f" at member 1 under a: hashed first (the
// offer carries the hash) or by the pass (FileEnd carries it).
func (m *mesh) sendAlg(data []byte, a frame.FileHashAlg, first bool) {
	m.t.Helper()
	o := Outgoing{Name: "f", Size: uint64(len(data)), HashAlg: a, Source: &memSource{data: data, bs: 1000, fail: -1}}
	if first {
		o.Hash = librarySum(a, data)
	}
	if _, err := m.cores[0].Send(m.now, o); err != nil {
		m.t.Fatal(err)
	}
}

// inject queues a copy of v from member `from` to member `to`, edited
// (its CRC set again).
func (m *mesh) inject(from, to frame.MemberID, v frame.View, edit func([]byte)) {
	b := bytes.Clone(v)
	edit(b)
	frame.SetCRC(b)
	m.queue = append(m.queue, meshFrame{at: m.now.Add(meshLatency), from: int(from - 1), to: int(to - 1), dst: m.macs[to-1], v: frame.View(b)})
}

// A file's hash under each algorithm, in the offer or in FileEnd, is the
// library's Sum of its bytes, at the sender (its verdict) and at every
// receiver (what it stored and reports).
func TestHashAlgSum(t *testing.T) {
	data := skipData(25_500)
	for _, a := range hashAlgs {
		for _, first := range []bool{true, false} {
			m := newMesh(t, [3][]byte{}, nil)
			m.sendAlg(data, a, first)
			m.run(func() bool { return m.verdict() != nil }, nil)
			want := librarySum(a, data)
			v := m.verdict()
			if !v.OK() || v.Meta.HashAlg != a || v.Meta.Hash != want || !slices.Equal(v.Done, []frame.MemberID{2, 3}) {
				t.Fatalf("%v (hashed first %v): verdict %v, %v %x; want 2 and 3 done, %x", a, first, v, v.Meta.HashAlg, v.Meta.Hash, want)
			}
			got := 0
			for _, r := range m.reports {
				if r.Kind == Received {
					got++
					if r.Meta.HashAlg != a || r.Meta.Hash != want || !strings.Contains(r.String(), a.String()) {
						t.Fatalf("%v: received %v with %v %x, want %x", a, r, r.Meta.HashAlg, r.Meta.Hash, want)
					}
				}
			}
			if got != 2 || !bytes.Equal(m.sinks[1].stored["f"], data) || !bytes.Equal(m.sinks[2].stored["f"], data) {
				t.Fatalf("%v: %d received, stored %d and %d bytes", a, got, len(m.sinks[1].stored["f"]), len(m.sinks[2].stored["f"]))
			}
		}
	}
}

// A block corrupted on its way to one receiver (its CRC set again, so
// only the file's hash can tell) is refused under each algorithm: that
// receiver's hash does not match, it fetches the file again once, and
// when the block comes corrupted again the transfer fails; nothing is
// stored under the name, and the verdict names it.
func TestHashAlgCorruptBlockRefused(t *testing.T) {
	data := skipData(25_500)
	for _, a := range hashAlgs {
		for _, first := range []bool{true, false} {
			m := newMesh(t, [3][]byte{}, nil)
			corrupted := 0
			m.drop = func(from, to frame.MemberID, v frame.View) bool {
				if to != 3 || v.Type() != frame.FileData || v.Seq() != 7 {
					return false
				}
				corrupted++
				m.inject(from, to, v, func(b []byte) { b[len(b)-frame.CRCLen-1] ^= 0x40 })
				return true
			}
			m.sendAlg(data, a, first)
			m.run(func() bool { return m.verdict() != nil }, nil)
			v := m.verdict()
			if !slices.Equal(v.Done, []frame.MemberID{2}) || len(v.Missing) != 1 || v.Missing[0].Member != 3 || v.Missing[0].Cause != CauseHash {
				t.Fatalf("%v (hashed first %v): verdict %v, want 2 done and 3 missing for a hash mismatch", a, first, v)
			}
			if _, ok := m.sinks[2].stored["f"]; ok || m.cores[2].stats.HashMismatches != 2 || corrupted < 2 {
				t.Fatalf("%v: member 3 stored the file %v, %d mismatches, block corrupted %d times", a, ok, m.cores[2].stats.HashMismatches, corrupted)
			}
			if !bytes.Equal(m.sinks[1].stored["f"], data) {
				t.Fatalf("%v: member 2 stores %d bytes that are not the file's", a, len(m.sinks[1].stored["f"]))
			}
		}
	}
}

// A receiver from before the offer's algorithm byte drops an offer that
// has it (its decoder wants the body to end at the name) and asks for
// the offer without FlagHashAlg on its reports: the sender names it too
// old at that first report, sends it a FileGone and no block of its own,
// and the verdict waits for the others only. The same receiver is
// served a SHA-256 file as before.
func TestOldReceiverNamedForHashAlg(t *testing.T) {
	data := skipData(25_500)
	for _, a := range hashAlgs {
		m := newMesh(t, [3][]byte{}, nil)
		gone := 0
		m.drop = func(from, to frame.MemberID, v frame.View) bool {
			switch {
			case to == 2 && v.Type() == frame.FileOffer && len(v.Body()) > 54+len(v.FileOffer().Name):
				return true // ErrBody at that build
			case to == 2 && v.Type() == frame.FileGone:
				gone++
			case from == 2 && v.Type() == frame.FileStatus && v.Flags()&frame.FlagHashAlg != 0:
				m.inject(from, to, v, func(b []byte) {
					binary.BigEndian.PutUint16(b[2:], uint16(v.Flags()&^frame.FlagHashAlg))
				})
				return true
			}
			return false
		}
		m.sendAlg(data, a, false)
		toOld := 0
		m.run(func() bool { return m.verdict() != nil }, nil)
		until := m.now.Add(50 * Millisecond)
		m.run(func() bool { return m.now >= until }, nil)
		v := m.verdict()
		if a == frame.FileHashSHA256 {
			if !v.OK() || !bytes.Equal(m.sinks[1].stored["f"], data) {
				t.Fatalf("sha256: verdict %v, member 2 stores %d bytes", v, len(m.sinks[1].stored["f"]))
			}
			continue
		}
		for _, r := range m.reports {
			if r.Kind == Incomplete && r.Meta.Sender == 1 && r.Cause == CauseAborted {
				toOld++
			}
		}
		if !slices.Equal(v.Done, []frame.MemberID{3}) || len(v.Missing) != 1 || v.Missing[0].Member != 2 || v.Missing[0].Cause != CauseOldHashAlg ||
			!strings.Contains(v.String(), "too old for a file not hashed with SHA-256") {
			t.Fatalf("%v: verdict %v, want 3 done and 2 named too old", a, v)
		}
		if _, ok := m.sinks[1].stored["f"]; ok || gone != 1 || toOld != 1 || m.cores[0].stats.OldReceivers != 1 || m.repairs != 0 {
			t.Fatalf("%v: member 2 stored it %v, %d FileGone to it, its transfer ended %d times, %d old receivers, %d repairs",
				a, ok, gone, toOld, m.cores[0].stats.OldReceivers, m.repairs)
		}
		if !bytes.Equal(m.sinks[2].stored["f"], data) {
			t.Fatalf("%v: member 3 stores %d bytes", a, len(m.sinks[2].stored["f"]))
		}
	}
}

// An offer of an algorithm this build does not know is refused: nothing
// opened, the transfer incomplete with CauseHashUnknown, and a report
// that says so to the sender, whose verdict names the receiver so.
func TestUnknownHashAlgRefused(t *testing.T) {
	sink := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
	r := newCore(t, 2, sink, nil)
	err := r.Step(10, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Name: []byte("f"), Alg: 77}))
	if err == nil || !strings.Contains(err.Error(), "hashed with hash(77), an algorithm this build does not know") {
		t.Fatalf("Step: %v", err)
	}
	rep := r.Reports()
	if len(rep) != 1 || rep[0].Kind != Incomplete || rep[0].Cause != CauseHashUnknown || !strings.Contains(rep[0].String(), "hash algorithm unknown") {
		t.Fatalf("reports %v", rep)
	}
	if len(sink.partials) != 0 {
		t.Fatalf("the sink opened %d partial copies", len(sink.partials))
	}
	dsts, vs := sent(t, r)
	if len(vs) != 1 || dsts[0] != macA || vs[0].Flags()&frame.FlagHashAlg == 0 {
		t.Fatalf("sent %v to %v, want one flagged report to the sender", vs, dsts)
	}
	if st := vs[0].FileStatus(); st.State != frame.FileFailed || st.Reason != frame.FileHashUnknown {
		t.Fatalf("report %+v, want failed, hash algorithm unknown", st)
	}
	// More of the file changes nothing.
	r.Step(20, macA, macB, encode(t, 1, 11, 1, 0, &frame.FileDataBody{ID: 4, Data: make([]byte, 10)}))
	if rep := r.Reports(); len(rep) != 0 || len(sink.partials) != 0 {
		t.Fatalf("after a block: reports %v, %d partials", rep, len(sink.partials))
	}

	// The sender's side: the reason names the receiver in the verdict.
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Members = members()[:2] })
	id, _ := s.Send(2, Outgoing{Name: "x", Size: 100, HashAlg: frame.FileHashBLAKE3, Source: &memSource{data: make([]byte, 100), bs: 10, fail: -1}})
	s.Tick(3)
	sent(t, s)
	s.Step(4, macB, macA, encode(t, 2, 22, 1, frame.FlagHashAlg, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileFailed, Reason: frame.FileHashUnknown}))
	var verdicts []Report
	for now := Time(Millisecond); len(verdicts) == 0 && now < Time(Second); now += Time(Millisecond) {
		s.Tick(now)
		verdicts = append(verdicts, s.Reports()...)
		sent(t, s)
	}
	if len(verdicts) != 1 || len(verdicts[0].Missing) != 1 || verdicts[0].Missing[0].Cause != CauseHashUnknown || s.stats.OldReceivers != 0 ||
		!strings.Contains(verdicts[0].String(), "member 2 not done (hash algorithm unknown to the receiver") {
		t.Fatalf("verdicts %v, old receivers %d; want member 2 named for an unknown algorithm", verdicts, s.stats.OldReceivers)
	}
}
