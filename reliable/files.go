package reliable

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/files"
)

// filesIdleWait bounds a wait on a link that cannot be woken (no link.Waker):
// a file queued meanwhile starts at most this late.
const filesIdleWait = 10 * time.Millisecond

// filesWakeGranularity is how late a wait for the pacer's next frame may end:
// the Go runtime's poller sleeps a whole millisecond for any shorter
// timeout (runtime/netpoll_epoll.go), and a loaded machine adds to it.
// The pacer's bucket holds at least this long's worth of frames
// (filesPacing), or every millisecond's wait would send one 32-frame burst:
// 48 MB/s at MTU 1500 whatever the rate.
const filesWakeGranularity = 2 * time.Millisecond

// filesRxBufferBytes is what a receiver's link buffers by default
// (link/ring.DefaultRingBytes: its receive ring). The multicast's window
// is at most half of it (filesPacing), so that a receiver that keeps up with
// its reports does not overflow its ring while the sender bursts.
const filesRxBufferBytes = 16 << 20

// filesPacing fills cfg's Burst and Window for this runtime where they are
// zero: a burst of filesWakeGranularity at cfg's rate, and a window half a
// receive buffer of frames (at most files.DefaultWindow).
func filesPacing(cfg files.Config) files.Config {
	rate := cfg.Rate
	if rate == 0 {
		rate = files.DefaultRate
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = files.DefaultMTU
	}
	frameBytes := int64(mtu) + 128 // Ethernet header and the ring's slot header
	if cfg.Burst == 0 {
		cfg.Burst = int(max(files.DefaultBurst, rate*int64(filesWakeGranularity)/int64(time.Second)/frameBytes))
	}
	if cfg.Window == 0 {
		cfg.Window = int(min(files.DefaultWindow, filesRxBufferBytes/2/frameBytes))
	}
	return cfg
}

// Files is the runtime of the file core (reliable/files) over a link:
// it runs one files.Core on a CoreLoop, on the node a Group runs on
// (docs/runtime.md, "Cores beside a group"). The loop waits on the link
// until the core's next deadline, steps what arrived, ticks and sends
// the core's frames; Files adds only what is the file core's own: its
// pacing, the keyed frames a runner without a key drops, and handing
// the core's reports (files received, files given up, the sender's
// verdicts) to whoever subscribed.
//
// Its methods are goroutine-safe: Send queues a file (the core reads it
// through its Source while the loop runs), SetMembers gives the core a
// new member list (a view change of the group the files go to),
// Progress and Stats read the core under the loop's lock. rbcastd runs
// one beside its message group (internal/daemon, files.go), on a link
// of its own (a group id of its own on the same interface), so the
// message group's data path is untouched.
//
// With a group key (WrapFiles: rbcastd run -key-file) the link
// authenticates every frame, and encrypts its body with -encrypt
// (link/auth, docs/auth.md): frames that do not verify are dropped and
// counted by the link (FilesStats.Auth) before the core sees them, and
// those that verified are stepped without their CRC
// (core.Stepper.StepVerified). A runner without a key drops the frames
// of its group that carry a tag (FilesStats.KeyedNoKey): their sender
// has a key this member lacks.
type Files struct {
	l         link.Link
	log       *slog.Logger
	group     uint32
	etherType uint16
	auth      *auth.Link // the link's authentication; nil: no key

	c    *files.Core // under the loop's lock (loop.Do, loop.Read)
	loop *CoreLoop

	smu  sync.Mutex
	subs map[int]func(files.Report)
	next int

	// reports are the turn's (the loop's own: Collect, then Hand).
	reports []files.Report
	// keyedNoKey (under the loop's lock) counts frames of the group that
	// carry a tag, dropped by a runner without a key.
	keyedNoKey uint64
}

// WrapFiles authenticates the files' link l of group (etherType 0: the
// default) with a's key and algorithm (auth.Wrap; a's Group, EtherType
// and Admitted are set here), for StartFiles. The derived keys are the
// files' group's own (the group id is part of every stream's key), the
// counter starts at the clock as every authenticated link's does
// (docs/auth.md, "Nonces"). A caller that runs one runner after another
// on the link (rbcastd, a runner per membership) wraps it once, so that
// the keys rotated since (Install, Activate, Retire) and the counter
// outlive each runner. The link is Admitted: it joins nothing, so a
// KeyMismatch or unauthenticated frames are only counted.
func WrapFiles(l link.Link, group uint32, etherType uint16, a auth.Config) (*auth.Link, error) {
	a.Group, a.EtherType, a.Admitted = group, etherType, true
	al, err := auth.Wrap(l, a)
	if err != nil {
		return nil, fmt.Errorf("reliable: the files' link: %w", err)
	}
	return al, nil
}

// StartFiles starts the runtime of a file core configured by cfg on l
// (which it does not own: Close leaves it open). cfg.MTU defaults to the
// link's, cfg.Dst to broadcast. An authenticated l (WrapFiles, or an
// *auth.Link of cfg.Group under wrappers that unwrap to it) makes the
// runner a keyed one.
func StartFiles(l link.Link, cfg FilesConfig, log *slog.Logger) (*Files, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.MTU == 0 {
		cfg.MTU = l.MTU()
	}
	c, err := files.New(filesPacing(cfg))
	if err != nil {
		return nil, err
	}
	et := cfg.EtherType
	if et == 0 {
		et = frame.EtherType
	}
	r := &Files{l: l, log: log, c: c, group: cfg.Group, etherType: et, auth: filesAuthOf(l), subs: map[int]func(files.Report){}}
	r.loop = StartCoreLoop(l, c, CoreConfig{
		Group: cfg.Group, EtherType: cfg.EtherType, Logger: log, IdleWait: filesIdleWait,
		Admit: r.admit, Collect: r.collect, Hand: r.handTurn,
	})
	return r, nil
}

// filesAuthOf is the authentication of l or of a link it wraps.
func filesAuthOf(l link.Link) *auth.Link {
	for l != nil {
		if a, ok := l.(*auth.Link); ok {
			return a
		}
		w, ok := l.(link.Wrapper)
		if !ok {
			return nil
		}
		l = w.Unwrap()
	}
	return nil
}

// admit drops, in a runner without a key, a frame of the group that
// carries a tag (counted in keyedNoKey); the loop steps every other
// frame (one that verified without its CRC), and the stepper or the
// core counts a bad one.
func (r *Files) admit(_ core.Time, f *link.Frame) bool {
	if f.Authenticated || r.auth != nil || !r.sealed(f.Data) {
		return true
	}
	r.keyedNoKey++
	if r.keyedNoKey == 1 {
		src := frame.Ethernet(f.Data[:frame.EthernetHeaderLen]).Src()
		r.log.Warn("rbcastd: key mismatch on the files' link: a frame of the files' group carries an authentication tag, and this member has no key (-key-file); such frames are dropped",
			"from", net.HardwareAddr(src[:]).String(), "files_group", r.group)
	}
	return false
}

// collect takes the turn's reports (under the loop's lock).
func (r *Files) collect() { r.reports = append(r.reports[:0], r.c.Reports()...) }

// handTurn hands the turn's reports out (on the loop, without its lock).
func (r *Files) handTurn() {
	if len(r.reports) > 0 {
		r.hand(r.reports)
		clear(r.reports)
		r.reports = r.reports[:0]
	}
}

// sealed says whether eth is a frame of the runner's group with an
// authentication section (a frame a runner without a key must not read:
// its tag is unchecked, its body maybe ciphertext).
func (r *Files) sealed(eth []byte) bool {
	_, b, err := frame.SplitEthernet(eth, r.etherType)
	if err != nil || len(b) < frame.HeaderLen {
		return false
	}
	v := frame.View(b)
	return v.Group() == r.group && v.Flags()&frame.FlagAuth != 0
}

// hand gives the reports to every subscriber, on the loop.
func (r *Files) hand(reports []files.Report) {
	r.smu.Lock()
	subs := make([]func(files.Report), 0, len(r.subs))
	for _, f := range r.subs {
		subs = append(subs, f)
	}
	r.smu.Unlock()
	for _, rep := range reports {
		for _, f := range subs {
			f(rep)
		}
	}
}

// Subscribe calls f with every report from now on (files received or
// given up here, and the verdicts of files sent here), on the loop: f
// must not block for long, and must not call Files.Close. The
// returned function ends the subscription.
func (r *Files) Subscribe(f func(FileReport)) (cancel func()) {
	r.smu.Lock()
	id := r.next
	r.next++
	r.subs[id] = f
	r.smu.Unlock()
	return func() {
		r.smu.Lock()
		delete(r.subs, id)
		r.smu.Unlock()
	}
}

// Send queues a file (files.Core.Send) and returns its id; the verdict
// comes to the subscribers. The source is closed by the core once the
// file closes.
func (r *Files) Send(o files.Outgoing) (uint32, error) {
	var id uint32
	err := r.loop.Do(func(now core.Time) (err error) {
		id, err = r.c.Send(now, o)
		return err
	})
	if errors.Is(err, ErrLoopClosed) {
		return 0, errors.New("reliable: the file runtime is closed")
	}
	return id, err
}

// SetMembers gives the core the group's members (a view change).
func (r *Files) SetMembers(ms []frame.MemberInfo) {
	r.loop.Do(func(core.Time) error {
		r.c.SetMembers(ms)
		return nil
	})
}

// Progress returns every transfer under way or open here.
func (r *Files) Progress() (p []FileProgress) {
	r.loop.Read(func() { p = r.c.Progress() })
	return p
}

// FilesStats are the runtime's counters.
type FilesStats struct {
	Core      files.Stats
	Bad       core.BadFrames
	SendErrs  uint64
	Busy      bool
	InFlight  int
	Open      int
	SelfID    frame.MemberID
	LinkStats link.Stats
	// Auth is the link's authentication: keys and the frames dropped by
	// reason (nil: no key).
	Auth *auth.Stats
	// KeyedNoKey counts frames of the group dropped by a runner without a
	// key because they carry an authentication tag: a key mismatch (their
	// sender has a key, this member none).
	KeyedNoKey uint64
}

// KeyMismatch says, from the counters, whether frames of the files'
// group came under a key this member does not hold, with the other
// algorithm (-encrypt differs), or with a tag while it has none ("" if
// not): what a receiver that gets none of a sender's files sees. Frames
// without a tag are not a key mismatch (a rogue's unsigned frames would
// read as one): Unauthenticated says so apart.
func (s FilesStats) KeyMismatch() string {
	switch {
	case s.KeyedNoKey > 0:
		return fmt.Sprintf("key mismatch: %d frames of the files' group carried an authentication tag, and this member has no key (-key-file)", s.KeyedNoKey)
	case s.Auth != nil && s.Auth.UnknownKey+s.Auth.Algorithm > 0:
		a := s.Auth
		return fmt.Sprintf("key mismatch: frames of the files' group dropped: %d under a key id of neither accepted key (unknown_key), %d with the other algorithm (-encrypt differs)",
			a.UnknownKey, a.Algorithm)
	}
	return ""
}

// Unauthenticated says, from the counters of a keyed member, whether
// frames of the files' group came without an authentication tag ("" if
// not): sent by a station without the group's key — a member run
// without -key-file, or a station that is no member at all — and
// dropped. It is not a key mismatch: nothing shows what key, if any,
// their sender holds.
func (s FilesStats) Unauthenticated() string {
	if s.Auth == nil || s.Auth.Unauthenticated == 0 {
		return ""
	}
	return fmt.Sprintf("unauthenticated: %d frames of the files' group carried no authentication tag and were dropped (their sender has no key: a member without -key-file, or a station that is no member)", s.Auth.Unauthenticated)
}

// Stats returns the core's and the loop's counters.
func (r *Files) Stats() FilesStats {
	var s FilesStats
	r.loop.Read(func() {
		cs := r.c.Stats()
		lc := r.loop.CountersLocked()
		s = FilesStats{Bad: lc.Bad, SendErrs: lc.SendErrs, Busy: r.c.Busy(), InFlight: cs.InFlight, SelfID: r.c.Info().Self, KeyedNoKey: r.keyedNoKey}
		if d, ok := cs.Detail.(files.Stats); ok {
			s.Core = d
		}
	})
	s.LinkStats, _ = r.l.Stats()
	if r.auth != nil {
		a := r.auth.Auth()
		s.Auth = &a
	}
	return s
}

// Done is closed once the loop has ended; Err says why.
func (r *Files) Done() <-chan struct{} { return r.loop.Done() }

// Err is why the loop ended: nil after Close.
func (r *Files) Err() error { return r.loop.Err() }

// Close stops the loop and waits for it. Files still being sent are
// given up (their sources closed); partial copies of files being
// received stay for a resume.
func (r *Files) Close() error {
	r.loop.Close()
	r.loop.Read(r.c.Release)
	return nil
}

// Members returns the member list the core has now (ids).
func (r *Files) Members() []frame.MemberID {
	var ids []frame.MemberID
	r.loop.Read(func() {
		for _, m := range r.c.Members() {
			ids = append(ids, m.ID)
		}
	})
	return slices.Clip(ids)
}
