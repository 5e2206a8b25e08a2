package localapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

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
	return &Conn{c: c, path: path, rbuf: make([]byte, 1+MaxStatus+1)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// CloseWrite shuts the sending half down; the daemon sees the end.
func (c *Conn) CloseWrite() error { return c.c.CloseWrite() }

// Write sends one message.
func (c *Conn) Write(m Message) error {
	c.wbuf = m.Append(c.wbuf[:0])
	_, err := c.c.Write(c.wbuf)
	if errors.Is(err, syscall.EMSGSIZE) {
		return fmt.Errorf("rbcastd: a %v of %d bytes is larger than the socket carries: %w", m.Type(), len(c.wbuf), err)
	}
	return err
}

// ErrDaemonClosed is returned by Read when the daemon closed the
// connection without an Error message.
var ErrDaemonClosed = errors.New("rbcastd: the daemon closed the connection")

// Read returns the next message. Its data fields are valid until the next
// Read. An Error message is returned as the *Error error.
func (c *Conn) Read() (Message, error) {
	n, _, flags, _, err := c.c.ReadMsgUnix(c.rbuf, nil)
	if errors.Is(err, io.EOF) {
		return nil, ErrDaemonClosed
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, ErrDaemonClosed
	}
	if flags&unix.MSG_TRUNC != 0 {
		return nil, fmt.Errorf("rbcastd: a message from the daemon exceeded %d bytes", len(c.rbuf))
	}
	m, err := Decode(c.rbuf[:n])
	if err != nil {
		return nil, err
	}
	if e, ok := m.(*Error); ok {
		return nil, e
	}
	return m, nil
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
	return w, nil
}

// SetDeadline bounds the connection's reads and writes (zero: none).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }
