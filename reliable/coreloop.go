package reliable

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
)

// CoreLoop is the live runtime of a core that is not a message group of
// its own — the file core beside rbcastd's group (Files) —
// on the node a Group and a Driver run on: the same stepper (frames
// whose tag verified stepped without their CRC, no CRC written where
// the link seals every frame), the same link sender and the same wall
// clock. One goroutine takes the turns: wait on the link until the
// core's next deadline, step what arrived and was admitted, tick, take
// Ready, send its frames, Advance, hand out what the user collected.
// What differs per core comes in through CoreConfig's hooks, not
// through branches in the loop. The user's own calls on the core (its
// Send, a new member list) run under the loop's lock (Do, Read).
//
// A frame the link cannot send is counted (Counters) and logged once;
// the loop goes on, unlike a Group's, which stops: such a core repairs
// what did not go out itself.
type CoreLoop struct {
	l     link.Link
	cfg   CoreConfig
	waker link.Waker // nil: a wait lasts IdleWait at most

	mu       sync.Mutex // guards n (the stepper, so the core) and the fields below
	n        *node
	stop     bool
	sendErrs uint64
	lastErr  error

	rx   []link.Frame
	done chan struct{}
	err  error // why the loop ended (nil: Close)
}

// CoreConfig is how a CoreLoop runs its core.
type CoreConfig struct {
	// Group and EtherType (0: frame.EtherType) are the core's frames'.
	Group     uint32
	EtherType uint16
	Logger    *slog.Logger // nil: slog.Default()
	// Epoch is the instant the core's clock counts from (zero: now).
	Epoch time.Time
	// IdleWait bounds a wait on a link that cannot be woken (no
	// link.Waker): what Do posts meanwhile is acted on at most this late
	// (0: 10 ms). With a Waker a wait lasts until the core's deadline,
	// at most a second.
	IdleWait time.Duration
	// Admit, if set, says whether a received frame is stepped; it runs
	// under the loop's lock (it may count what it refuses).
	Admit func(now core.Time, f *link.Frame) bool
	// Collect, if set, runs under the loop's lock once a turn's Ready is
	// taken, before its frames go out: it takes what the core reports
	// besides Ready, for Hand.
	Collect func()
	// Hand, if set, runs on the loop without the lock at the end of each
	// turn (after Advance): it hands out what Collect took.
	Hand func()
	// Stopped, if set, runs under the loop's lock once the loop has
	// ended (after Close, or a link that failed).
	Stopped func()
}

// coreIdleWait is CoreConfig.IdleWait's default; coreLongestWait bounds
// a wait on a link that can be woken.
const (
	coreIdleWait    = 10 * time.Millisecond
	coreLongestWait = time.Second
)

// StartCoreLoop starts the runtime of c on l (which it does not own:
// Close leaves it open).
func StartCoreLoop(l link.Link, c core.Core, cfg CoreConfig) *CoreLoop {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IdleWait <= 0 {
		cfg.IdleWait = coreIdleWait
	}
	if cfg.Epoch.IsZero() {
		cfg.Epoch = time.Now()
	}
	n := newCoreNode(l, cfg.Group, cfg.EtherType, cfg.Logger, c, wall.Clock{Epoch: cfg.Epoch})
	cl := &CoreLoop{l: l, cfg: cfg, n: n, rx: make([]link.Frame, 64), done: make(chan struct{})}
	cl.n.admit = cfg.Admit
	cl.n.out.retry = true
	if w, ok := link.WakerOf(l); ok {
		cl.waker = w
	}
	go cl.run()
	return cl
}

// Now is the core's time now.
func (cl *CoreLoop) Now() core.Time { return cl.n.clk.Core(time.Now()) }

// loopHost is what a live runtime (Group, CoreLoop) adds to the loop
// every live core runs on (runLoop): the loop's lock, when a wait on the
// link ends, what it waits on, what a failed receive means and its turn.
type loopHost interface {
	// lock and unlock take and let go of the host's lock (which guards
	// its core's stepper).
	lock()
	unlock()
	// plan runs under the lock before each wait: whether the loop ends
	// now, and the latest the wait ends.
	plan(now time.Time) (wait time.Time, stop bool)
	// receive waits, without the lock, until frames arrive or until
	// wait (os.ErrDeadlineExceeded is no failure).
	receive(wait time.Time, rx []link.Frame) (int, error)
	// failed is told of a receive that failed; the loop then ends.
	failed(err error)
	// turn takes one turn with the frames received (it takes the lock
	// itself) and says whether the loop ends.
	turn(frames []link.Frame) (stop bool)
}

// runLoop is the live runtime loop: wait on the link until the host's
// next wake-up, take a turn with what arrived, until the host stops.
func runLoop(h loopHost, rx []link.Frame) {
	for {
		h.lock()
		wait, stop := h.plan(time.Now())
		h.unlock()
		if stop {
			return
		}
		n, err := h.receive(wait, rx)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			h.failed(err)
			return
		}
		if h.turn(rx[:n]) {
			return
		}
	}
}

// run is the event loop.
func (cl *CoreLoop) run() {
	defer func() {
		cl.mu.Lock()
		if cl.cfg.Stopped != nil {
			cl.cfg.Stopped()
		}
		cl.mu.Unlock()
		close(cl.done)
	}()
	runLoop(cl, cl.rx)
}

func (cl *CoreLoop) lock()   { cl.mu.Lock() }
func (cl *CoreLoop) unlock() { cl.mu.Unlock() }

// plan: the core's deadline, at most a second away (IdleWait without a
// link.Waker).
func (cl *CoreLoop) plan(now time.Time) (time.Time, bool) {
	longest := coreLongestWait
	if cl.waker == nil {
		longest = cl.cfg.IdleWait
	}
	return cl.n.waitUntil(now, longest), cl.stop
}

func (cl *CoreLoop) receive(wait time.Time, rx []link.Frame) (int, error) {
	return cl.l.Recv(wait, rx)
}

// failed: a link closed under the loop, or after Close, ends it quietly.
func (cl *CoreLoop) failed(err error) {
	cl.mu.Lock()
	stop := cl.stop
	cl.mu.Unlock()
	if !stop && !errors.Is(err, net.ErrClosed) {
		cl.err = fmt.Errorf("reliable: the runtime of group %d: receiving: %w", cl.cfg.Group, err)
		cl.cfg.Logger.Error("rbcast: a core's runtime stopped", "group", cl.cfg.Group, "err", err)
	}
}

// turn is one turn: step frames, tick, send Ready's frames, Advance,
// hand out.
func (cl *CoreLoop) turn(frames []link.Frame) bool {
	cl.mu.Lock()
	cl.n.input(cl.Now(), frames)
	rd := cl.n.st.Ready()
	if cl.cfg.Collect != nil {
		cl.cfg.Collect()
	}
	cl.mu.Unlock()
	// The frames are the core's buffers, unchanged until Advance; Do and
	// Read only take the lock, and a core's calls made under it do not
	// produce output (docs/runtime.md, "When output appears").
	if err := cl.n.out.send(rd.Frames); err != nil {
		cl.mu.Lock()
		cl.sendErrs++
		first := cl.lastErr == nil
		cl.lastErr = err
		cl.mu.Unlock()
		if first {
			cl.cfg.Logger.Error("rbcast: a core's runtime could not send", "group", cl.cfg.Group, "err", err)
		}
	}
	cl.mu.Lock()
	cl.n.st.Advance()
	cl.mu.Unlock()
	if cl.cfg.Hand != nil {
		cl.cfg.Hand()
	}
	return false
}

// ErrLoopClosed is what Do returns once the loop is closed.
var ErrLoopClosed = errors.New("reliable: the core's runtime is closed")

// Do runs f under the loop's lock with the core's time now and, if it
// returns nil, wakes the loop so that what f posted goes out now. It
// returns ErrLoopClosed, without running f, after Close.
func (cl *CoreLoop) Do(f func(now core.Time) error) error {
	cl.mu.Lock()
	if cl.stop {
		cl.mu.Unlock()
		return ErrLoopClosed
	}
	err := f(cl.Now())
	cl.mu.Unlock()
	if err == nil {
		cl.wake()
	}
	return err
}

// Read runs f under the loop's lock (to read the core).
func (cl *CoreLoop) Read(f func()) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	f()
}

// CoreCounters are a CoreLoop's counters.
type CoreCounters struct {
	Bad      core.BadFrames // frames the stepper could not decode, by kind
	SendErrs uint64         // sends that failed
}

// Counters returns the loop's counters (not inside Read: CountersLocked).
func (cl *CoreLoop) Counters() CoreCounters {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.countersLocked()
}

// CountersLocked is Counters for a caller inside Read.
func (cl *CoreLoop) CountersLocked() CoreCounters { return cl.countersLocked() }

func (cl *CoreLoop) countersLocked() CoreCounters {
	return CoreCounters{Bad: cl.n.st.Counters().Bad, SendErrs: cl.sendErrs}
}

// wake ends the loop's wait.
func (cl *CoreLoop) wake() {
	if cl.waker != nil {
		cl.waker.Wake()
	}
}

// Done is closed once the loop has ended; Err says why.
func (cl *CoreLoop) Done() <-chan struct{} { return cl.done }

// Err is why the loop ended: nil after Close, or while it runs.
func (cl *CoreLoop) Err() error {
	select {
	case <-cl.done:
		return cl.err
	default:
		return nil
	}
}

// Close stops the loop and waits for it (Stopped has run once it
// returns).
func (cl *CoreLoop) Close() {
	cl.mu.Lock()
	cl.stop = true
	cl.mu.Unlock()
	cl.wake()
	<-cl.done
}
