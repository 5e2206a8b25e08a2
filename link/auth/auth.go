// Package auth authenticates an rbcast group's frames: a link decorator
// that adds a keyed MAC (AES-256-GMAC), a per-sender frame counter and,
// optionally, encryption (AES-256-GCM) to every frame sent, and drops
// every frame received that does not verify, or verified before, before
// any protocol core sees it. The design, the threat model and the nonce
// rule are in docs/auth.md; the wire format in docs/wire-format.md.
//
// It is a link (a Wrapper) rather than a step of the runtime so that every
// driver of a core gets it from the one place all of them read frames
// from: the live runtime, the simulator's Driver (reliable.Config.Auth
// wraps their link) and pcap-replay (which verifies a capture's frames
// with a Verifier, the same code without a link).
package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// Algorithms (the auth section's first byte).
const (
	// AlgGMAC: AES-256-GMAC (GCM with nothing to encrypt) over the whole
	// frame up to the CRC, the tag zeroed. Chosen by measurement over
	// BLAKE2s and HMAC-SHA-256 (docs/auth.md).
	AlgGMAC uint8 = 1
	// AlgGCM: AES-256-GCM; the body is encrypted, the tag authenticates
	// the header (up to the body, the tag zeroed) and the body.
	AlgGCM = frame.AuthEncrypted
)

// TagLen is the tag length of both algorithms (GCM's full 128 bits).
const TagLen = 16

// Overhead is what authentication adds to every frame: the auth
// section's fixed bytes and the tag.
const Overhead = frame.AuthFixedLen + TagLen

// ErrKeyMismatch is wrapped by the error a joining member's Recv returns
// when the group's members told it they use another key (KeyMismatch),
// or showed they use none.
var ErrKeyMismatch = errors.New("auth: key mismatch")

// MismatchError is a KeyMismatch the group sent this station, as an error.
type MismatchError struct {
	From        net.HardwareAddr
	Reason      frame.MismatchReason
	Theirs      uint64 // the fingerprint of their key (0: they have none)
	Ours        uint64
	Unheard     bool // inferred: they send unauthenticated frames
	Keyless     bool // inferred: they authenticate, and this member has no key
	Unsupported uint8
}

func (e *MismatchError) Error() string {
	if e.Keyless {
		return fmt.Sprintf("auth: key mismatch: the group's members (%s among them) authenticate their frames, and this member has no key: give it the group's key (rbcastd run -key-file, reliable.Config.Auth)", e.From)
	}
	if e.Ours == 0 {
		return fmt.Sprintf("auth: key mismatch: member at %s refused our frames (%s): it uses key %016x, and this member has no key: give it the group's key (rbcastd run -key-file, reliable.Config.Auth)", e.From, e.Reason, e.Theirs)
	}
	if e.Unheard {
		return fmt.Sprintf("auth: key mismatch: the group's members (%s among them) send unauthenticated frames, and this member has key %016x: give them the key, or run this one without", e.From, e.Ours)
	}
	return fmt.Sprintf("auth: key mismatch: member at %s refused our frames (%s): it uses key %016x, this member key %016x", e.From, e.Reason, e.Theirs, e.Ours)
}

func (e *MismatchError) Unwrap() error { return ErrKeyMismatch }

// Config configures a Link (or a Verifier).
type Config struct {
	Group     uint32
	EtherType uint16 // 0: frame.EtherType
	Key       *Key   // the key frames are sent with; required
	// Encrypt encrypts every frame's body (AlgGCM) instead of only
	// authenticating it (AlgGMAC). Every member must agree: a frame of
	// the other algorithm is dropped.
	Encrypt bool
	// Now gives the first frame counter (its UnixNano): counters then
	// only grow, so that a restart, even with the same incarnation,
	// never repeats a nonce (docs/auth.md, "Nonces"). nil: time.Now.
	Now func() time.Time
	// Admitted: the link of a station that is a member already, which
	// joins nothing over it (the files' link of rbcastd, started once its
	// message group admitted it): a KeyMismatch, or unauthenticated frames
	// of the group, are counted and dropped but never become Recv's
	// *MismatchError, so that a station on the segment cannot stop the
	// link with a few forged frames. A joiner's link leaves it false.
	Admitted bool
}

// reason is why a received frame was dropped.
type reason uint8

const (
	dropUnauthenticated reason = iota + 1
	dropAlgorithm
	dropUnknownKey
	dropBadTag
	dropReplay
	dropOld
	dropEarlier
	dropOwn
	numReasons
)

// Stats are a Link's counters.
type Stats struct {
	Sent     uint64 // frames sent with a tag
	Verified uint64 // frames received whose tag verified
	// Dropped frames, by reason: no auth section; the other algorithm
	// (one member encrypts, this one does not, or the reverse); a key id
	// of neither slot; a tag that does not verify (a forgery, a flipped
	// bit with its CRC recomputed, another key with the same id); a
	// counter seen before (a replay); a counter behind the window; a
	// frame of an incarnation of its sender that is older than one heard
	// since; a frame of this station's own member id from its own MAC (no
	// link hands a station its own frames back, so it was sent again by
	// someone else: a replay its window could not catch, as a station
	// keeps no window of its own stream).
	Unauthenticated, Algorithm, UnknownKey, BadTag, Replay, TooOld, EarlierIncarnation, Own uint64
	// MismatchesSent and MismatchesReceived count KeyMismatch frames.
	MismatchesSent, MismatchesReceived uint64
	// Active is the fingerprint of the key frames are sent with;
	// Accepted those frames are verified with (the active one and the
	// one being rotated in or out).
	Active   uint64
	Accepted []uint64
	Encrypt  bool
}

// Dropped sums the drops.
func (s Stats) Dropped() uint64 {
	return s.Unauthenticated + s.Algorithm + s.UnknownKey + s.BadTag + s.Replay + s.TooOld + s.EarlierIncarnation + s.Own
}

type counters struct {
	sent, verified                 atomic.Uint64
	drops                          [numReasons]atomic.Uint64
	mismatchSent, mismatchReceived atomic.Uint64
}

// keyring is the two key slots (knet's online rotation): frames are
// verified under either, sent under active.
type keyring struct {
	slot   [2]*Key
	active int
}

func (r *keyring) find(id uint8) *Key {
	for _, k := range r.slot {
		if k != nil && k.ID() == id {
			return k
		}
	}
	return nil
}

// streamID names one sender's frame stream: its source MAC, member id and
// incarnation. Each has its own derived key and replay window.
type streamID struct {
	mac    [6]byte
	sender frame.MemberID
	inc    uint32
}

type derived struct {
	fp   uint64
	aead cipher.AEAD
}

type stream struct {
	keys     [2]derived
	win      window
	verified bool
	// latest is the record of its (MAC, member id), once a frame of it
	// verified.
	latest *latest
}

// maxStreams bounds the streams a receiver remembers; beyond it, those
// that never verified are forgotten first (a forger's).
const maxStreams = 4096

// latest is the newest incarnation heard of a member id at a MAC, and the
// lowest counter heard from it: counters start at the clock, so a frame
// of another incarnation with a lower counter is of an earlier run.
type latest struct {
	inc    uint32
	lo, hi uint64
}

type srcID struct {
	mac    [6]byte
	sender frame.MemberID
}

// purpose strings of the derivation (HKDF-Expand's info).
var purposes = [...]string{AlgGMAC: "rbcast auth v1 gmac", AlgGCM: "rbcast auth v1 gcm"}

func derive(k *Key, alg uint8, group uint32, s streamID) (cipher.AEAD, error) {
	var info [len("rbcast auth v1 gmac") + 16]byte
	n := copy(info[:], purposes[alg])
	binary.BigEndian.PutUint32(info[n:], group)
	copy(info[n+4:], s.mac[:])
	binary.BigEndian.PutUint16(info[n+10:], uint16(s.sender))
	binary.BigEndian.PutUint32(info[n+12:], s.inc)
	sub, err := k.expand(string(info[:n+16]), 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(sub)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func (c *Config) alg() uint8 {
	if c.Encrypt {
		return AlgGCM
	}
	return AlgGMAC
}
