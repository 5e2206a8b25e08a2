package files

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// admitRig is a receiver (member 2) at MaxReceiving 1 with frames from
// members 1 (macA) and 3 (macC) at hand.
type admitRig struct {
	t    *testing.T
	sink *memSink
	r    *Core
	data map[uint32][]byte // by file id
}

func newAdmitRig(t *testing.T) *admitRig {
	sink := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
	return &admitRig{t: t, sink: sink, r: newCore(t, 2, sink, func(c *Config) { c.MaxReceiving = 1 }), data: map[uint32][]byte{}}
}

func (g *admitRig) mac(from frame.MemberID) [6]byte {
	if from == 3 {
		return macC
	}
	return macA
}

// offer steps file id's offer from member from, incarnation inc.
func (g *admitRig) offer(now Time, from frame.MemberID, inc, id uint32) {
	g.t.Helper()
	d := g.data[id]
	v := encode(g.t, from, inc, 0, 0, &frame.FileOfferBody{ID: id, Size: uint64(len(d)), BlockSize: 5, Stamp: 77, Hash: sha256.Sum256(d), Name: fmt.Appendf(nil, "f%d", id)})
	if err := g.r.Step(now, g.mac(from), macB, v); err != nil {
		g.t.Fatal(err)
	}
}

// blocks steps every block of file id.
func (g *admitRig) blocks(now Time, from frame.MemberID, inc, id uint32) {
	g.t.Helper()
	d := g.data[id]
	for b := uint32(0); int(b)*5 < len(d); b++ {
		v := encode(g.t, from, inc, b, 0, &frame.FileDataBody{ID: id, Data: d[b*5 : min(int(b)*5+5, len(d))]})
		if err := g.r.Step(now, g.mac(from), macB, v); err != nil {
			g.t.Fatal(err)
		}
	}
}

// states is the state of each file in the receiver's reports sent
// since the last call, by id.
func (g *admitRig) states() map[uint32]frame.FileState {
	g.t.Helper()
	_, vs := sent(g.t, g.r)
	m := map[uint32]frame.FileState{}
	for _, v := range vs {
		if v.Type() == frame.FileStatus {
			m[v.FileStatus().ID] = v.FileStatus().State
		}
	}
	return m
}

// open is the ids of the transfers whose copy is open.
func (g *admitRig) open() (ids []uint32) {
	for _, t := range g.r.in {
		if t.file != nil {
			ids = append(ids, t.key.id)
		}
	}
	return ids
}

// An offer that comes while MaxReceiving files are being received, of
// a file the sink holds whole, is judged at once: reported done, the
// file held, without waiting for a file being received to end. It
// waited, asking for its offer, as long as the transfer open took.
func TestHeldFileNotWaiting(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(g *admitRig, held []byte)
		// most: copies open at once; a partial copy held whole opens
		// for the step that judges it.
		most int
	}{
		{"stored", func(g *admitRig, held []byte) { g.sink.stored["f2"] = held }, 1},
		{"partial complete", func(g *admitRig, held []byte) {
			m := Meta{Name: "f2", Size: uint64(len(held)), BlockSize: 5, Hash: sha256.Sum256(held), HashAlg: frame.FileHashSHA256}
			p := &partial{meta: m, data: append([]byte{}, held...), hashes: map[uint32][32]byte{}, last: -1, sink: g.sink}
			for b := range m.Blocks() {
				p.hashes[b] = sha256.Sum256(p.block(b))
			}
			g.sink.partials[keyOf(m)] = p
		}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newAdmitRig(t)
			g.data[1] = []byte("a file being received")
			g.data[2] = []byte("a file held here whole")
			c.setup(g, g.data[2])
			g.offer(10, 1, 11, 1)
			g.states()
			g.offer(11, 1, 11, 2)
			rs := slices.Clone(g.r.Reports())
			if st := g.states(); st[2] != frame.FileDone {
				t.Fatalf("reports %v, want file 2 done at its offer", st)
			}
			if len(rs) != 1 || rs[0].Kind != Received || !rs[0].Held || rs[0].Meta.ID != 2 {
				t.Fatalf("reports %v, want file 2 received, held already", rs)
			}
			if g.r.stats.FilesDeferred != 0 || g.sink.mostOpen != c.most || g.sink.opened != 1 || string(g.sink.stored["f2"]) != string(g.data[2]) {
				t.Fatalf("%d offers waited, %d copies open at most, %d open, f2 %q stored; want 0, %d, 1 (file 1's), %q", g.r.stats.FilesDeferred, g.sink.mostOpen, g.sink.opened, g.sink.stored["f2"], c.most, g.data[2])
			}
			if ids := g.open(); len(ids) != 1 || ids[0] != 1 {
				t.Fatalf("open %v, want file 1 alone", ids)
			}
		})
	}
}

// A sink that cannot say what it holds (no HoldingSink, or Holds
// false): the held file waits for its turn as before, and is judged
// when it opens.
func TestHeldFileWaitsWithoutHolds(t *testing.T) {
	g := newAdmitRig(t)
	g.sink.noHolds = true
	g.data[1], g.data[2] = []byte("a file being received"), []byte("a file held here whole")
	g.sink.stored["f2"] = g.data[2]
	g.offer(10, 1, 11, 1)
	g.offer(11, 1, 11, 2)
	if st := g.states(); st[2] != frame.FileNeedOffer || g.r.stats.FilesDeferred != 1 {
		t.Fatalf("reports %v, %d waited; want file 2 waiting", st, g.r.stats.FilesDeferred)
	}
	g.blocks(12, 1, 11, 1)
	if st := g.states(); st[1] != frame.FileDone || st[2] != frame.FileDone {
		t.Fatalf("reports %v, want both files done once file 1 is", st)
	}
}

// lyingSink says it holds every file whole.
type lyingSink struct{ *memSink }

func (lyingSink) Holds(Meta) bool { return true }

// A sink that says it holds a file whole whose copy lacks a block after
// all (torn since it looked): the copy closes again, kept, and the
// transfer waits for a slot; it opens, resuming, once file 1 is stored.
func TestHeldFileLackingBlockWaits(t *testing.T) {
	g := newAdmitRig(t)
	g.r = newCore(t, 2, lyingSink{g.sink}, func(c *Config) { c.MaxReceiving = 1 })
	g.data[1], g.data[2] = []byte("a file being received"), []byte("a file held here whole")
	m := Meta{Name: "f2", Size: uint64(len(g.data[2])), BlockSize: 5, Hash: sha256.Sum256(g.data[2]), HashAlg: frame.FileHashSHA256}
	p := &partial{meta: m, data: append([]byte{}, g.data[2]...), hashes: map[uint32][32]byte{}, last: -1, sink: g.sink}
	for b := range m.Blocks() - 1 {
		p.hashes[b] = sha256.Sum256(p.block(b))
	}
	g.sink.partials[keyOf(m)] = p
	g.offer(10, 1, 11, 1)
	g.offer(11, 1, 11, 2)
	if st := g.states(); st[2] != frame.FileNeedOffer || g.r.stats.FilesDeferred != 1 || g.sink.opened != 1 {
		t.Fatalf("reports %v, %d waited, %d open; want file 2 waiting, file 1 alone open", st, g.r.stats.FilesDeferred, g.sink.opened)
	}
	g.blocks(12, 1, 11, 1)
	if ids := g.open(); len(ids) != 1 || ids[0] != 2 || g.r.stats.Resumed != 1 {
		t.Fatalf("open %v, %d resumed; want file 2, resumed from its copy", ids, g.r.stats.Resumed)
	}
}

// A held file whose offer comes without its hash (FileEnd brings it)
// waits; its FileEnd's hash judges it at once.
func TestHeldFileJudgedAtFileEnd(t *testing.T) {
	g := newAdmitRig(t)
	g.data[1], g.data[2] = []byte("a file being received"), []byte("a file held here whole")
	g.sink.stored["f2"] = g.data[2]
	g.offer(10, 1, 11, 1)
	v := encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: 2, Size: uint64(len(g.data[2])), BlockSize: 5, Stamp: 77, Name: []byte("f2")})
	if err := g.r.Step(11, macA, macB, v); err != nil {
		t.Fatal(err)
	}
	if st := g.states(); st[2] != frame.FileNeedOffer {
		t.Fatalf("reports %v, want file 2 waiting (no hash yet)", st)
	}
	end := encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 2, Blocks: 5, Awaited: []frame.MemberID{2}, Hash: sha256.Sum256(g.data[2])})
	if err := g.r.Step(12, macA, macB, end); err != nil {
		t.Fatal(err)
	}
	if st := g.states(); st[2] != frame.FileDone {
		t.Fatalf("reports %v, want file 2 done at its FileEnd", st)
	}
	if ids := g.open(); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("open %v, want file 1 alone", ids)
	}
}

// Waiting offers open in the order they first waited, whatever frame
// frees the slot and whatever order their offers are sent again in. A
// sender that restarts (file A, member 3) frees A's slot in the step of
// its new incarnation's offer (D): that offer had opened at once, ahead
// of B and C (member 1), which had waited since before it.
func TestWaitingOpenInOrder(t *testing.T) {
	g := newAdmitRig(t)
	for id, s := range map[uint32]string{1: "file A, open", 2: "file B, waits first", 3: "file C, waits next", 4: "file D, A's sender's next run"} {
		g.data[id] = []byte(s)
	}
	g.offer(10, 3, 33, 1) // A
	g.offer(11, 1, 11, 2) // B
	g.offer(12, 1, 11, 3) // C
	g.states()
	g.offer(13, 3, 34, 4) // D, from A's sender restarted: A ends
	g.offer(14, 1, 11, 3) // C again before B
	g.offer(15, 1, 11, 2)
	if ids := g.open(); len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("open %v, want file B (2) alone: it waited first", ids)
	}
	order := []uint32{2}
	for _, next := range []uint32{3, 4} {
		last := order[len(order)-1]
		from, inc := frame.MemberID(1), uint32(11)
		if last == 4 {
			from, inc = 3, 34
		}
		g.blocks(Time(20+last), from, inc, last)
		if ids := g.open(); len(ids) != 1 || ids[0] != next {
			t.Fatalf("file %d stored, open %v; want file %d alone (opened in the order %v, then it)", last, ids, next, order)
		}
		order = append(order, next)
	}
}

// A copy the sink holds whole whose hash is not the offer's (every
// block verifies, the file does not: a crash between the last block
// and the hash check) is judged at once and fails the check; the
// transfer then fetches the file again, but not beyond MaxReceiving:
// it waits for file 1 to end, emptied, and then receives it whole.
func TestHeldFileMismatchWaits(t *testing.T) {
	g := newAdmitRig(t)
	g.data[1], g.data[2] = []byte("a file being received"), []byte("a file held here whole")
	m := Meta{Name: "f2", Size: uint64(len(g.data[2])), BlockSize: 5, Hash: sha256.Sum256(g.data[2]), HashAlg: frame.FileHashSHA256}
	other := []byte("another file, as long")
	other = append(other, make([]byte, len(g.data[2])-len(other))...)
	p := &partial{meta: m, data: other, hashes: map[uint32][32]byte{}, last: -1, sink: g.sink}
	for b := range m.Blocks() {
		p.hashes[b] = sha256.Sum256(p.block(b))
	}
	g.sink.partials[keyOf(m)] = p
	g.offer(10, 1, 11, 1)
	g.offer(11, 1, 11, 2)
	if ids := g.open(); len(ids) != 1 || ids[0] != 1 || g.sink.opened != 1 || g.r.opened != 1 {
		t.Fatalf("open %v (%d in the sink, %d counted), want file 1 alone: MaxReceiving is 1", ids, g.sink.opened, g.r.opened)
	}
	if st := g.states(); st[2] != frame.FileNeedOffer || g.r.stats.HashMismatches != 1 {
		t.Fatalf("reports %v, %d mismatches; want file 2 waiting after one", st, g.r.stats.HashMismatches)
	}
	g.blocks(12, 1, 11, 1)
	if ids := g.open(); len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("open %v, want file 2 once file 1 is stored", ids)
	}
	g.blocks(13, 1, 11, 2)
	if st := g.states(); st[2] != frame.FileDone || string(g.sink.stored["f2"]) != string(g.data[2]) {
		t.Fatalf("reports %v, f2 %q stored; want file 2 done, %q", st, g.sink.stored["f2"], g.data[2])
	}
}

// So too for an offer without a hash judged at its FileEnd: the copies
// the sink holds whole under either key (the offer's, keyed by its
// sender, and FileEnd's hash) both fail the hash; the transfer waits,
// in its place, and is fetched whole once file 1 ends.
func TestHeldFileMismatchAtFileEndWaits(t *testing.T) {
	g := newAdmitRig(t)
	g.data[1], g.data[2] = []byte("a file being received"), []byte("a file held here whole")
	m := Meta{Sender: 1, Name: "f2", Size: uint64(len(g.data[2])), BlockSize: 5, HashAlg: frame.FileHashSHA256}
	for _, h := range [][32]byte{{}, sha256.Sum256(g.data[2])} {
		m.Hash = h
		other := []byte("another file, as long")
		other = append(other, make([]byte, len(g.data[2])-len(other))...)
		p := &partial{meta: m, data: other, hashes: map[uint32][32]byte{}, last: -1, sink: g.sink}
		for b := range m.Blocks() {
			p.hashes[b] = sha256.Sum256(p.block(b))
		}
		g.sink.partials[keyOf(m)] = p
	}
	g.offer(10, 1, 11, 1)
	v := encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: 2, Size: uint64(len(g.data[2])), BlockSize: 5, Stamp: 77, Name: []byte("f2")})
	if err := g.r.Step(11, macA, macB, v); err != nil {
		t.Fatal(err)
	}
	end := encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 2, Blocks: 5, Awaited: []frame.MemberID{2}, Hash: sha256.Sum256(g.data[2])})
	if err := g.r.Step(12, macA, macB, end); err != nil {
		t.Fatal(err)
	}
	if ids := g.open(); len(ids) != 1 || ids[0] != 1 || g.sink.opened != 1 || g.r.opened != 1 {
		t.Fatalf("open %v (%d in the sink, %d counted), want file 1 alone: MaxReceiving is 1", ids, g.sink.opened, g.r.opened)
	}
	if st := g.states(); st[2] != frame.FileNeedOffer || len(g.r.waiting) != 1 {
		t.Fatalf("reports %v, %d waiting; want file 2 waiting", st, len(g.r.waiting))
	}
	g.blocks(13, 1, 11, 1)
	if ids := g.open(); len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("open %v, want file 2 once file 1 is stored", ids)
	}
	g.blocks(14, 1, 11, 2)
	if st := g.states(); st[2] != frame.FileDone || string(g.sink.stored["f2"]) != string(g.data[2]) {
		t.Fatalf("reports %v, f2 %q stored; want file 2 done, %q", st, g.sink.stored["f2"], g.data[2])
	}
}
