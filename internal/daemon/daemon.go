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
}

// Daemon is one rbcastd: one group membership, many local clients.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	watch *watchLink
	ln    *net.UnixListener
	start time.Time

	ready   chan struct{} // closed when the group has started or failed to
	g       *reliable.Group
	joinErr error

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

	accepted  atomic.Uint64 // Sends accepted, all clients
	ringBytes atomic.Int64  // memory of every client's rings
	subsGen   atomic.Uint64 // changes of subs (fanout.go: soleRingSubscriber)
	rates     rateSampler
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
	return &Daemon{cfg: cfg, log: cfg.Logger, ready: make(chan struct{}), conns: map[*conn]struct{}{}, start: time.Now(),
		watch: newWatch(nil, cfg.Group.EtherType, cfg.Logger)}
}

// SocketError says what is wrong with the local API socket's path.
type SocketError struct {
	Path string
	Err  error
}

func (e *SocketError) Error() string { return fmt.Sprintf("rbcastd: socket %s: %v", e.Path, e.Err) }
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
// members first) or when the group fails. It closes ln, not l.
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

	d.log.Info("rbcastd: joining", "group", d.cfg.Group.Group, "members", d.cfg.Group.Size, "server", d.cfg.Group.Server, "membership", membership(d.cfg.Group),
		"order", d.cfg.Group.Order.String(), "socket", ln.Addr().String())
	g, err := reliable.Join(ctx, d.watch, d.cfg.Group)
	if err != nil {
		err = d.watch.versionError(err)
		d.joinErr = err
		close(d.ready)
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			d.log.Info("rbcastd: stopped before the group started", "err", err)
			return nil
		}
		return err
	}
	if d.cfg.CheckSelf != nil {
		if err := d.cfg.CheckSelf(g.Self()); err != nil {
			g.Close()
			d.joinErr = err
			close(d.ready)
			return err
		}
	}
	d.g = g
	d.rates.init(g.Stats())
	close(d.ready)
	d.log.Info("rbcastd: group started", "group", d.cfg.Group.Group, "self", g.Self(), "max_message", g.MaxMessage())

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
			d.log.Error("rbcastd: the group stopped", "err", err)
			return fmt.Errorf("rbcastd: the group stopped: %w", err)
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

// started waits for the group to start (or fail to), or ctx.
func (d *Daemon) started(ctx context.Context) (*reliable.Group, error) {
	select {
	case <-d.ready:
		if d.joinErr != nil {
			return nil, d.joinErr
		}
		return d.g, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// isReady reports whether the group has started.
func (d *Daemon) isReady() bool {
	select {
	case <-d.ready:
		return d.g != nil
	default:
		return false
	}
}

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
