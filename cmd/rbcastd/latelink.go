package main

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/ring"
)

// pendingLink is a link whose sockets are open and whose setup is not
// done yet (ring.Sockets: the rings, which the kernel takes tens of
// milliseconds to allocate and zero).
type pendingLink interface {
	Setup() (link.Link, error)
	Close() error
}

// ringSockets is ring.Sockets as a pendingLink.
type ringSockets struct{ *ring.Sockets }

func (s ringSockets) Setup() (link.Link, error) {
	l, err := s.Sockets.Setup()
	if err != nil {
		return nil, err
	}
	return l, nil
}

// lateLink is a link that works before its rings exist. Until they are
// set up, it sends and receives through early, a plain AF_PACKET socket
// (link/afpacket: a socket and a filter, nothing to allocate), open and
// receiving since rbcastd started; once they are, through the ring link.
// The setup runs on a goroutine of its own, started by the first Recv,
// Send, Stage or SendNow (or Start), so it is off the path of whoever
// waits for the link: rbcastd's join does not wait for the files' rings.
//
// No frame is lost at the switch: early stays open until the ring link is
// bound, and Recv then returns what early still holds before the first
// frame of the ring. A frame that arrives while both are bound reaches
// both; the ring's copy is skipped by its kernel timestamp, which both
// sockets see alike (if early's kernel dropped frames, none is skipped,
// and those that came while both were bound are returned twice: the
// cores take duplicates, which the segment and repairs make too). A frame sent
// through early has left before Send returns, so frames go out in the
// order sent across the switch. If the setup fails, the error is logged
// and early serves on.
//
// Like every link, it is for one receiving goroutine and one sending
// goroutine (Stage and Kick, SendNow as the link.Stager and NowSender
// contracts allow).
type lateLink struct {
	early   link.Link
	pending pendingLink
	mtu     int
	mac     net.HardwareAddr
	log     *slog.Logger
	name    string // for the log: "files"

	start   sync.Once
	started time.Time

	// mu orders the setup's end against Close: the ring link is stored
	// under it, and Close closes what it finds stored.
	mu     sync.Mutex
	closed bool
	ring   atomic.Pointer[link.Link] // set once set up
	// setupDone is closed when the setup has ended, well or not;
	// settled once the switch is over (Settled).
	setupDone  chan struct{}
	settled    chan struct{}
	settleOnce sync.Once

	// earlyMu is held shared by every use of early, exclusively to close
	// it; earlyOff says it is closed.
	earlyMu  sync.RWMutex
	earlyOff bool
	// Recv's own: drained, early has been emptied and closed; the time
	// and bytes of the last frame early returned; dedup, the ring link's
	// frames up to that one are skipped (counted in dups, dupBytes).
	drained        bool
	lastTime       time.Time
	lastData       []byte
	dedup          bool
	dups, dupBytes atomic.Uint64
	// woken: Wake was called while early served.
	woken atomic.Bool
}

var (
	_ link.Stager    = (*lateLink)(nil)
	_ link.NowSender = (*lateLink)(nil)
	_ link.Waker     = (*lateLink)(nil)
	_ link.Lender    = (*lateLink)(nil)
)

// openLateRing opens a lateLink for a ring link of cfg on iface: the ring
// link's sockets and the early socket now (they need CAP_NET_RAW), the
// rings later.
func openLateRing(iface string, cfg ring.Config, name string, log *slog.Logger) (*lateLink, error) {
	s, err := ring.OpenSockets(iface, cfg)
	if err != nil {
		return nil, err
	}
	early, err := afpacket.Open(iface, afpacket.Config{EtherType: cfg.EtherType, Groups: cfg.Groups})
	if err != nil {
		s.Close()
		return nil, err
	}
	return newLateLink(early, ringSockets{s}, s.MTU(), s.HardwareAddr(), name, log), nil
}

func newLateLink(early link.Link, pending pendingLink, mtu int, mac net.HardwareAddr, name string, log *slog.Logger) *lateLink {
	return &lateLink{early: early, pending: pending, mtu: mtu, mac: mac, name: name, log: log, setupDone: make(chan struct{}), settled: make(chan struct{})}
}

// Settled is closed once the link makes no more of the switch's socket
// calls that wait for the kernel (the rings' setup and early's close
// each wait for an RCU grace period, tens of ms on a busy guest): early
// is closed with the ring link serving, or the setup failed and early
// serves on, or the link is closed.
func (l *lateLink) Settled() <-chan struct{} { return l.settled }

func (l *lateLink) settle() { l.settleOnce.Do(func() { close(l.settled) }) }

// Start sets the rings up on a goroutine of its own, if that has not
// started yet.
func (l *lateLink) Start() {
	l.start.Do(func() {
		l.started = time.Now()
		go l.setup()
	})
}

func (l *lateLink) setup() {
	defer close(l.setupDone)
	r, err := l.pending.Setup()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if !l.closed {
			l.log.Warn("rbcastd: the rings could not be set up; a plain socket serves the link", "link", l.name, "err", err)
		}
		l.settle()
		return
	}
	if l.closed {
		r.Close()
		return
	}
	l.ring.Store(&r)
	l.log.Debug("rbcastd: rings set up", "link", l.name, "ms", float64(time.Since(l.started).Microseconds())/1000)
	// A Recv waiting on early moves to the ring link.
	l.early.(link.Waker).Wake()
}

// ringLink is the ring link, nil until it is set up.
func (l *lateLink) ringLink() link.Link {
	if p := l.ring.Load(); p != nil {
		return *p
	}
	return nil
}

// drainWait is how long Recv waits for early to show a frame once the
// ring link is bound: frames early queued before are there at once.
const drainWait = time.Millisecond

func (l *lateLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	l.Start()
	if !l.drained {
		if l.ringLink() == nil {
			n, err := l.early.Recv(deadline, frames)
			if n > 0 {
				l.noteEarly(frames[n-1])
				return n, err
			}
			woken := l.woken.Swap(false)
			if l.ringLink() == nil || woken || !errors.Is(err, os.ErrDeadlineExceeded) || !deadline.IsZero() && !time.Now().Before(deadline) {
				return n, err
			}
			// The setup's end woke it: on to the ring link.
		}
		for range 4 {
			// A Wake early has not seen yet ends one of these at once
			// (after it looked for frames): look again.
			t0 := time.Now()
			n, err := l.early.Recv(t0.Add(drainWait), frames)
			if n > 0 {
				l.noteEarly(frames[n-1])
				return n, nil
			}
			if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(t0) >= drainWait {
				break
			}
		}
		l.closeEarly()
		l.drained = true
		// Frames that came while both were bound are in the ring too.
		// If early lost none, it returned every frame that came before
		// its last one: the ring's copies of those are skipped.
		st, _ := l.early.Stats()
		l.dedup = !l.lastTime.IsZero() && st.KernelDrops == 0
	}
	r := l.ringLink()
	if !l.dedup {
		return r.Recv(deadline, frames)
	}
	for {
		n, err := r.Recv(deadline, frames)
		if n == 0 {
			return n, err
		}
		k := 0
		for _, f := range frames[:n] {
			if l.dedup && (f.Time.Before(l.lastTime) || f.Time.Equal(l.lastTime) && bytes.Equal(f.Data, l.lastData)) {
				l.dups.Add(1)
				l.dupBytes.Add(uint64(len(f.Data)))
				continue
			}
			l.dedup = false
			frames[k] = f
			k++
		}
		if k > 0 {
			return k, err
		}
	}
}

// noteEarly keeps the time and bytes of the last frame early returned.
func (l *lateLink) noteEarly(f link.Frame) {
	l.lastTime = f.Time
	l.lastData = append(l.lastData[:0], f.Data...)
}

// closeEarly closes early once the ring link serves (or at Close).
func (l *lateLink) closeEarly() {
	l.earlyMu.Lock()
	defer l.earlyMu.Unlock()
	if !l.earlyOff {
		l.earlyOff = true
		l.early.Close()
	}
	l.settle()
}

// sender is the link to send through now, with done to call after: the
// ring link once set up, else early (held open meanwhile).
func (l *lateLink) sender() (s link.Link, isRing bool, done func()) {
	l.Start()
	if r := l.ringLink(); r != nil {
		return r, true, func() {}
	}
	l.earlyMu.RLock()
	if l.earlyOff {
		// Closed: by Close (early says so), or drained, which comes
		// after the ring link was stored.
		l.earlyMu.RUnlock()
		if r := l.ringLink(); r != nil {
			return r, true, func() {}
		}
		return l.early, false, func() {}
	}
	return l.early, false, l.earlyMu.RUnlock
}

func (l *lateLink) Send(frames [][]byte) (int, error) {
	s, _, done := l.sender()
	defer done()
	return s.Send(frames)
}

// Stage stages on the ring link; before it, early sends at once (and Kick
// has nothing to do).
func (l *lateLink) Stage(frames [][]byte) (int, error) { return l.sendVia(link.Stage, frames) }

// sendVia sends frames through the ring link with how (link.Stage,
// link.SendNow), or through early at once before it is set up.
func (l *lateLink) sendVia(how func(link.Link, [][]byte) (int, error), frames [][]byte) (int, error) {
	s, isRing, done := l.sender()
	defer done()
	if isRing {
		return how(s, frames)
	}
	return s.Send(frames)
}

func (l *lateLink) Kick() error {
	if r := l.ringLink(); r != nil {
		return link.Kick(r)
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return &net.OpError{Op: "kick", Net: "packet", Err: net.ErrClosed}
	}
	return nil
}

func (l *lateLink) SendNow(frames [][]byte) (int, error) { return l.sendVia(link.SendNow, frames) }

// Wake ends the Recv waiting on the ring link, or on early before it.
func (l *lateLink) Wake() {
	if r := l.ringLink(); r != nil {
		if w, ok := link.WakerOf(r); ok {
			w.Wake()
		}
		return
	}
	l.woken.Store(true)
	l.earlyMu.RLock()
	defer l.earlyMu.RUnlock()
	if !l.earlyOff {
		l.early.(link.Waker).Wake()
	}
	if r := l.ringLink(); r != nil {
		// The switch came meanwhile: the Recv may be on the ring link.
		if w, ok := link.WakerOf(r); ok {
			w.Wake()
		}
	}
}

func (l *lateLink) MTU() int                       { return l.mtu }
func (l *lateLink) HardwareAddr() net.HardwareAddr { return l.mac }

// Stats adds early's counters (its last ones, once closed) to the ring
// link's.
func (l *lateLink) Stats() (link.Stats, error) {
	st, err := l.early.Stats()
	r := l.ringLink()
	if r == nil {
		return st, err
	}
	rs, rerr := r.Stats()
	st.FramesSent += rs.FramesSent
	st.FramesReceived += rs.FramesReceived - l.dups.Load()
	st.BytesSent += rs.BytesSent
	st.BytesReceived += rs.BytesReceived - l.dupBytes.Load()
	st.KernelPackets += rs.KernelPackets
	st.KernelDrops += rs.KernelDrops
	st.KernelFreezes += rs.KernelFreezes
	st.SendRetries += rs.SendRetries
	st.Filtered += rs.Filtered
	st.SpinHits += rs.SpinHits
	st.SpinMisses += rs.SpinMisses
	st.SpinSkips += rs.SpinSkips
	return st, errors.Join(err, rerr)
}

// Close closes early and the ring link, or the sockets if the setup has
// not started; a setup under way closes its link when it ends.
func (l *lateLink) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	r := l.ringLink()
	l.mu.Unlock()
	l.closeEarly()
	var err error
	if r != nil {
		err = r.Close()
	}
	l.start.Do(func() {}) // no setup from now on
	if l.started.IsZero() {
		err = errors.Join(err, l.pending.Close())
	}
	// A setup under way closes its link when it ends.
	return err
}

// Loan, Lend, Return and Due are the ring link's (link.Lender) once it
// is set up: the frames early returned lie outside its ring, and it
// refuses them.
func (l *lateLink) Loan(data []byte) (link.Loan, bool) {
	if r := l.ringLink(); r != nil {
		return link.LoanFrom(r, data)
	}
	return 0, false
}

// Lend passes to the ring link (see Loan).
func (l *lateLink) Lend(loans []link.Loan) {
	if r := l.ringLink(); r != nil {
		link.Lend(r, loans)
	}
}

// Return passes to the ring link (see Loan).
func (l *lateLink) Return(loans []link.Loan) {
	if r := l.ringLink(); r != nil {
		link.Return(r, loans)
	}
}

// Due is the ring link's (see Loan).
func (l *lateLink) Due() (link.Loan, bool) {
	if r := l.ringLink(); r != nil {
		return link.Due(r)
	}
	return 0, false
}
