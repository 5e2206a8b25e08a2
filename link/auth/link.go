package auth

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// Link authenticates the frames of one group over the link it wraps: every
// frame sent gets an auth section (a fresh counter, a tag), every frame
// received is verified (Verifier.Check) and dropped unless it verifies.
// Its MTU is the wrapped link's less Overhead, so the core above leaves
// room for the section.
type Link struct {
	l link.Link
	v *Verifier
	// counter is the last counter sent; it starts at the clock.
	counter atomic.Uint64
	// send is the key state of this station's own stream (one at a time:
	// its id and incarnation change only when it joins).
	mu   sync.Mutex
	own  streamID
	keys [2]derived
	// Two arenas: Send and Stage run on one goroutine, SendNow on
	// another (link.NowSender).
	queued, now arena
	// pending are KeyMismatch replies, sent with the next frames (a
	// Link sends only from its sending goroutines).
	pmu        sync.Mutex
	pending    [][]byte
	hasPending atomic.Bool // pending is not empty (every send looks, without pmu)
	lastMis    time.Time
	// fatal is the key mismatch a joiner's Recv reports.
	fatal        error
	unauthOthers int
	recvMu       sync.Mutex
}

type arena struct {
	mu     sync.Mutex
	buf    []byte
	frames [][]byte
	// tag and nonce: scratch the AEAD's interface calls would make escape.
	tag   [TagLen]byte
	nonce [12]byte
	crc   shift
	// The AEAD of the last frame's stream and key (Link.ownKey's, kept
	// under the arena's lock: a core's frames are of one stream, and
	// ownKey's lock is not taken per frame).
	sid  streamID
	fp   uint64
	aead cipher.AEAD
}

var (
	_ link.Wrapper   = (*Link)(nil)
	_ link.Stager    = (*Link)(nil)
	_ link.NowSender = (*Link)(nil)
	_ link.CRCSealer = (*Link)(nil)
)

// Wrap returns l with cfg's authentication.
func Wrap(l link.Link, cfg Config) (*Link, error) {
	v, err := NewVerifier(cfg)
	if err != nil {
		return nil, err
	}
	if l.MTU()-Overhead < frame.MinMTU {
		return nil, fmt.Errorf("auth: link MTU %d leaves %d bytes after the %d of authentication, below rbcast's minimum of %d", l.MTU(), l.MTU()-Overhead, Overhead, frame.MinMTU)
	}
	copy(v.self[:], l.HardwareAddr())
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	a := &Link{l: l, v: v}
	a.counter.Store(uint64(now().UnixNano()))
	return a, nil
}

func (a *Link) Unwrap() link.Link              { return a.l }
func (a *Link) MTU() int                       { return a.l.MTU() - Overhead }
func (a *Link) HardwareAddr() net.HardwareAddr { return a.l.HardwareAddr() }
func (a *Link) Stats() (link.Stats, error)     { return a.l.Stats() }
func (a *Link) Close() error                   { return a.l.Close() }

// SealsCRC reports whether the seal writes every frame's CRC without
// reading the core's (link.CRCSealer): when it encrypts. Then a core need
// not write one (frame.Header.SkipCRC). With the MAC the seal derives the
// sealed frame's CRC from the core's (sealedCRC), which must be there.
func (a *Link) SealsCRC() bool { return a.v.alg == AlgGCM }

// Auth returns the authentication counters and keys.
func (a *Link) Auth() Stats {
	s := a.v.Stats()
	s.Sent = a.v.c.sent.Load()
	return s
}

// Install puts k in the key slot not used for sending: frames under it
// are accepted from now on, and frames are still sent under the active
// key (the first step of a rotation; every member installs before any
// activates).
func (a *Link) Install(k *Key) error { return a.v.Accept(k) }

// Activate sends under the key with fingerprint fp from now on (it must be
// installed); the other slot keeps being accepted until Retire.
func (a *Link) Activate(fp uint64) error {
	r := *a.v.ring.Load()
	for i, k := range r.slot {
		if k != nil && k.fp == fp {
			r.active = i
			a.v.ring.Store(&r)
			return nil
		}
	}
	var have []string
	for _, k := range r.slot {
		if k != nil {
			have = append(have, k.String())
		}
	}
	return fmt.Errorf("auth: no installed key has fingerprint %016x (installed: %s)", fp, strings.Join(have, ", "))
}

// Retire stops accepting the key not used for sending (the last step of
// a rotation).
func (a *Link) Retire() {
	r := *a.v.ring.Load()
	r.slot[1-r.active] = nil
	a.v.ring.Store(&r)
}

// Recv returns the frames that verified, marked Authenticated (an
// encrypted body decrypted in place; the CRC is the wire's, which the
// runtime does not check on such a frame), and those it does not judge
// (not rbcast frames of its group; the stepper counts them); the others
// are dropped and counted. A joiner that hears a KeyMismatch before any frame of another
// station verified gets a *MismatchError instead.
func (a *Link) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	for {
		if a.fatal != nil {
			return 0, a.fatal
		}
		n, err := a.l.Recv(deadline, frames)
		if n == 0 {
			return n, err
		}
		kept := 0
		for i := range frames[:n] {
			keep, verified := a.keep(frames[i].Data, frames[i].Outgoing)
			if !keep {
				continue
			}
			// Move a frame only behind a dropped one: copying a frame onto
			// itself stores the 56-byte struct in overlapping 16-byte
			// pieces and reads back a piece just stored in part, which the
			// CPU cannot forward from its store buffer (a stall per frame).
			if kept != i {
				frames[kept] = frames[i]
			}
			frames[kept].Authenticated = verified
			kept++
		}
		if kept > 0 || err != nil {
			return kept, err
		}
		if a.fatal != nil {
			return 0, a.fatal
		}
	}
}

// unauthLimit: this many unauthenticated frames of the group from others,
// before anything verified, tell a joiner the group runs without a key.
const unauthLimit = 8

// keep says whether a frame read goes up, and whether its tag verified.
func (a *Link) keep(eth []byte, outgoing bool) (keep, verified bool) {
	f, err := a.v.check(eth, outgoing)
	if f == nil {
		return true, false // not ours to judge: the stepper counts it
	}
	if err == nil && f.Type() != frame.KeyMismatch {
		return true, true
	}
	src := frame.Ethernet(eth[:frame.EthernetHeaderLen]).Src()
	if f.Type() == frame.KeyMismatch {
		if _, err := frame.Parse(f); err != nil {
			return false, false // sealed, its body not a KeyMismatch's: nobody's reply
		}
		a.v.c.mismatchReceived.Add(1)
		if !a.v.heardOther && !a.v.cfg.Admitted && frame.Ethernet(eth[:frame.EthernetHeaderLen]).Dst() == a.v.self {
			k := f.KeyMismatch()
			a.fatal = &MismatchError{From: net.HardwareAddr(src[:]), Reason: k.Reason, Theirs: k.Fingerprint, Ours: a.v.cfg.Key.fp}
		}
		return false, false
	}
	r := err.(*DropError).reason
	if r == dropUnauthenticated && src != a.v.self && !a.v.heardOther && !a.v.cfg.Admitted {
		if a.unauthOthers++; a.unauthOthers >= unauthLimit {
			a.fatal = &MismatchError{From: net.HardwareAddr(src[:]), Unheard: true, Ours: a.v.cfg.Key.fp}
		}
	}
	if t := f.Type(); (t == frame.ViewJoin || t == frame.Join) && (r == dropUnauthenticated || r == dropUnknownKey || r == dropBadTag) {
		a.mismatch(src, f, r)
	}
	return false, false
}

// mismatch queues a KeyMismatch to a station whose Join did not verify, at
// most one every 100 ms (it is unauthenticated: never an amplifier).
func (a *Link) mismatch(to [6]byte, f frame.View, r reason) {
	now := time.Now()
	a.pmu.Lock()
	defer a.pmu.Unlock()
	if now.Sub(a.lastMis) < 100*time.Millisecond || len(a.pending) >= 4 {
		return
	}
	a.lastMis = now
	reason := frame.MismatchKey
	if r == dropUnauthenticated {
		reason = frame.MismatchUnauthenticated
	}
	var src [6]byte
	copy(src[:], a.v.self[:])
	b := frame.AppendEthernet(nil, to, src, a.v.cfg.EtherType)
	a.mu.Lock()
	h := frame.Header{Group: a.v.cfg.Group, Sender: a.own.sender, Incarnation: a.own.inc}
	a.mu.Unlock()
	b, err := frame.Append(b, &h, &frame.KeyMismatchBody{Reason: reason, Refused: f.Type(), Fingerprint: a.v.ring.Load().activeKey().fp})
	if err == nil {
		a.pending = append(a.pending, b)
		a.hasPending.Store(true)
	}
}

func (r *keyring) activeKey() *Key { return r.slot[r.active] }

// flushPending sends the queued KeyMismatch frames.
func (a *Link) flushPending() {
	if !a.hasPending.Load() {
		return
	}
	a.pmu.Lock()
	p := a.pending
	a.pending = nil
	a.hasPending.Store(false)
	a.pmu.Unlock()
	if len(p) > 0 {
		if n, _ := a.l.Send(p); n > 0 {
			a.v.c.mismatchSent.Add(uint64(n))
		}
	}
}

func (a *Link) Send(frames [][]byte) (int, error) {
	a.flushPending()
	out, err := a.seal(&a.queued, frames)
	defer a.queued.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return a.l.Send(out)
}

func (a *Link) Stage(frames [][]byte) (int, error) {
	a.flushPending()
	out, err := a.seal(&a.queued, frames)
	defer a.queued.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return link.Stage(a.l, out)
}

func (a *Link) Kick() error { return link.Kick(a.l) }

func (a *Link) SendNow(frames [][]byte) (int, error) {
	out, err := a.seal(&a.now, frames)
	defer a.now.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return link.SendNow(a.l, out)
}

// seal authenticates frames into ar (locked on return; the caller unlocks
// once the wrapped link has copied or sent them).
func (a *Link) seal(ar *arena, frames [][]byte) ([][]byte, error) {
	ar.mu.Lock()
	need := 0
	for _, f := range frames {
		need += len(f) + Overhead + TagLen
	}
	if cap(ar.buf) < need {
		ar.buf = make([]byte, 0, max(need, 2*cap(ar.buf)))
	}
	buf := ar.buf[:0]
	ar.frames = ar.frames[:0]
	r := a.v.ring.Load()
	k := r.activeKey()
	alg := a.v.alg
	for i, eth := range frames {
		_, b, err := frame.SplitEthernet(eth, a.v.cfg.EtherType)
		var f frame.View
		if err == nil {
			// Our core's frame: its encoder wrote the CRC, or left it
			// zero for an encrypting seal (SealsCRC), which ignores it.
			f, err = frame.ParseSealedNoCRC(b)
		}
		if err != nil {
			return nil, fmt.Errorf("auth: frame %d of %d to send: %w", i+1, len(frames), err)
		}
		hl := len(eth) - len(b)
		start := len(buf)
		buf = append(buf, eth[:hl]...)
		counter := a.counter.Add(1)
		if alg == AlgGCM {
			// The body is encrypted from the core's frame into buf.
			buf, err = frame.InsertAuthNoBody(buf, f, alg, k.ID(), counter, TagLen)
		} else {
			buf, err = frame.InsertAuth(buf, f, alg, k.ID(), counter, TagLen)
		}
		if err != nil {
			return nil, fmt.Errorf("auth: frame %d of %d to send: %w", i+1, len(frames), err)
		}
		e := frame.Ethernet(eth[:frame.EthernetHeaderLen])
		if sid := (streamID{mac: e.Src(), sender: f.Sender(), inc: f.Incarnation()}); ar.aead == nil || sid != ar.sid || k.fp != ar.fp {
			aead, err := a.ownKey(k, sid)
			if err != nil {
				return nil, err
			}
			ar.sid, ar.fp, ar.aead = sid, k.fp, aead
		}
		g := frame.View(buf[start+hl:])
		ar.seal(ar.aead, f, g, alg, counter)
		ar.frames = append(ar.frames, buf[start:len(buf):len(buf)])
	}
	a.v.c.sent.Add(uint64(len(frames)))
	return ar.frames, nil
}

func (a *Link) ownKey(k *Key, s streamID) (cipher.AEAD, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s != a.own {
		a.own, a.keys = s, [2]derived{}
		if s.mac == a.v.self {
			a.v.own.Store(uint32(s.sender) + 1)
		}
	}
	for _, d := range a.keys {
		if d.aead != nil && d.fp == k.fp {
			return d.aead, nil
		}
	}
	aead, err := derive(k, a.v.alg, a.v.cfg.Group, s)
	if err != nil {
		return nil, err
	}
	a.keys[1], a.keys[0] = a.keys[0], derived{fp: k.fp, aead: aead}
	return aead, nil
}

// seal fills g's tag and CRC; g is orig with the auth section inserted
// (under AlgGCM without its body, which seal encrypts into it from orig).
// g's buffer has TagLen bytes of room past its end.
func (ar *arena) seal(aead cipher.AEAD, orig, g frame.View, alg uint8, counter uint64) {
	at, n := g.AuthTagAt()
	binary.BigEndian.PutUint64(ar.nonce[:], counter)
	crcAt := len(g) - frame.CRCLen
	if alg == AlgGMAC {
		aead.Seal(ar.tag[:0], ar.nonce[:], nil, g[:crcAt])
	} else {
		// From the core's frame into g (InsertAuthNoBody left its body
		// unwritten): one read and one write of the body, no copy first.
		body := g[g.BodyAt():crcAt]
		out := aead.Seal(body[:0], ar.nonce[:], orig.Body(), g[:g.BodyAt()])
		copy(ar.tag[:], out[len(body):])
	}
	copy(g[at:at+n], ar.tag[:])
	if alg == AlgGMAC && crcAt-g.BodyAt() >= combineMin {
		binary.BigEndian.PutUint32(g[crcAt:], ar.crc.sealedCRC(orig, g))
		return
	}
	frame.SetCRC(g)
}

// Loan, Lend, Return and Due pass through when the link underneath lends
// (link.LenderOf looks through this Wrapper). A frame verified or
// decrypted in place lies in the link's bytes and may be lent; one
// decrypted into a buffer of ours does not, and the link refuses it.
func (a *Link) Loan(data []byte) (link.Loan, bool) { return link.LoanFrom(a.l, data) }

// Lend passes through (see Loan).
func (a *Link) Lend(loans []link.Loan) { link.Lend(a.l, loans) }

// Return passes through (see Loan).
func (a *Link) Return(loans []link.Loan) { link.Return(a.l, loans) }

// Due passes through (see Loan).
func (a *Link) Due() (link.Loan, bool) { return link.Due(a.l) }
