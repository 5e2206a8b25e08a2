package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

var update = flag.Bool("update", false, "rewrite testdata's golden vectors")

// wire is a fake segment: what one fake link sends, every other receives.
type wire struct{ links []*fake }

type fake struct {
	w     *wire
	mac   [6]byte
	queue [][]byte
	sent  [][]byte
	rxbuf [][]byte
	// outgoing marks every frame Recv returns link.Frame.Outgoing.
	outgoing bool
}

func (w *wire) attach(mac byte) *fake {
	f := &fake{w: w, mac: [6]byte{2, 0, 0, 0, 0, mac}}
	w.links = append(w.links, f)
	return f
}

func (f *fake) Send(frames [][]byte) (int, error) {
	for _, b := range frames {
		f.sent = append(f.sent, append([]byte(nil), b...))
		for _, o := range f.w.links {
			if o != f {
				o.queue = append(o.queue, append([]byte(nil), b...))
			}
		}
	}
	return len(frames), nil
}

func (f *fake) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n := 0
	for n < len(frames) && len(f.queue) > 0 {
		frames[n] = link.Frame{Data: f.queue[0], Outgoing: f.outgoing}
		f.queue = f.queue[1:]
		n++
	}
	if n == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	return n, nil
}
func (f *fake) MTU() int                       { return 1500 }
func (f *fake) HardwareAddr() net.HardwareAddr { return f.mac[:] }
func (f *fake) Stats() (link.Stats, error)     { return link.Stats{}, nil }
func (f *fake) Close() error                   { return nil }

func testKey(t testing.TB, seed byte) *Key {
	secret := make([]byte, KeySize)
	for i := range secret {
		secret[i] = seed + byte(i)
	}
	k, err := NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var epoch = time.Unix(1_800_000_000, 0)

func wrap(t testing.TB, l link.Link, k *Key, encrypt bool) *Link {
	a, err := Wrap(l, Config{Group: 7, Key: k, Encrypt: encrypt, Now: func() time.Time { return epoch }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// dataFrame is a Data frame of group 7 from src, as a core encodes it.
func dataFrame(t testing.TB, src [6]byte, sender frame.MemberID, inc, seq uint32, payload string) []byte {
	b := frame.AppendEthernet(nil, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src, frame.EtherType)
	h := frame.Header{Group: 7, Sender: sender, Incarnation: inc, Seq: seq, Acks: []uint32{1, 2}}
	b, err := frame.Append(b, &h, &frame.Payload{T: frame.Data, Data: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func recvAll(t testing.TB, l link.Link) [][]byte {
	rx := make([]link.Frame, 16)
	var out [][]byte
	for {
		n, err := l.Recv(time.Time{}, rx)
		for _, f := range rx[:n] {
			out = append(out, append([]byte(nil), f.Data...))
		}
		if n == 0 {
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			return out
		}
	}
}

// payloadOf is the payload of a frame that verified: parsed without its
// CRC, as the runtime parses a frame marked Authenticated.
func payloadOf(t testing.TB, eth []byte) string {
	_, b, err := frame.SplitEthernet(eth, frame.EtherType)
	if err != nil {
		t.Fatal(err)
	}
	v, err := frame.ParseNoCRC(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(v.Payload())
}

func TestRoundTrip(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		w := &wire{}
		fa, fb := w.attach(1), w.attach(2)
		k := testKey(t, 1)
		a, b := wrap(t, fa, k, encrypt), wrap(t, fb, k, encrypt)
		if a.MTU() != 1500-Overhead {
			t.Fatalf("MTU %d, want %d", a.MTU(), 1500-Overhead)
		}
		if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 0, 5, 1, "hello"), dataFrame(t, fa.mac, 0, 5, 2, "world")}); err != nil {
			t.Fatal(err)
		}
		onWire := bytes.Contains(fa.sent[0], []byte("hello"))
		if onWire == encrypt {
			t.Fatalf("encrypt=%v: payload visible on the wire: %v", encrypt, onWire)
		}
		got := recvAll(t, b)
		if len(got) != 2 || payloadOf(t, got[0]) != "hello" || payloadOf(t, got[1]) != "world" {
			t.Fatalf("encrypt=%v: received %d frames", encrypt, len(got))
		}
		if s := b.Auth(); s.Verified != 2 || s.Dropped() != 0 {
			t.Fatalf("encrypt=%v: stats %+v", encrypt, s)
		}
	}
}

// TestEncryptedStructuredBodies: frames whose body has a structure (a Nack's
// ranges) are encrypted, parse sealed on the wire (frame.ParseSealed
// leaves an encrypted body alone), and arrive with their plaintext body
// whole. With frame.Parse the verifier could not parse them, passed them
// unjudged, and the stepper dropped them as malformed: every encrypted
// Nack, Join and view frame was lost.
func TestEncryptedStructuredBodies(t *testing.T) {
	w := &wire{}
	fa, fb := w.attach(1), w.attach(2)
	k := testKey(t, 1)
	a, b := wrap(t, fa, k, true), wrap(t, fb, k, true)
	nack := frame.AppendEthernet(nil, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, fa.mac, frame.EtherType)
	nack, err := frame.Append(nack, &frame.Header{Group: 7, Sender: 0, Incarnation: 5, Seq: 3},
		&frame.NackBody{Target: 1, Ranges: []frame.Range{{First: 2, Last: 9}, {First: 12, Last: 12}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send([][]byte{nack}); err != nil {
		t.Fatal(err)
	}
	_, sealed, _ := frame.SplitEthernet(fa.sent[0], frame.EtherType)
	if _, err := frame.ParseSealed(sealed); err != nil {
		t.Fatalf("an encrypted Nack does not parse sealed on the wire: %v", err)
	}
	got := recvAll(t, b)
	if len(got) != 1 {
		t.Fatalf("received %d frames, want the Nack (stats %+v)", len(got), b.Auth())
	}
	_, body, _ := frame.SplitEthernet(got[0], frame.EtherType)
	v, err := frame.ParseNoCRC(body)
	if err != nil {
		t.Fatalf("the decrypted Nack does not parse: %v", err)
	}
	if r := v.NackRanges(); v.NackTarget() != 1 || r.Len() != 2 || r.At(0) != (frame.Range{First: 2, Last: 9}) || r.At(1) != (frame.Range{First: 12, Last: 12}) {
		t.Fatalf("decrypted Nack to %d, %d ranges", v.NackTarget(), r.Len())
	}
}

// TestRecvMarksAuthenticated: Recv marks the frames that verified, and
// only those, Authenticated; the wire's CRC is left as it was (a MAC's
// frame keeps a valid one, an encrypted body's plaintext does not, and
// the runtime reads neither). A bit flipped anywhere in the rbcast frame,
// the CRC recomputed or not, still never reaches a core: auth drops it,
// counted by reason, or passes it unmarked (not a frame of its group, or
// a CRC that does not match: then corruption, not forgery) and
// frame.ParseGroup, which the runtime uses for an unmarked frame, refuses
// it. Only a flip in the CRC itself, which the tag does not cover,
// verifies: the frame's bytes are the sender's, so it is delivered.
// Each frame comes with and without room behind it (link.Frame.Data's
// capacity, where an encrypted body is opened with its tag behind it):
// the verdicts are the same, and the room is given back as it was.
func TestRecvMarksAuthenticated(t *testing.T) {
	for _, room := range []int{0, TagLen} {
		t.Run(fmt.Sprintf("room=%d", room), func(t *testing.T) { recvMarksAuthenticated(t, room) })
	}
}

// lent is a copy of f with room bytes of capacity behind it, filled with
// a pattern (lentIntact checks it).
func lent(f []byte, room int) []byte {
	b := make([]byte, len(f), len(f)+room)
	copy(b, f)
	for i := range b[len(f):cap(b)] {
		b[len(f):cap(b)][i] = byte(0x5a + i)
	}
	return b
}

func lentIntact(t *testing.T, b []byte) {
	t.Helper()
	for i, c := range b[len(b):cap(b)] {
		if c != byte(0x5a+i) {
			t.Fatalf("byte %d of the room behind the frame was %#02x, not put back", i, c)
		}
	}
}

func recvMarksAuthenticated(t *testing.T, room int) {
	for _, encrypt := range []bool{false, true} {
		w := &wire{}
		fa, fb := w.attach(1), w.attach(2)
		k := testKey(t, 1)
		a, b := wrap(t, fa, k, encrypt), wrap(t, fb, k, encrypt)
		if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 0, 5, 1, "hello")}); err != nil {
			t.Fatal(err)
		}
		sealed := fa.sent[0]
		fb.queue = nil
		rx := make([]link.Frame, 4)
		hl := frame.EthernetHeaderLen
		crcAt := len(sealed) - frame.CRCLen
		for i := hl; i < crcAt; i++ {
			for bit := range 8 {
				for _, reseal := range []bool{false, true} {
					f := lent(sealed, room)
					f[i] ^= 1 << bit
					if reseal {
						frame.SetCRC(f[hl:])
					}
					sent := bytes.Clone(f)
					before := b.Auth().Dropped()
					fb.queue = append(fb.queue, f)
					n, _ := b.Recv(time.Time{}, rx)
					dropped := b.Auth().Dropped() - before
					lentIntact(t, f)
					if n == 0 && !bytes.Equal(f, sent) {
						t.Fatalf("encrypt=%v: byte %d bit %d (CRC recomputed %v): dropped, but changed", encrypt, i, bit, reseal)
					}
					switch {
					case n == 0 && dropped == 1:
					case n == 1 && dropped == 0 && !rx[0].Authenticated:
						if _, err := frame.ParseGroup(rx[0].Data[hl:], 7); err == nil {
							t.Fatalf("encrypt=%v: byte %d bit %d (CRC recomputed %v): passed unmarked and parses", encrypt, i, bit, reseal)
						}
					default:
						t.Fatalf("encrypt=%v: byte %d bit %d (CRC recomputed %v): %d frames passed (authenticated %v), %d dropped", encrypt, i, bit, reseal, n, n > 0 && rx[0].Authenticated, dropped)
					}
				}
			}
		}
		if s := b.Auth(); s.Verified != 0 || s.BadTag == 0 {
			t.Fatalf("encrypt=%v: after the flips, stats %+v", encrypt, s)
		}
		// A flip in the CRC: the tag verifies, the frame is marked.
		f := lent(sealed, room)
		f[len(f)-1] ^= 1
		fb.queue = append(fb.queue, f)
		if n, _ := b.Recv(time.Time{}, rx); n != 1 || !rx[0].Authenticated || payloadOf(t, rx[0].Data) != "hello" {
			t.Fatalf("encrypt=%v: the CRC flipped: %d frames, authenticated %v", encrypt, n, n > 0 && rx[0].Authenticated)
		}
		lentIntact(t, f)
		// The genuine frames of the stream are marked; the wire's CRC
		// stays (valid for the MAC, stale over a decrypted body).
		if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 0, 5, 2, "world")}); err != nil {
			t.Fatal(err)
		}
		wireCRC := frame.View(fa.sent[1][hl:]).CRC()
		n, _ := b.Recv(time.Time{}, rx)
		if n != 1 || !rx[0].Authenticated || payloadOf(t, rx[0].Data) != "world" {
			t.Fatalf("encrypt=%v: genuine frame: %d frames, authenticated %v", encrypt, n, n > 0 && rx[0].Authenticated)
		}
		v := frame.View(rx[0].Data[hl:])
		if v.CRC() != wireCRC || v.CRCValid() == encrypt {
			t.Fatalf("encrypt=%v: received CRC %08x (valid %v), the wire's %08x", encrypt, v.CRC(), v.CRCValid(), wireCRC)
		}
		// What pcap-replay calls, Verifier.Check, still rewrites it.
		if encrypt {
			if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 0, 5, 3, "again")}); err != nil {
				t.Fatal(err)
			}
			f := append([]byte(nil), fa.sent[2]...)
			vf, _ := NewVerifier(Config{Group: 7, Key: k, Encrypt: true})
			if err := vf.Check(f); err != nil {
				t.Fatal(err)
			}
			if _, err := frame.Parse(f[hl:]); err != nil {
				t.Fatalf("Check's decrypted frame does not parse with its CRC: %v", err)
			}
		}
	}
}

// TestRejections sends a recorded frame again, a bit-flipped one with its
// CRC recomputed, one under another key, one without authentication, one
// far behind the window and one of an earlier incarnation: each is
// dropped and counted by its reason, and the genuine ones pass.
func TestRejections(t *testing.T) {
	w := &wire{}
	fa, fb, rogue := w.attach(1), w.attach(2), w.attach(3)
	k := testKey(t, 1)
	a, b := wrap(t, fa, k, false), wrap(t, fb, k, false)
	send := func(f []byte) {
		t.Helper()
		if _, err := a.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
	}
	inject := func(f []byte) {
		t.Helper()
		fb.queue = append(fb.queue, f)
	}
	send(dataFrame(t, fa.mac, 0, 5, 1, "one"))
	first := fa.sent[0]
	if got := recvAll(t, b); len(got) != 1 {
		t.Fatalf("genuine frame: %d received", len(got))
	}

	inject(first) // replay
	// A bit flipped (the CRC recomputed) in a frame not received yet:
	// refused, and the genuine frame still passes after it.
	send(dataFrame(t, fa.mac, 0, 5, 2, "two"))
	genuine := fb.queue[len(fb.queue)-1]
	fb.queue = fb.queue[:len(fb.queue)-1]
	flipped := append([]byte(nil), genuine...)
	flipped[len(flipped)-6] ^= 1
	frame.SetCRC(flipped[frame.EthernetHeaderLen:])
	inject(flipped)
	inject(genuine)
	if got := recvAll(t, b); len(got) != 1 || payloadOf(t, got[0]) != "two" {
		t.Fatalf("flipped then genuine: %d passed", len(got))
	}
	other := wrap(t, rogue, testKey(t, 9), false)
	other.Send([][]byte{dataFrame(t, fa.mac, 0, 5, 2, "forged")})
	inject(dataFrame(t, fa.mac, 0, 5, 3, "plain"))
	if got := recvAll(t, b); len(got) != 0 {
		t.Fatalf("%d bad frames passed", len(got))
	}
	s := b.Auth()
	if s.Replay != 1 || s.BadTag != 1 || s.UnknownKey+s.BadTag != 2 || s.Unauthenticated != 1 {
		t.Fatalf("drops %+v", s)
	}

	for i := range windowSize + 10 {
		send(dataFrame(t, fa.mac, 0, 5, uint32(10+i), "more"))
	}
	recvAll(t, b)
	inject(fa.sent[2]) // behind the window now
	if got := recvAll(t, b); len(got) != 0 || b.Auth().TooOld != 1 {
		t.Fatalf("old frame: %d passed, stats %+v", len(got), b.Auth())
	}

	// The member restarts (same MAC and id, new incarnation, the clock
	// later): its old run's frames are refused once the new one spoke.
	old := fa.sent[5]
	before := b.Auth().Dropped()
	a2, err := Wrap(fa, Config{Group: 7, Key: k, Now: func() time.Time { return epoch.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	a2.Send([][]byte{dataFrame(t, fa.mac, 0, 6, 1, "new run")})
	fb.queue = append(fb.queue, old)
	got := recvAll(t, b)
	if len(got) != 1 || payloadOf(t, got[0]) != "new run" || b.Auth().Dropped() != before+1 {
		t.Fatalf("restart: %d passed (%q), dropped %d before, stats %+v", len(got), payloadOf(t, got[0]), before, b.Auth())
	}
	var de *DropError
	if err := b.v.Check(old); !errors.As(err, &de) || !strings.Contains(err.Error(), "") {
		t.Fatalf("Check(old) = %v", err)
	}
}

// TestEarlierIncarnation: a frame of an earlier run that this receiver
// never saw (lost, then replayed) is refused once the new run spoke.
func TestEarlierIncarnation(t *testing.T) {
	w := &wire{}
	fa, fb := w.attach(1), w.attach(2)
	k := testKey(t, 1)
	a, b := wrap(t, fa, k, false), wrap(t, fb, k, false)
	a.Send([][]byte{dataFrame(t, fa.mac, 4, 5, 1, "old run")})
	fb.queue = nil // lost
	a2, _ := Wrap(fa, Config{Group: 7, Key: k, Now: func() time.Time { return epoch.Add(time.Minute) }})
	a2.Send([][]byte{dataFrame(t, fa.mac, 4, 6, 1, "new run")})
	recvAll(t, b)
	fb.queue = append(fb.queue, fa.sent[0])
	if got := recvAll(t, b); len(got) != 0 || b.Auth().EarlierIncarnation != 1 {
		t.Fatalf("%d passed, stats %+v", len(got), b.Auth())
	}
	_ = a
}

// TestOwnReplayed: a station's own frames sent back to it by another
// (replayed) are dropped and counted, though it keeps no replay window of
// its own stream; an outgoing copy (link.Frame.Outgoing) and the frames
// of another member on the same MAC still verify.
func TestOwnReplayed(t *testing.T) {
	w := &wire{}
	fa, fb := w.attach(1), w.attach(2)
	k := testKey(t, 1)
	a, b := wrap(t, fa, k, false), wrap(t, fb, k, false)
	for i := range 3 {
		a.Send([][]byte{dataFrame(t, fa.mac, 4, 5, uint32(1+i), "mine")})
	}
	recvAll(t, b)
	fa.queue = append(fa.queue, fa.sent[0], fa.sent[1])
	if got := recvAll(t, a); len(got) != 0 {
		t.Fatalf("own frames replayed: %d passed, stats %+v", len(got), a.Auth())
	}
	if s := a.Auth(); s.Own != 2 || s.Dropped() != 2 || s.Verified != 0 {
		t.Fatalf("own frames replayed: stats %+v, want Own 2", s)
	}
	var de *DropError
	if _, err := a.v.check(fa.sent[0], false); !errors.As(err, &de) || !strings.Contains(err.Error(), "own member id from its own MAC") {
		t.Fatalf("check(own) = %v", err)
	}

	fa.outgoing = true
	fa.queue = append(fa.queue, fa.sent[2])
	if got := recvAll(t, a); len(got) != 1 || payloadOf(t, got[0]) != "mine" {
		t.Fatalf("outgoing copy: %d passed, stats %+v", len(got), a.Auth())
	}
	fa.outgoing = false

	c := wrap(t, w.attach(1), k, false) // another member behind the same MAC
	c.Send([][]byte{dataFrame(t, fa.mac, 9, 5, 1, "theirs")})
	if got := recvAll(t, a); len(got) != 1 || payloadOf(t, got[0]) != "theirs" {
		t.Fatalf("another member on this MAC: %d passed, stats %+v", len(got), a.Auth())
	}
	if got := recvAll(t, b); len(got) != 1 {
		t.Fatalf("b: %d frames of member 9", len(got))
	}
}

// TestKeyMismatch: a joiner with another key is told so, and its Recv
// fails with an error that names a key mismatch and both fingerprints.
func TestKeyMismatch(t *testing.T) {
	for _, joinerKey := range []*Key{testKey(t, 9), nil} {
		w := &wire{}
		fm, fj := w.attach(1), w.attach(2)
		k := testKey(t, 1)
		m := wrap(t, fm, k, false)
		join := frame.AppendEthernet(nil, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, fj.mac, frame.EtherType)
		h := frame.Header{Group: 7, Sender: frame.NoMember, Incarnation: 3}
		join, _ = frame.Append(join, &h, &frame.ViewJoinBody{Requested: frame.NoMember, Nonce: 1, MTU: 1500})
		var j link.Link = fj
		if joinerKey != nil {
			jl := wrap(t, fj, joinerKey, false)
			j = jl
		}
		if _, err := j.Send([][]byte{join}); err != nil {
			t.Fatal(err)
		}
		recvAll(t, m)
		m.Send([][]byte{dataFrame(t, fm.mac, 0, 1, 1, "heartbeat")})
		if m.Auth().MismatchesSent != 1 {
			t.Fatalf("member sent %d KeyMismatch", m.Auth().MismatchesSent)
		}
		if joinerKey == nil {
			got := fj.queue[0]
			_, b, _ := frame.SplitEthernet(got, frame.EtherType)
			v, err := frame.Parse(b)
			if err != nil || v.Type() != frame.KeyMismatch || v.KeyMismatch().Reason != frame.MismatchUnauthenticated {
				t.Fatalf("keyless joiner got %x (%v)", got, err)
			}
			continue
		}
		_, err := j.Recv(time.Time{}, make([]link.Frame, 4))
		var me *MismatchError
		if !errors.Is(err, ErrKeyMismatch) || !errors.As(err, &me) || me.Theirs != k.Fingerprint() || !strings.Contains(err.Error(), "key mismatch") || !strings.Contains(err.Error(), k.String()) {
			t.Fatalf("joiner's Recv: %v", err)
		}
	}
}

// An Admitted link (rbcastd's files' link) counts what would stop a
// joiner's — unauthenticated frames of its group, a KeyMismatch sent to
// it — and goes on: a rogue's few frames cannot end its Recv.
func TestAdmittedNeverFails(t *testing.T) {
	for _, admitted := range []bool{false, true} {
		w := &wire{}
		fm, rogue, peer := w.attach(1), w.attach(2), w.attach(3)
		k := testKey(t, 1)
		m, err := Wrap(fm, Config{Group: 7, Key: k, Now: func() time.Time { return epoch }, Admitted: admitted})
		if err != nil {
			t.Fatal(err)
		}
		for i := range unauthLimit {
			rogue.Send([][]byte{dataFrame(t, rogue.mac, 1, 1, uint32(i), "forged")})
		}
		mis := frame.AppendEthernet(nil, fm.mac, rogue.mac, frame.EtherType)
		h := frame.Header{Group: 7, Sender: 1, Incarnation: 1}
		mis, _ = frame.Append(mis, &h, &frame.KeyMismatchBody{Reason: frame.MismatchKey, Refused: frame.ViewJoin, Fingerprint: 42})
		rogue.Send([][]byte{mis})
		_, err = m.Recv(time.Time{}, make([]link.Frame, 16))
		if !admitted {
			if !errors.Is(err, ErrKeyMismatch) {
				t.Fatalf("a joiner's link: Recv %v, want a key mismatch", err)
			}
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an admitted link: Recv %v, want only the deadline", err)
		}
		p := wrap(t, peer, k, false)
		p.Send([][]byte{dataFrame(t, peer.mac, 2, 1, 1, "real")})
		got := recvAll(t, m)
		if len(got) != 1 || payloadOf(t, got[0]) != "real" {
			t.Fatalf("an admitted link after the rogue received %d frames, want the peer's one", len(got))
		}
		// The KeyMismatch, unauthenticated, counts as one too.
		if st := m.Auth(); st.Unauthenticated != unauthLimit+1 || st.MismatchesReceived != 1 || st.Verified != 1 {
			t.Fatalf("an admitted link's counters: %+v", st)
		}
	}
}

// TestGolden: a Data frame sealed with the test key, counter and both
// algorithms, byte for byte (testdata/*.hex; -update rewrites them).
func TestGolden(t *testing.T) {
	for _, c := range []struct {
		name    string
		encrypt bool
	}{{"data_gmac", false}, {"data_gcm", true}} {
		w := &wire{}
		fa := w.attach(1)
		w.attach(2)
		a := wrap(t, fa, testKey(t, 0), c.encrypt)
		if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 1, 5, 42, "authenticated payload")}); err != nil {
			t.Fatal(err)
		}
		got := hex.EncodeToString(fa.sent[0])
		path := filepath.Join("testdata", c.name+".hex")
		if *update {
			os.MkdirAll("testdata", 0o755)
			os.WriteFile(path, []byte(got+"\n"), 0o644)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != strings.TrimSpace(string(want)) {
			t.Fatalf("%s: sealed\n%s\nwant\n%s", c.name, got, want)
		}
		// And the vector verifies with the key.
		v, _ := NewVerifier(Config{Group: 7, Key: testKey(t, 0), Encrypt: c.encrypt})
		if err := v.Check(fa.sent[0]); err != nil || payloadOf(t, fa.sent[0]) != "authenticated payload" {
			t.Fatalf("%s: verifying the vector: %v", c.name, err)
		}
	}
}

// TestRotation: a member installs the new key, accepts both, switches
// sending when told, and retires the old.
func TestRotation(t *testing.T) {
	w := &wire{}
	fa, fb := w.attach(1), w.attach(2)
	old, next := testKey(t, 1), testKey(t, 2)
	if old.ID() == next.ID() {
		t.Skip("test keys share an id")
	}
	a, b := wrap(t, fa, old, false), wrap(t, fb, old, false)
	if err := b.Install(next); err != nil {
		t.Fatal(err)
	}
	if err := a.Install(next); err != nil {
		t.Fatal(err)
	}
	if err := a.Activate(next.Fingerprint()); err != nil {
		t.Fatal(err)
	}
	a.Send([][]byte{dataFrame(t, fa.mac, 0, 1, 1, "under the new key")})
	if got := recvAll(t, b); len(got) != 1 {
		t.Fatalf("frame under the installed key refused: %+v", b.Auth())
	}
	b.Retire() // b still sends under old; it no longer accepts next
	a.Send([][]byte{dataFrame(t, fa.mac, 0, 1, 2, "again")})
	if got := recvAll(t, b); len(got) != 0 || b.Auth().UnknownKey != 1 {
		t.Fatalf("after Retire: %d passed, %+v", len(got), b.Auth())
	}
	if s := a.Auth(); s.Active != next.Fingerprint() || len(s.Accepted) != 2 {
		t.Fatalf("a's keys %+v", s)
	}
	if err := a.Activate(12345); err == nil {
		t.Fatal("activating a key never installed")
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "group.key")
	k, err := Generate(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Load(path)
	if err != nil || l.Fingerprint() != k.Fingerprint() {
		t.Fatalf("Load: %v", err)
	}
	if _, err := Generate(path, nil); err == nil {
		t.Fatal("Generate overwrote a key file")
	}
	os.Chmod(path, 0o644)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abcd\n"), 0o600)
	if _, err := Load(short); !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), "64 hexadecimal digits") {
		t.Fatalf("short key: %v", err)
	}
}

// sink keeps a copy of the last frame sent, in a buffer it reuses.
type sink struct {
	fake
	last []byte
}

func (s *sink) Send(frames [][]byte) (int, error) {
	s.last = append(s.last[:0], frames[len(frames)-1]...)
	return len(frames), nil
}

// TestSteadyStateAllocs: sealing and verifying allocate nothing once the
// streams are known.
func TestSteadyStateAllocs(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		sa := &sink{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}, last: make([]byte, 0, 2000)}
		k := testKey(t, 1)
		a := wrap(t, sa, k, encrypt)
		v, _ := NewVerifier(Config{Group: 7, Key: k, Encrypt: encrypt})
		f := [][]byte{dataFrame(t, sa.mac, 0, 5, 1, strings.Repeat("x", 1400))}
		run := func() {
			if _, err := a.Send(f); err != nil {
				t.Fatal(err)
			}
			if err := v.Check(sa.last); err != nil {
				t.Fatal(err)
			}
		}
		run()
		if n := testing.AllocsPerRun(200, run); n != 0 {
			t.Fatalf("encrypt=%v: %.1f allocations per frame sent and verified", encrypt, n)
		}
	}
}

// FuzzCheck: whatever arrives, Check never panics, and a frame that
// verifies is one a member sealed: a frame of the group that passes has
// an auth section, and its authenticated bytes (after the Ethernet
// header, up to its CRC), as they arrived (before Check decrypts them),
// are those of a frame sealed with the key, in the clear or encrypted. The input is
// mutated once more (a byte flipped, the CRC rewritten), so that the
// fuzzer can flip a byte of a sealed frame and keep its CRC right.
func FuzzCheck(f *testing.F) {
	w := &wire{}
	fa := w.attach(1)
	w.attach(2)
	k := testKey(f, 1)
	for _, encrypt := range []bool{false, true} {
		a := wrap(f, fa, k, encrypt)
		a.Send([][]byte{dataFrame(f, fa.mac, 0, 5, 1, "seed payload")})
	}
	sealed := fa.sent // the only frames sealed with k
	for _, s := range sealed {
		f.Add(s, false, uint16(0), byte(0))
	}
	f.Add(sealed[1], true, uint16(60), byte(4))
	// A sealed frame that arrived with its CRC corrupted, the mutation
	// flipping the CRC's byte back: the sealed frame again.
	for i, s := range sealed {
		bad := append([]byte(nil), s...)
		bad[len(bad)-1] ^= 0x40
		f.Add(bad, i == 1, uint16(len(bad)-1), byte(0x40))
	}
	f.Fuzz(func(t *testing.T, b []byte, encrypt bool, at uint16, flip byte) {
		// A copy: the fuzzer writes a failing input out as the function
		// left it, and the flip and Check change it in place.
		b = bytes.Clone(b)
		if len(b) > 0 {
			b[int(at)%len(b)] ^= flip
			if len(b) > frame.EthernetHeaderLen+frame.Overhead {
				frame.SetCRC(b[frame.EthernetHeaderLen:])
			}
		}
		arrived := append([]byte(nil), b...) // Check decrypts in place
		v, _ := NewVerifier(Config{Group: 7, Key: k, Encrypt: encrypt})
		if v.Check(b) != nil {
			return
		}
		// It passed: it must be unjudged (not a valid frame of the group)
		// or a sealed frame.
		_, body, e := frame.SplitEthernet(b, frame.EtherType)
		if e != nil {
			return
		}
		fv, e := frame.ParseGroup(body, 7)
		if e != nil {
			return
		}
		if _, _, ok := fv.Auth(); !ok {
			t.Fatalf("a frame of the group without an auth section passed:\n%x", arrived)
		}
		// The authenticated bytes: without the CRC (the MAC covers what
		// it does; a frame whose tag verifies is not judged by its CRC)
		// and the bytes past the frame's length (an Ethernet frame's
		// padding).
		_, in, _ := frame.SplitEthernet(arrived, frame.EtherType)
		in = in[:len(fv)-frame.CRCLen]
		if !slices.ContainsFunc(sealed, func(s []byte) bool { return bytes.Equal(s[frame.EthernetHeaderLen:len(s)-frame.CRCLen], in) }) {
			t.Fatalf("a frame no member sealed verified:\n%x", arrived)
		}
	})
}

// TestEncryptedFailureKeepsFrame: Open decrypts straight into the frame,
// and a failed Open zeroes what it wrote; the verifier puts the ciphertext
// back. A forged frame (a bit flipped, the CRC recomputed) is dropped and
// left as it arrived, and a corrupted one (the CRC not recomputed) passes
// unjudged, its bytes as they arrived, for the stepper to count by its
// checksum; the genuine frame then still decrypts.
func TestEncryptedFailureKeepsFrame(t *testing.T) {
	w := &wire{}
	fa := w.attach(1)
	k := testKey(t, 1)
	a := wrap(t, fa, k, true)
	if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 0, 5, 1, strings.Repeat("secret ", 20))}); err != nil {
		t.Fatal(err)
	}
	genuine := fa.sent[0]
	v, _ := NewVerifier(Config{Group: 7, Key: k, Encrypt: true})
	for _, recrc := range []bool{true, false} {
		bad := append([]byte(nil), genuine...)
		bad[len(bad)-frame.CRCLen-3] ^= 0x10 // in the body
		if recrc {
			frame.SetCRC(bad[frame.EthernetHeaderLen:])
		}
		arrived := append([]byte(nil), bad...)
		err := v.Check(bad)
		if recrc && !errors.Is(err, ErrDropped) || !recrc && err != nil {
			t.Fatalf("CRC recomputed %v: Check = %v", recrc, err)
		}
		if !bytes.Equal(bad, arrived) {
			t.Fatalf("CRC recomputed %v: the refused frame changed:\n%x\nwas\n%x", recrc, bad, arrived)
		}
	}
	if err := v.Check(genuine); err != nil {
		t.Fatalf("genuine frame after the forgeries: %v", err)
	}
	if got := payloadOf(t, genuine); got != strings.Repeat("secret ", 20) {
		t.Fatalf("decrypted payload %q", got)
	}
}

// TestSealFollowsStreamAndKey: the seal keeps the last stream's derived
// key (not looked up per frame), and must change it with the stream (a
// new incarnation, another member id) and with the key (a rotation's
// Activate), on both of its send paths (Send and SendNow).
func TestSealFollowsStreamAndKey(t *testing.T) {
	old, next := testKey(t, 1), testKey(t, 2)
	if old.ID() == next.ID() {
		t.Skip("test keys share an id")
	}
	for _, encrypt := range []bool{false, true} {
		for _, path := range []string{"Send", "SendNow"} {
			s := &sink{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}}
			a := wrap(t, s, old, encrypt)
			send := func(sender frame.MemberID, inc, seq uint32) []byte {
				t.Helper()
				f := [][]byte{dataFrame(t, s.mac, sender, inc, seq, "payload")}
				var err error
				if path == "Send" {
					_, err = a.Send(f)
				} else {
					_, err = a.SendNow(f)
				}
				if err != nil {
					t.Fatal(err)
				}
				return append([]byte(nil), s.last...)
			}
			// A fresh verifier per frame: each frame is checked against
			// its own stream's key, never a window's memory.
			verify := func(what string, eth []byte, k *Key) {
				t.Helper()
				v, err := NewVerifier(Config{Group: 7, Key: k, Encrypt: encrypt})
				if err != nil {
					t.Fatal(err)
				}
				if err := v.Check(eth); err != nil {
					t.Errorf("encrypt=%v %s: %s: %v", encrypt, path, what, err)
				}
			}
			verify("first frame", send(0, 5, 1), old)
			verify("a new incarnation", send(0, 6, 1), old)
			verify("another member id", send(3, 6, 1), old)
			if err := a.Install(next); err != nil {
				t.Fatal(err)
			}
			if err := a.Activate(next.Fingerprint()); err != nil {
				t.Fatal(err)
			}
			verify("after Activate", send(3, 6, 2), next)
			if err := a.Activate(old.Fingerprint()); err != nil {
				t.Fatal(err)
			}
			verify("back to the old key", send(3, 6, 3), old)
		}
	}
}

// TestRecvKeepsBatchOrder: one Recv of a batch that mixes frames that
// verify, frames dropped (a forgery, a replay) and frames passed
// unjudged (another group's) returns the kept ones in their order, each
// marked Authenticated exactly when it verified, and the buffers of the
// frames returned are those the link read (Recv moves frames up behind
// a dropped one, and leaves the others where they are).
func TestRecvKeepsBatchOrder(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		w := &wire{}
		fa, fb := w.attach(1), w.attach(2)
		k := testKey(t, 1)
		a, b := wrap(t, fa, k, encrypt), wrap(t, fb, k, encrypt)
		var sealed [][]byte
		for i, p := range []string{"one", "two", "three", "four"} {
			if _, err := a.Send([][]byte{dataFrame(t, fa.mac, 0, 5, uint32(i+1), p)}); err != nil {
				t.Fatal(err)
			}
			sealed = append(sealed, fb.queue[len(fb.queue)-1])
		}
		fb.queue = nil
		forged := append([]byte(nil), sealed[1]...)
		forged[len(forged)-frame.CRCLen-1] ^= 1
		frame.SetCRC(forged[frame.EthernetHeaderLen:])
		other := frame.AppendEthernet(nil, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, fa.mac, frame.EtherType)
		h := frame.Header{Group: 8, Sender: 0, Incarnation: 5, Seq: 1}
		other, err := frame.Append(other, &h, &frame.Payload{T: frame.Data, Data: []byte("other group")})
		if err != nil {
			t.Fatal(err)
		}
		// one, forged two, other group, three, one again, four.
		batch := [][]byte{sealed[0], forged, other, sealed[2], append([]byte(nil), sealed[0]...), sealed[3]}
		fb.queue = append(fb.queue, batch...)
		rx := make([]link.Frame, 16)
		n, err := b.Recv(time.Time{}, rx)
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			buf  []byte
			auth bool
		}{{sealed[0], true}, {other, false}, {sealed[2], true}, {sealed[3], true}}
		if n != len(want) {
			t.Fatalf("encrypt=%v: Recv kept %d frames of %d, want %d", encrypt, n, len(batch), len(want))
		}
		for i, w := range want {
			if &rx[i].Data[0] != &w.buf[0] || rx[i].Authenticated != w.auth {
				t.Errorf("encrypt=%v: frame %d: buffer %p authenticated %v, want %p, %v", encrypt, i, &rx[i].Data[0], rx[i].Authenticated, &w.buf[0], w.auth)
			}
		}
		for i, p := range map[int]string{0: "one", 2: "three", 3: "four"} {
			if got := payloadOf(t, rx[i].Data); got != p {
				t.Errorf("encrypt=%v: frame %d carries %q, want %q", encrypt, i, got, p)
			}
		}
		if s := b.Auth(); s.Verified != 3 || s.BadTag != 1 || s.Replay != 1 {
			t.Errorf("encrypt=%v: verified %d, bad tag %d, replays %d; want 3, 1, 1", encrypt, s.Verified, s.BadTag, s.Replay)
		}
	}
}
