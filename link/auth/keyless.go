package auth

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// Keyless is the link of a member without a key (Config.Auth nil): it
// passes every frame through, and turns what shows that the group uses a
// key into an error from Recv (a *MismatchError), so that a joiner
// without the key is told so instead of timing out: a KeyMismatch the
// group's members sent to it, or, before any unauthenticated frame of the
// group was heard from another station, unauthLimit authenticated ones.
type Keyless struct {
	link.Link
	group     uint32
	etherType uint16
	self      [6]byte

	// settled: an unauthenticated frame of the group came from another
	// station, so the group has no key: nothing more to look at.
	settled  atomic.Bool
	mu       sync.Mutex
	fatal    error
	authSeen int
}

// WatchKeyless wraps l for a member of group (EtherType 0: frame.EtherType)
// that has no key.
func WatchKeyless(l link.Link, group uint32, etherType uint16) *Keyless {
	if etherType == 0 {
		etherType = frame.EtherType
	}
	k := &Keyless{Link: l, group: group, etherType: etherType}
	copy(k.self[:], l.HardwareAddr())
	return k
}

// Unwrap is the link underneath.
func (k *Keyless) Unwrap() link.Link { return k.Link }

// Stage, Kick and SendNow pass through when the link underneath has
// them (link.StagerOf and NowSenderOf look through this Wrapper).
func (k *Keyless) Stage(frames [][]byte) (int, error) { return link.Stage(k.Link, frames) }

// Kick has the link underneath send what was staged.
func (k *Keyless) Kick() error { return link.Kick(k.Link) }

// SendNow sends past the queue of the link underneath.
func (k *Keyless) SendNow(frames [][]byte) (int, error) { return link.SendNow(k.Link, frames) }

// SealsCRC is the link underneath's (link.CRCSealer): Keyless passes the
// frames it sends on unread and unchanged.
func (k *Keyless) SealsCRC() bool { return link.SealsCRC(k.Link) }

// Recv passes the link's frames through, or returns a *MismatchError
// once the group showed it uses a key.
func (k *Keyless) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if k.settled.Load() {
		return k.Link.Recv(deadline, frames)
	}
	k.mu.Lock()
	fatal := k.fatal
	k.mu.Unlock()
	if fatal != nil {
		return 0, fatal
	}
	n, err := k.Link.Recv(deadline, frames)
	for i := range frames[:n] {
		k.look(frames[i].Data)
	}
	return n, err
}

func (k *Keyless) look(eth []byte) {
	if len(eth) < frame.EthernetHeaderLen+frame.HeaderLen {
		return
	}
	e := frame.Ethernet(eth[:frame.EthernetHeaderLen])
	f := frame.View(eth[frame.EthernetHeaderLen:])
	if e.EtherType() != k.etherType || e.Src() == k.self || f.Group() != k.group {
		return // the header only: the stepper checks the rest
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	src := e.Src()
	switch {
	case f.Type() == frame.KeyMismatch && f.Flags()&frame.FlagAuth == 0 && e.Dst() == k.self:
		if _, err := frame.Parse(f); err == nil {
			m := f.KeyMismatch()
			k.fatal = &MismatchError{From: net.HardwareAddr(src[:]), Reason: m.Reason, Theirs: m.Fingerprint}
		}
	case f.Flags()&frame.FlagAuth == 0:
		k.settled.Store(true)
	default:
		if k.authSeen++; k.authSeen >= unauthLimit {
			k.fatal = &MismatchError{From: net.HardwareAddr(src[:]), Keyless: true}
		}
	}
}

// Loan, Lend, Return and Due pass through when the link underneath lends
// (link.LenderOf looks through this Wrapper): Recv hands its frames up
// unchanged.
func (k *Keyless) Loan(data []byte) (link.Loan, bool) { return link.LoanFrom(k.Link, data) }

// Lend passes through (see Loan).
func (k *Keyless) Lend(loans []link.Loan) { link.Lend(k.Link, loans) }

// Return passes through (see Loan).
func (k *Keyless) Return(loans []link.Loan) { link.Return(k.Link, loans) }

// Due passes through (see Loan).
func (k *Keyless) Due() (link.Loan, bool) { return link.Due(k.Link) }
