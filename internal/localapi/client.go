package localapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SocketDir is where the daemon's socket lives by default.
const SocketDir = "/run/rbcastd"

// DefaultSocket is the default socket path of group g.
func DefaultSocket(group uint32) string {
	return filepath.Join(SocketDir, fmt.Sprintf("group-%d.sock", group))
}

// Conn is a client's connection to the daemon.
type Conn struct {
	c    *net.UnixConn
	path string
	rbuf []byte
	wbuf []byte
	dec  Decoder
	r    *PacketReader
	rc   syscall.RawConn
}

// DialError says why the daemon's socket could not be reached.
type DialError struct {
	Path string
	Err  error
}

func (e *DialError) Error() string {
	switch {
	case errors.Is(e.Err, syscall.ENOENT):
		return fmt.Sprintf("rbcastd: no daemon socket at %s (is `rbcastd run` running for this group? pick its socket with -socket)", e.Path)
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return fmt.Sprintf("rbcastd: nobody listens on %s (a stale socket: the daemon is not running)", e.Path)
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		return fmt.Sprintf("rbcastd: permission denied on %s (this user may not use the daemon's socket: see its mode and group)", e.Path)
	case errors.Is(e.Err, syscall.EPROTOTYPE):
		return fmt.Sprintf("rbcastd: %s is not a SOCK_SEQPACKET socket (not an rbcastd socket?)", e.Path)
	}
	return fmt.Sprintf("rbcastd: connecting to %s: %v", e.Path, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// Dial connects to the daemon's socket (it does not say Hello).
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			var se *os.SyscallError
			if errors.As(oe.Err, &se) {
				err = se.Err
			} else {
				err = oe.Err
			}
		}
		return nil, &DialError{Path: path, Err: err}
	}
	r, err := NewPacketReader(c, 0)
	if err != nil {
		c.Close()
		return nil, &DialError{Path: path, Err: err}
	}
	rc, _ := c.SyscallConn()
	return &Conn{c: c, path: path, rbuf: make([]byte, 1+MaxStatus+1), r: r, rc: rc}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// CloseWrite shuts the sending half down; the daemon sees the end.
func (c *Conn) CloseWrite() error { return c.c.CloseWrite() }

// Write sends one message.
func (c *Conn) Write(m Message) error {
	c.wbuf = m.Append(c.wbuf[:0])
	return c.WritePacket(c.wbuf)
}

// WritePacket sends one message encoded already (a SendBatch a client
// fills in place, for example): p must be a whole message.
func (c *Conn) WritePacket(p []byte) error {
	_, err := c.c.Write(p)
	if errors.Is(err, syscall.EMSGSIZE) {
		return fmt.Errorf("rbcastd: a %v of %d bytes is larger than the socket carries: %w", Type(p[0]), len(p), err)
	}
	return err
}

// SetSpin has reads look for a packet this long, yielding the CPU between
// looks, before they sleep until one arrives: a client waiting for one
// answer at a time (a ping) then need not be woken, which costs tens of
// µs in a VM whose idle vCPUs halt (as the ring's Config.RxSpin). Zero,
// the default, never spins.
func (c *Conn) SetSpin(d time.Duration) { c.r.spin = d }

// ErrDaemonClosed is returned by Read when the daemon closed the
// connection without an Error message.
var ErrDaemonClosed = errors.New("rbcastd: the daemon closed the connection")

// Read returns the next message, valid (with its data fields) until the
// next Read; in steady state Read does not allocate. An Error message is
// returned as the *Error error.
func (c *Conn) Read() (Message, error) {
	n, err := c.ReadPacket(c.rbuf)
	if err != nil {
		return nil, err
	}
	m, err := c.dec.Decode(c.rbuf[:n])
	if err != nil {
		return nil, err
	}
	if e, ok := m.(*Error); ok {
		return nil, e
	}
	return m, nil
}

// ReadPacket reads the next packet into buf, undecoded (a client that
// decodes elsewhere, with a Decoder of its own); buf should hold
// MaxBatch bytes, or 1+MaxStatus to take a StatusJSON.
func (c *Conn) ReadPacket(buf []byte) (int, error) {
	n, trunc, err := c.r.Read(buf)
	if errors.Is(err, io.EOF) {
		return 0, ErrDaemonClosed
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, ErrDaemonClosed // SOCK_SEQPACKET: the daemon closed
	}
	if trunc {
		return 0, fmt.Errorf("rbcastd: a message from the daemon exceeded %d bytes", len(buf))
	}
	return n, nil
}

// PacketReader reads the packets of a SOCK_SEQPACKET connection without
// allocating (net.UnixConn's ReadMsgUnix allocates the peer's address on
// every read). With a spin it first looks for a packet that long,
// yielding the CPU between looks, before it sleeps in the poller until one
// arrives (Conn.SetSpin; the daemon reads its clients the same way). It
// honours the connection's read deadline. One goroutine at a time may
// Read.
type PacketReader struct {
	rc   syscall.RawConn
	spin time.Duration
	try  func(fd uintptr) bool // r.recv, made once
	// The read in progress.
	buf   []byte
	n     int
	errno syscall.Errno
	start time.Time
	spun  bool
	// Contention: a yield that kept the CPU away for long means other
	// processes want it; spinning then stops until off, for a pause that
	// doubles with each contended spin (as the ring's RxSpin does).
	off   time.Time
	pause time.Duration
}

// Back-off of the spin under contention, as link/ring's: a yield longer
// than spinContended (or the spin, if longer) counts as contention.
const (
	spinContended = time.Millisecond
	spinPauseMin  = 10 * time.Millisecond
	spinPauseMax  = time.Second
)

// SetSpin sets how long the next reads look for a packet before they
// sleep (0: never).
func (r *PacketReader) SetSpin(d time.Duration) { r.spin = d }

// NewPacketReader returns a reader of c's packets that spins for spin
// (0: never) before it sleeps.
func NewPacketReader(c *net.UnixConn, spin time.Duration) (*PacketReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &PacketReader{rc: rc, spin: spin}
	r.try = r.recv
	return r, nil
}

// Read reads one packet into buf (which must not be empty). truncated
// says the packet was longer than buf: its first len(buf) bytes are in
// buf, the rest is lost. A zero n with a nil error is the peer's close.
func (r *PacketReader) Read(buf []byte) (n int, truncated bool, err error) {
	r.buf, r.n, r.errno, r.start, r.spun = buf, 0, 0, time.Time{}, false
	if err := r.rc.Read(r.try); err != nil {
		return 0, false, &net.OpError{Op: "read", Net: "unixpacket", Err: err}
	}
	r.buf = nil
	if r.errno != 0 {
		return 0, false, &net.OpError{Op: "read", Net: "unixpacket", Err: os.NewSyscallError("recvfrom", r.errno)}
	}
	if r.n > len(buf) {
		return len(buf), true, nil
	}
	return r.n, false, nil
}

// recv is one attempt of Read on the socket: a non-blocking recvfrom
// without the peer's address (MSG_TRUNC: the packet's whole length), then
// the spin; false has the poller wait until the socket is readable.
func (r *PacketReader) recv(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)),
			unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		switch e {
		case 0:
			r.n = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			r.errno = e
			return true
		}
		if r.spin <= 0 || r.spun {
			return false
		}
		now := time.Now()
		if r.start.IsZero() {
			if now.Before(r.off) {
				r.spun = true
				return false
			}
			r.start = now
		} else if now.Sub(r.start) >= r.spin {
			r.spun = true
			r.pause /= 2
			return false
		}
		runtime.Gosched()
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		if away := time.Since(now); away > max(r.spin, spinContended) {
			r.pause = min(max(2*r.pause, spinPauseMin), spinPauseMax)
			r.off = now.Add(away).Add(r.pause)
			r.spun = true
		}
	}
}

// Pending reports whether a packet waits to be read (SIOCINQ), so that
// a client may write out what it buffered before a Read that would wait.
func (c *Conn) Pending() bool {
	n := 0
	c.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// Hello says hello with flags (HelloWaitReady: the daemon answers once
// the group has started; HelloBatch: this client reads DeliverBatch) and
// returns the daemon's Welcome.
func (c *Conn) Hello(flags uint16) (*Welcome, error) {
	h := &Hello{Version: Version, Flags: flags}
	if err := c.Write(h); err != nil {
		return nil, err
	}
	m, err := c.Read()
	if err != nil {
		return nil, err
	}
	w, ok := m.(*Welcome)
	if !ok {
		return nil, fmt.Errorf("rbcastd: the daemon answered Hello with %v", m.Type())
	}
	cp := *w // the caller's, not the decoder's
	return &cp, nil
}

// SetDeadline bounds the connection's reads and writes (zero: none).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }
