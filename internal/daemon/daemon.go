// Package daemon is rbcastd's engine: it joins one reliable broadcast
// group over any link.Link and serves local programs on a Unix
// SOCK_SEQPACKET socket speaking the local API (internal/localapi,
// docs/local-api.md).
//
// Data path. A local Send (from a packet, or from the connection's send
// ring: ring.go) is handed to reliable.Group.Send, which returns once the
// message is accepted (copied into the protocol's history); a full send
// window blocks the connection, and so the client, through the socket
// buffer or its ring. Delivered messages are read from the Group by one
// fan-out goroutine straight into a DeliverBatch packet, which it writes
// to every matching subscriber once nothing more waits, or into a sole
// subscriber's deliver ring (fanout.go); a subscriber that does not read
// blocks the fan-out (it never drops), the Group's receive queue then
// fills and the group slows down (back-pressure).
//
// The daemon does not open the link: the command does, so that it can
// drop its privileges after opening it and before serving clients, and
// tests can run the daemon on the simulator.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
)

// DefaultLeaveTimeout bounds a clean leave (SIGTERM): the time to get
// everything accepted acknowledged by the live members.
const DefaultLeaveTimeout = 30 * time.Second

// DefaultMaxRingMemory bounds the clients' rings together when
// Config.MaxRingMemory is 0: sixteen clients with two rings of
// at most MaxRing (16 MiB) each.
const DefaultMaxRingMemory = 512 << 20

// Config configures a Daemon.
type Config struct {
	// Group is the group to join (reliable.Config); its Logger defaults
	// to Logger.
	Group reliable.Config
	// Logger receives the daemon's structured logs; nil means
	// slog.Default().
	Logger *slog.Logger
	// LeaveTimeout bounds the clean leave; 0 means DefaultLeaveTimeout.
	LeaveTimeout time.Duration
	// SocketBuffer is the send buffer asked for on every client
	// connection; 0 means DefaultSocketBuffer.
	SocketBuffer int
	// ClientSpin is how long a connection whose client sent a single
	// Send (not a batch) looks for the client's next packet, yielding the
	// CPU, before it sleeps until one arrives (localapi.PacketReader;
	// rbcastd run's -spin sets it with the ring's): a ping's next message
	// then need not wait for a thread to be woken. 0: never.
	ClientSpin time.Duration
	// MaxRingMemory bounds the memory of all clients' rings together
	// (local API version 2); 0 means DefaultMaxRingMemory. A RingSetup
	// beyond it is refused and the client uses its socket instead.
	MaxRingMemory int64
	// CheckSelf, when set, vets the id registration gave this member; an
	// error makes the daemon leave and Run return it.
	CheckSelf func(self frame.MemberID) error
	// RejoinWait bounds how long a request that needs the group (a
	// Send, a Flush, a Hello that waits for the group) waits while the
	// daemon joins again (Group.Views: the group went on without it); it
	// is then refused with localapi.CodeRejoining. 0 means four failure
	// timeouts.
	RejoinWait time.Duration
	// Files, if set, runs the file dissemination beside the group
	// (files.go): rbcastd sendfile, recvfile and run -inbox.
	Files *FilesConfig
	// KeysChanged, if set, is given the keys the daemon's links accept
	// (the active one first, and the other one during a rotation) after
	// every step of a rotation (rbcastd rekey install, activate,
	// retire): rbcastd run -flight-recorder hands them to its invariant
	// checker (capture.Invariants.SetKeys), which verifies frames as the
	// links do. An error is logged; the step stands.
	KeysChanged func(keys ...*auth.Key) error
}

// Daemon is one rbcastd: one group membership, many local clients.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	watch *watchLink
	ln    *net.UnixListener
	start time.Time

	// The membership. g is the group this daemon is a member of: nil
	// before it starts, and while it joins again after the group went on
	// without it (rejoin.go); it is read without a lock, and set under
	// mu, which guards the rest. up is closed when g is set or the join
	// failed (joinErr); a rejoin makes a new one. first is closed
	// with the first up.
	g         atomic.Pointer[reliable.Group]
	up        chan struct{}
	first     chan struct{}
	joinErr   error
	since     time.Time // when g was set
	rejoining bool
	rejoins   int
	lastGone  *RejoinStatus
	// viewsBefore counts the views installed in the memberships before
	// g (-membership views): Status.ViewsInstalled runs on across rejoins.
	viewsBefore int
	// rejoinHook, set by tests, runs before the daemon joins again.
	rejoinHook func()

	// sendMu: Sends hold it for reading while in Group.Send; the leave
	// takes it for writing, so that once leaving is set no Send is in
	// progress and none starts: Leave then delivers all that was
	// accepted.
	sendMu  sync.RWMutex
	leaving bool

	mu     sync.Mutex
	subs   []*subscriber // copied on change; the fan-out reads a snapshot
	conns  map[*conn]struct{}
	closed bool

	// rekeyMu orders the steps of key rotations (rbcastd rekey) and a
	// rejoin's look at the keys; keyChanges are the last steps, for
	// Status; keys are the keys the daemon knows by fingerprint (the one
	// it started with and every one installed since), from which a
	// rejoin takes those the group used.
	rekeyMu    sync.Mutex
	keyChanges []KeyChange
	keys       map[uint64]*auth.Key

	accepted  atomic.Uint64 // Sends accepted, all clients
	datagrams atomic.Uint64 // SendUnreliables handed to the group, all clients
	ringBytes atomic.Int64  // memory of every client's rings
	subsGen   atomic.Uint64 // changes of subs (fanout.go: soleRingSubscriber)
	packets   atomic.Uint64 // packets the fan-out built and wrote out (fanout.go: writeOut)
	rates     rateSampler
	files     *fileService // nil: files off
}

// New returns a Daemon; Run starts it.
func New(cfg Config) *Daemon {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Group.Logger == nil {
		cfg.Group.Logger = cfg.Logger
	}
	if cfg.LeaveTimeout == 0 {
		cfg.LeaveTimeout = DefaultLeaveTimeout
	}
	if cfg.SocketBuffer <= 0 {
		cfg.SocketBuffer = DefaultSocketBuffer
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, up: make(chan struct{}), first: make(chan struct{}), conns: map[*conn]struct{}{}, start: time.Now(),
		watch: newWatch(nil, cfg.Group.EtherType, cfg.Logger), keys: map[uint64]*auth.Key{}}
	if a := cfg.Group.Auth; a != nil && a.Key != nil {
		d.keys[a.Key.Fingerprint()] = a.Key
	}
	if cfg.Files != nil {
		d.files = newFileService(d, *cfg.Files)
	}
	return d
}

// SocketError says what is wrong with the local API socket's path:
// "socket PATH: why", no program's name (the command adds its own).
type SocketError struct {
	Path string
	Err  error
}

func (e *SocketError) Error() string { return fmt.Sprintf("socket %s: %v", e.Path, e.Err) }
func (e *SocketError) Unwrap() error { return e.Err }

// ErrSocketInUse means another daemon serves the socket path.
var ErrSocketInUse = errors.New("in use by a running daemon (stop it, or pick another path with -socket)")

// Listen creates the local API socket at path with the given permissions.
// A stale socket file (nobody listening) is replaced; a live one is
// refused with ErrSocketInUse.
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if path == "" {
		return nil, &SocketError{Path: path, Err: errors.New("empty path")}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, &SocketError{Path: path, Err: fmt.Errorf("exists and is not a socket (%v); refusing to replace it", fi.Mode().Type())}
		}
		c, err := net.DialTimeout("unixpacket", path, time.Second)
		if err == nil {
			c.Close()
			return nil, &SocketError{Path: path, Err: ErrSocketInUse}
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, &SocketError{Path: path, Err: explainPathErr(err)}
		}
		if err := os.Remove(path); err != nil {
			return nil, &SocketError{Path: path, Err: fmt.Errorf("stale socket could not be removed: %w", explainPathErr(err))}
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, &SocketError{Path: path, Err: explainPathErr(err)}
	}
	ln.SetUnlinkOnClose(true)
	if mode != 0 {
		if err := os.Chmod(path, mode); err != nil {
			ln.Close()
			return nil, &SocketError{Path: path, Err: err}
		}
	}
	return ln, nil
}

func explainPathErr(err error) error {
	switch {
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return fmt.Errorf("permission denied: this user may not create or use it (%w); pick a path it may write with -socket, or fix the directory's permissions", err)
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("directory does not exist (%w); create it or pick another path with -socket", err)
	}
	return err
}

// Run serves clients on ln and joins the group over l; it returns when ctx
// ends (after a clean leave: everything accepted is delivered to the live
// members first) or when the group fails. Under Group.Views, when the
// group goes on without this daemon (an error wrapping
// reliable.ErrRemoved, or reliable.ErrMinority), it joins again as a new
// incarnation and goes on serving (rejoin.go). It closes ln, not l.
func (d *Daemon) Run(ctx context.Context, l link.Link, ln *net.UnixListener) error {
	d.ln = ln
	d.watch.Link = l
	d.watch.wire.setOwn(l.HardwareAddr())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.accept()
	}()
	defer func() {
		d.shutdown()
		wg.Wait()
	}()
	if d.files != nil && d.files.authErr != nil {
		return fmt.Errorf("authenticating the files' link (-files=false turns files off): %w", d.files.authErr)
	}

	d.log.Info("rbcastd: joining", "group", d.cfg.Group.Group, "members", d.cfg.Group.Size, "server", d.cfg.Group.Server, "membership", membership(d.cfg.Group),
		"order", d.cfg.Group.Order.String(), "socket", ln.Addr().String())
	cfg := d.cfg.Group
	var carried *auth.Key
	short := 0 // memberships in a row that ended within rejoinShort
	for {
		g, stopFiles, err := d.join(ctx, cfg, carried)
		if err != nil && d.rejoinable(err) && ctx.Err() == nil {
			// Left out as it was admitted (Join saw its first view and
			// the group's end together): a new incarnation asks again.
			d.log.Warn("rbcastd: the group went on without this daemon as it was admitted; joining again", "err", err)
			if cfg.Incarnation != 0 {
				cfg.Incarnation++
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				what := "rbcastd: stopped before the group started"
				if d.rejoinCount() > 0 {
					what = "rbcastd: stopped while joining the group again"
				}
				d.log.Info(what, "err", err)
				return nil
			}
			return err
		}
		err = d.serveGroup(ctx, g, stopFiles)
		if err == nil || !d.rejoinable(err) || ctx.Err() != nil {
			return err
		}
		lasted := time.Since(d.memberSince())
		cfg, carried = d.rejoin(cfg, g)
		if d.rejoinHook != nil {
			d.rejoinHook()
		}
		short = nextShort(short, lasted)
		if wait := rejoinDelay(short); wait > 0 {
			d.log.Warn("rbcastd: left out again soon after joining; waiting before the next join", "member_for", lasted.Round(time.Millisecond), "in_a_row", short, "wait", wait)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				d.log.Info("rbcastd: stopped while waiting to join the group again", "err", ctx.Err())
				return nil
			}
		}
	}
}

// join joins the group with cfg (and the key carried from the membership
// before, installed beside cfg's), starts the file core on it, and then
// makes it the daemon's group: a client told the daemon is ready finds
// files on too. stopFiles stops that file core.
func (d *Daemon) join(ctx context.Context, cfg reliable.Config, carried *auth.Key) (g *reliable.Group, stopFiles func(), err error) {
	g, err = reliable.Join(ctx, d.watch, cfg)
	if err != nil {
		err = d.watch.versionError(err)
	} else if d.cfg.CheckSelf != nil {
		if err = d.cfg.CheckSelf(g.Self()); err != nil {
			g.Close()
		}
	}
	if err == nil && carried != nil {
		if a := g.Auth(); a != nil {
			if err = a.Install(carried); err != nil {
				g.Close()
				err = fmt.Errorf("installing key %s again after joining: %w", carried, err)
			}
		}
	}
	if err != nil && d.rejoinable(err) && ctx.Err() == nil {
		return nil, nil, err // Run joins again
	}
	if err != nil {
		d.mu.Lock()
		d.joinErr = err
		d.closeUp()
		d.mu.Unlock()
		return nil, nil, err
	}
	stopFiles = d.files.start(g)
	d.rates.init(g.Stats())
	d.mu.Lock()
	d.g.Store(g)
	d.since = time.Now()
	again, n := d.rejoining, d.rejoins
	if again {
		d.rejoining = false
		d.lastGone.BackAt = stamp(d.since)
	}
	d.closeUp()
	d.mu.Unlock()
	if again {
		d.log.Info("rbcastd: a member again", "group", d.cfg.Group.Group, "self", g.Self(), "view", viewID(g.Stats()), "rejoins", n)
	} else {
		d.log.Info("rbcastd: group started", "group", d.cfg.Group.Group, "self", g.Self(), "max_message", g.MaxMessage())
	}
	return g, stopFiles, nil
}

// closeUp closes up, and first the first time; d.mu is held.
func (d *Daemon) closeUp() {
	close(d.up)
	select {
	case <-d.first:
	default:
		close(d.first)
	}
}

// Started is closed once the daemon first is a member of its group (its
// first view, or a registered group's start) or its first join failed.
func (d *Daemon) Started() <-chan struct{} { return d.first }

// serveGroup hands out g's deliveries until ctx ends (then it leaves
// cleanly, and returns the leave's error) or the group stops (its error);
// stopFiles, last, stops the file core join started on g.
func (d *Daemon) serveGroup(ctx context.Context, g *reliable.Group, stopFiles func()) error {
	defer stopFiles()
	fanoutDone := make(chan struct{})
	go func() {
		defer close(fanoutDone)
		d.fanout(g)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			d.rates.sample(g.Stats())
			continue
		case <-g.Done():
			<-fanoutDone
			err := g.Err()
			if !d.rejoinable(err) || ctx.Err() != nil {
				d.log.Error("rbcastd: the group stopped", "err", err)
			}
			return fmt.Errorf("the group stopped: %w", err)
		case <-ctx.Done():
		}
		break
	}
	return d.leave(g, fanoutDone)
}

// leave is the clean leave: refuse new Sends, wait for those in progress,
// let the Group deliver everything accepted and announce the departure,
// then hand the last deliveries to the subscribers.
func (d *Daemon) leave(g *reliable.Group, fanoutDone <-chan struct{}) error {
	d.log.Info("rbcastd: leaving the group", "accepted", d.accepted.Load())
	d.sendMu.Lock()
	d.leaving = true
	d.sendMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.LeaveTimeout)
	defer cancel()
	// Settle what was accepted before announcing the leave: Leave itself
	// waits for FIFO's acknowledgements, but under Order Total a member's
	// last requests could still be unnumbered when its Leave goes out;
	// here they are held by every live member first (unacked).
	waitHeld(ctx, g)
	err := g.Leave(ctx)
	<-fanoutDone
	if err != nil {
		d.log.Error("rbcastd: leave not clean", "err", err)
		return err
	}
	st := g.Stats()
	d.log.Info("rbcastd: left the group", "sent", st.Protocol.Proposed, "delivered", st.Protocol.Delivered)
	return nil
}

// shutdown closes the listener and every connection.
func (d *Daemon) shutdown() {
	d.mu.Lock()
	d.closed = true
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	d.ln.Close()
	for _, c := range conns {
		c.c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.fail(localapi.CodeClosed, false, "rbcastd stopped")
	}
}

// started waits for the group to start (or fail to), or ctx. While the
// daemon joins again it waits at most Config.RejoinWait, then returns a
// *rejoiningError.
func (d *Daemon) started(ctx context.Context) (*reliable.Group, error) {
	var expired <-chan time.Time
	for {
		d.mu.Lock()
		g, up, err, rejoining := d.g.Load(), d.up, d.joinErr, d.rejoining
		d.mu.Unlock()
		switch {
		case g != nil:
			return g, nil
		case err != nil:
			return nil, err
		case rejoining && expired == nil:
			t := time.NewTimer(d.rejoinWait())
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expired:
			return nil, d.stillRejoining()
		}
	}
}

// isReady reports whether the daemon is a member of the group.
func (d *Daemon) isReady() bool { return d.g.Load() != nil }

func (d *Daemon) addSub(s *subscriber) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.subs = append(append([]*subscriber(nil), d.subs...), s)
	d.subsGen.Add(1)
	return true
}

func (d *Daemon) removeSub(s *subscriber) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*subscriber, 0, len(d.subs))
	for _, x := range d.subs {
		if x != s {
			out = append(out, x)
		}
	}
	d.subs = out
	d.subsGen.Add(1)
}

func (d *Daemon) subscribers() []*subscriber {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.subs
}

// unacked is how much of what this member sent is not yet held by every
// live member: under FIFO, frames not acknowledged by every live member
// or waiting for window room; under Order Total, messages not yet below
// the sequencer's all-held cursor (seq.Stats.NotHeldByAll: not yet
// numbered and delivered back, or delivered back — which needs only
// ⌈n/2⌉ holders — but not yet received by every live member). A member
// that fails stops counting once it is removed (FailureTimeout).
func unacked(st reliable.Stats) int {
	return st.Protocol.Unsettled
}

// failureTimeout is the configured or default failure timeout.
func (d *Daemon) failureTimeout() time.Duration {
	if ft := d.cfg.Group.FailureTimeout; ft > 0 {
		return ft
	}
	return reliable.DefaultFailureTimeout
}
