package auth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rbcast/rbcast/frame"
)

// ErrDropped is wrapped by every DropError.
var ErrDropped = errors.New("auth: frame dropped")

// DropError says why Verifier.Check dropped a frame.
type DropError struct{ reason reason }

var reasonText = [...]string{
	dropUnauthenticated: "no authentication section",
	dropAlgorithm:       "another algorithm (encryption differs)",
	dropUnknownKey:      "a key id of neither key slot",
	dropBadTag:          "the tag does not verify",
	dropReplay:          "a replay (counter seen before)",
	dropOld:             "a counter behind the replay window",
	dropEarlier:         "an earlier incarnation of its sender",
	dropOwn:             "this station's own member id from its own MAC (a replay)",
}

func (e *DropError) Error() string { return "auth: frame dropped: " + reasonText[e.reason] }
func (e *DropError) Unwrap() error { return ErrDropped }

var dropErrs = func() (m [numReasons]*DropError) {
	for r := range m {
		m[r] = &DropError{reason(r)}
	}
	return
}()

// A Verifier checks received frames: the receive half of a Link, without
// the link (pcap-replay verifies a capture's frames with it). It keeps
// each sender's replay window, so it checks one station's receive stream,
// on one goroutine.
type Verifier struct {
	cfg     Config
	alg     uint8
	ring    atomic.Pointer[keyring]
	c       counters
	streams map[streamID]*stream
	latest  map[srcID]*latest
	// last is the stream of the last frame that verified (most frames
	// come from the stream of the one before): no map lookups for it.
	last    *stream
	lastID  streamID
	scratch []byte
	// self is this station's MAC; heardOther is set once a frame of
	// another station verified (a KeyMismatch is then no longer a reason
	// to give up joining).
	self       [6]byte
	heardOther bool
	// own is 1 + the member id of this station's own stream (0: it has
	// sent nothing), set by its Link: a frame from self with that id was
	// sent by this station, and heard back it is a replay (dropOwn).
	own atomic.Uint32
	// tag and nonce are scratch space the AEAD's interface calls would
	// otherwise make escape, one allocation each per frame.
	tag   [TagLen]byte
	nonce [12]byte
	// behind holds the bytes the tag displaces behind a frame's body
	// (openZeroed), put back after Open.
	behind [TagLen]byte
}

// NewVerifier returns a Verifier of cfg's group, accepting cfg.Key.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.Key == nil {
		return nil, errors.New("auth: no key")
	}
	if cfg.EtherType == 0 {
		cfg.EtherType = frame.EtherType
	}
	v := &Verifier{cfg: cfg, alg: cfg.alg(), streams: make(map[streamID]*stream), latest: make(map[srcID]*latest)}
	v.ring.Store(&keyring{slot: [2]*Key{cfg.Key}})
	return v, nil
}

// Accept adds k as a key frames are verified with (a Verifier of a
// capture across a rotation needs both).
func (v *Verifier) Accept(k *Key) error {
	r := *v.ring.Load()
	if err := r.install(k); err != nil {
		return err
	}
	v.ring.Store(&r)
	return nil
}

// SetKeys makes keys (one, or two across a rotation) the keys frames
// are verified with, in place of those before, keeping every sender's
// replay window and the counters: a Verifier that follows a member's
// rotation (capture.Invariants, told each step) accepts what the
// member's link accepts from then on, and a frame it verified under the
// old keys is still a replay.
func (v *Verifier) SetKeys(keys ...*Key) error {
	if len(keys) == 0 || len(keys) > 2 {
		return fmt.Errorf("auth: Verifier.SetKeys: %d keys given, want one, or two across a rotation", len(keys))
	}
	for i, k := range keys {
		if k == nil {
			return fmt.Errorf("auth: Verifier.SetKeys: key %d is nil", i)
		}
	}
	r := keyring{slot: [2]*Key{keys[0]}}
	if len(keys) == 2 {
		if err := r.install(keys[1]); err != nil {
			return err
		}
	}
	v.ring.Store(&r)
	return nil
}

func (r *keyring) install(k *Key) error {
	for i, s := range r.slot {
		if s != nil && s.fp == k.fp {
			return nil
		}
		if s != nil && s.ID() == k.ID() {
			return fmt.Errorf("auth: key %s has the id %d of key %s in slot %d; generate another", k, k.ID(), s, i)
		}
	}
	other := 1 - r.active
	r.slot[other] = k
	return nil
}

// Stats returns the counters.
func (v *Verifier) Stats() Stats {
	r := v.ring.Load()
	s := Stats{
		Sent: v.c.sent.Load(), Verified: v.c.verified.Load(),
		Unauthenticated: v.c.drops[dropUnauthenticated].Load(), Algorithm: v.c.drops[dropAlgorithm].Load(),
		UnknownKey: v.c.drops[dropUnknownKey].Load(), BadTag: v.c.drops[dropBadTag].Load(),
		Replay: v.c.drops[dropReplay].Load(), TooOld: v.c.drops[dropOld].Load(),
		EarlierIncarnation: v.c.drops[dropEarlier].Load(), Own: v.c.drops[dropOwn].Load(),
		MismatchesSent: v.c.mismatchSent.Load(), MismatchesReceived: v.c.mismatchReceived.Load(),
		Active: r.slot[r.active].fp, Encrypt: v.cfg.Encrypt,
	}
	for _, k := range r.slot {
		if k != nil {
			s.Accepted = append(s.Accepted, k.fp)
		}
	}
	return s
}

// Check verifies eth, a whole Ethernet frame, in place: nil if the frame
// may reach a core (an encrypted body is then decrypted in place and the
// CRC rewritten over it, so that frame.Parse reads it as a capture's
// other frames), else a *DropError, counted. A frame that is not a valid
// rbcast frame of this group passes unjudged: the core's stepper drops
// and counts it by its decode error, and it reaches no core.
func (v *Verifier) Check(eth []byte) error {
	f, err := v.check(eth, false)
	if err == nil && f != nil {
		if alg, _, _ := f.Auth(); alg == AlgGCM {
			frame.SetCRC(f)
		}
	}
	return err
}

// check is Check without the CRC's rewrite (Link.Recv marks the frame
// Authenticated instead, and the runtime does not read the CRC); it
// returns the parsed frame too (nil if unjudged). A frame that verified
// is the only one returned with a nil error and a non-nil frame. An
// outgoing frame (a copy of one this host sent, link.Frame.Outgoing) may
// be of this station's own stream.
func (v *Verifier) check(eth []byte, outgoing bool) (frame.View, error) {
	e, b, err := frame.SplitEthernet(eth, v.cfg.EtherType)
	if err != nil {
		return nil, nil
	}
	// The MAC covers every byte the CRC does, so the CRC is looked at only
	// when the MAC fails: a corrupted frame then passes unjudged, and the
	// stepper drops and counts it by its checksum, as before the MAC.
	f, err := frame.ParseSealedNoCRC(b)
	if err != nil || f.Group() != v.cfg.Group {
		return nil, nil
	}
	src := e.Src()
	if src == v.self && !outgoing && uint32(f.Sender())+1 == v.own.Load() {
		// Checked before the MAC: no replay window is kept of the
		// station's own stream, so the tag would verify.
		v.c.drops[dropOwn].Add(1)
		return f, dropErrs[dropOwn]
	}
	if r := v.verify(src, f); r != 0 {
		if r == dropBadTag && !f.CRCValid() {
			return nil, nil
		}
		v.c.drops[r].Add(1)
		return f, dropErrs[r]
	}
	v.c.verified.Add(1)
	if src != v.self {
		v.heardOther = true
	}
	return f, nil
}

func (v *Verifier) verify(src [6]byte, f frame.View) reason {
	alg, tag, ok := f.Auth()
	if !ok {
		return dropUnauthenticated
	}
	if alg != v.alg || len(tag) != TagLen {
		return dropAlgorithm
	}
	id, counter := f.AuthKey()
	k := v.ring.Load().find(id)
	if k == nil {
		return dropUnknownKey
	}
	sid := streamID{mac: src, sender: f.Sender(), inc: f.Incarnation()}
	s := v.last
	if s == nil || v.lastID != sid {
		s = v.streams[sid]
	}
	if s != nil {
		if r := s.win.fresh(counter); r != 0 {
			return r
		}
	}
	if s == nil {
		v.bound()
		s = &stream{}
		v.streams[sid] = s
	}
	aead := s.aead(k, alg, v.cfg.Group, sid)
	if aead == nil {
		return dropBadTag
	}
	if !v.open(aead, f, counter) {
		return dropBadTag
	}
	// Joins (sender NoMember) too: a replayed Join of a dead run would
	// otherwise admit a ghost. Two processes joining one group from one
	// MAC at once are therefore not supported (docs/auth.md).
	l := s.latest
	if l == nil {
		who := srcID{mac: sid.mac, sender: sid.sender}
		if l = v.latest[who]; l == nil {
			l = &latest{inc: sid.inc, lo: counter, hi: counter}
			v.latest[who] = l
		}
	}
	switch {
	case l.inc == sid.inc:
		l.lo, l.hi = min(l.lo, counter), max(l.hi, counter)
	case counter > l.hi:
		*l = latest{inc: sid.inc, lo: counter, hi: counter}
	default:
		return dropEarlier
	}
	s.latest = l
	s.win.mark(counter)
	s.verified = true
	v.last, v.lastID = s, sid
	return 0
}

// bound forgets streams once there are maxStreams: first those that
// never verified (a forger's), then any.
func (v *Verifier) bound() {
	if len(v.streams) < maxStreams {
		return
	}
	v.last = nil
	for id, s := range v.streams {
		if !s.verified {
			delete(v.streams, id)
		}
	}
	for id := range v.streams {
		if len(v.streams) < maxStreams/2 {
			break
		}
		delete(v.streams, id)
	}
}

func (s *stream) aead(k *Key, alg uint8, group uint32, sid streamID) opener {
	for i := range s.keys {
		if s.keys[i].aead != nil && s.keys[i].fp == k.fp {
			return s.keys[i].aead
		}
	}
	a, err := derive(k, alg, group, sid)
	if err != nil {
		return nil
	}
	// Keep the newest two: the keys of a rotation.
	s.keys[1] = s.keys[0]
	s.keys[0] = derived{fp: k.fp, aead: a}
	return a
}

type opener interface {
	Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error)
}

// open verifies f's tag (and decrypts its body in place under AlgGCM;
// the CRC is left as it was on the wire). The tag is zeroed while the
// MAC runs over the frame, then put back.
func (v *Verifier) open(a opener, f frame.View, counter uint64) bool {
	at, n := f.AuthTagAt()
	tag := v.tag[:]
	copy(tag, f[at:at+n])
	clear(f[at : at+n])
	ok := v.openZeroed(a, f, counter)
	copy(f[at:at+n], tag)
	return ok
}

func (v *Verifier) openZeroed(a opener, f frame.View, counter uint64) bool {
	binary.BigEndian.PutUint64(v.nonce[:], counter)
	alg, _, _ := f.Auth()
	crcAt := len(f) - frame.CRCLen
	if alg == AlgGMAC {
		_, err := a.Open(v.scratch[:0], v.nonce[:], v.tag[:], f[:crcAt])
		return err == nil
	}
	// AlgGCM: Open wants ciphertext and tag together.
	body := f[f.BodyAt():crcAt]
	if cap(v.scratch) < len(body)+TagLen {
		v.scratch = make([]byte, 0, max(len(body)+TagLen, 9216))
	}
	// The tag is not behind the body on the wire. If the frame's buffer
	// has room for it there (the CRC and what follows the frame up to
	// cap: link.Frame's room, a ring slot's), the tag goes behind the
	// body for the moment, and Open reads the ciphertext once, from the
	// frame, into scratch: the first read of a frame the kernel wrote on
	// another core overlaps the decryption, instead of a copy's alone.
	// The plaintext is copied back into the frame (still in the cache),
	// and what the tag covered put back. A failed Open leaves the frame
	// as it came: its CRC can still tell corruption from forgery.
	if end := crcAt + TagLen; end <= cap(f) {
		behind := f[crcAt:end]
		copy(v.behind[:], behind)
		copy(behind, v.tag[:])
		out, err := a.Open(v.scratch[:0], v.nonce[:], f[f.BodyAt():end], f[:f.BodyAt()])
		copy(behind, v.behind[:])
		if err != nil {
			return false
		}
		copy(body, out)
		return true
	}
	// Without room the ciphertext and the tag go to scratch, and Open
	// decrypts from there straight back into the frame (one copy of the
	// body, not two). A failed Open zeroes what it wrote: the ciphertext
	// is put back.
	buf := append(append(v.scratch[:0], body...), v.tag[:]...)
	if _, err := a.Open(body[:0], v.nonce[:], buf, f[:f.BodyAt()]); err != nil {
		copy(body, buf[:len(body)])
		return false
	}
	return true
}
