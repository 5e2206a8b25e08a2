package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Client reaches the replicas over UDP: one request at a time, numbered,
// retried on a timeout (or an unavailable answer) at the next replica
// with the same number, so the session table applies it at most once.
// Its first request opens a session (through the order; a local get
// needs none).
type Client struct {
	// ID is the client's session, opened by the first Do (0: none yet).
	// A session that expired is forgotten: the next Do opens another.
	ID uint64
	// Servers are the replicas' UDP addresses, tried in turn.
	Servers []string
	// Timeout is one attempt's wait for an answer; 0 means 500 ms.
	Timeout time.Duration

	seq    uint64
	next   int
	conn   net.PacketConn
	addrs  []net.Addr
	buf    []byte
	Tries  int // attempts of the last Do
	Served string
	// LastTry is how long the last attempt of the last Do took, from its
	// request sent to the answer (a failover's retry alone).
	LastTry time.Duration
}

// ErrNoAnswer is wrapped by Do's error when ctx ended before any replica
// answered.
var ErrNoAnswer = errors.New("kv: no replica answered")

// ErrSessionExpired is wrapped by Do's error when the client's session
// expired (the replicas' table is full and it was the least recently
// used): the request was not executed when it was answered so, but an
// earlier attempt of it may have been — its outcome is unknown. The
// client opens a new session at its next Do.
var ErrSessionExpired = errors.New("kv: session expired")

func (c *Client) open() error {
	if c.conn != nil {
		return nil
	}
	if len(c.Servers) == 0 {
		return errors.New("kv: Client.Servers is empty")
	}
	for _, s := range c.Servers {
		a, err := net.ResolveUDPAddr("udp", s)
		if err != nil {
			return fmt.Errorf("kv: server %q: %w", s, err)
		}
		c.addrs = append(c.addrs, a)
	}
	if c.Timeout == 0 {
		c.Timeout = 500 * time.Millisecond
	}
	conn, err := net.ListenPacket("udp", ":0")
	if err != nil {
		return fmt.Errorf("kv: client socket: %w", err)
	}
	c.conn, c.buf = conn, make([]byte, 65536)
	return nil
}

// Close releases the client's socket.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Seq is the sequence number of the last request.
func (c *Client) Seq() uint64 { return c.seq }

// Do runs op until a replica answers it (a result, perhaps StatusNotFound
// or StatusMismatch), or ctx ends, opening a session first if the client
// has none.
func (c *Client) Do(ctx context.Context, op Op, local bool) (Result, error) {
	if err := c.open(); err != nil {
		return Result{}, err
	}
	c.Tries = 0
	if c.ID == 0 && !(local && op.Kind == OpGet) {
		if err := c.openSession(ctx); err != nil {
			return Result{}, fmt.Errorf("%w (opening a session for %v)", err, op)
		}
	}
	c.seq++
	res, err := c.exchange(ctx, Request{Client: c.ID, Seq: c.seq, Local: local, Op: op})
	if err != nil {
		return Result{}, fmt.Errorf("%w to %v after %d tries: %w", ErrNoAnswer, op, c.Tries, err)
	}
	if res.Status == StatusExpired {
		id := c.ID
		c.ID, c.seq = 0, 0
		return res, fmt.Errorf("%w: session %d, request %v: not executed now, but an earlier attempt may have been", ErrSessionExpired, id, op)
	}
	return res, nil
}

// openSession opens a session and makes it the client's.
func (c *Client) openSession(ctx context.Context) error {
	var b [8]byte
	rand.Read(b[:])
	nonce := binary.BigEndian.Uint64(b[:]) | 1
	res, err := c.exchange(ctx, Request{Open: true, Seq: nonce})
	if err != nil {
		return fmt.Errorf("%w after %d tries: %w", ErrNoAnswer, c.Tries, err)
	}
	if res.Status != StatusOK || len(res.Value) != 8 {
		return fmt.Errorf("kv: opening a session: answered %v, want ok and an 8-byte id", res)
	}
	c.ID, c.seq = binary.BigEndian.Uint64(res.Value), 0
	return nil
}

// exchange sends q until a replica answers it with anything but
// StatusUnavailable, or ctx ends (its error).
func (c *Client) exchange(ctx context.Context, q Request) (Result, error) {
	req := AppendRequest(nil, q)
	for ctx.Err() == nil {
		c.Tries++
		i := c.next
		sent := time.Now()
		if _, err := c.conn.WriteTo(req, c.addrs[i]); err != nil {
			c.next = (i + 1) % len(c.addrs)
			continue
		}
		deadline := time.Now().Add(c.Timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		for {
			n, err := c.read(deadline)
			if err != nil {
				break // timeout: the next replica
			}
			p, err := ParseReply(c.buf[:n])
			if err != nil || p.Client != q.Client || p.Seq != q.Seq {
				continue // a late answer to an earlier attempt
			}
			if p.Result.Status == StatusUnavailable {
				// Not serving (joining, or no group): the next replica,
				// after a pause so that a group without any does not spin.
				time.Sleep(min(c.Timeout/10, 20*time.Millisecond))
				break
			}
			c.Served = c.Servers[i]
			c.LastTry = time.Since(sent)
			return p.Result, nil
		}
		c.next = (i + 1) % len(c.addrs)
	}
	return Result{}, ctx.Err()
}

// timerSlack is how late Go's runtime may wake a reader blocked until a
// deadline: the netpoller sleeps in whole milliseconds, so a deadline
// fires up to about a millisecond after it passed (0.2–0.8 ms measured
// at 500 ms; with 1 ms of slack the retry still went out up to 0.28 ms
// late, so it is 2). Failover waits out a timeout, so read waits that
// last stretch by polling instead (docs/kv.md).
const timerSlack = 2 * time.Millisecond

// read returns the next datagram's length in c.buf, or an error once
// deadline passed.
func (c *Client) read(deadline time.Time) (int, error) {
	if time.Until(deadline) > timerSlack {
		c.conn.SetReadDeadline(deadline.Add(-timerSlack))
		n, _, err := c.conn.ReadFrom(c.buf)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
	}
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		c.conn.SetReadDeadline(deadline)
		n, _, err := c.conn.ReadFrom(c.buf)
		return n, err
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	c.conn.SetReadDeadline(time.Time{}) // rc.Read refuses to run past one
	for time.Now().Before(deadline) {
		n, rerr := -1, error(nil)
		err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = syscall.Recvfrom(int(fd), c.buf, syscall.MSG_DONTWAIT)
			return true // never wait in the netpoller
		})
		switch {
		case err != nil:
			return 0, err
		case rerr == nil:
			return n, nil
		case rerr != syscall.EAGAIN && rerr != syscall.EINTR:
			return 0, rerr
		}
		runtime.Gosched()
	}
	return 0, os.ErrDeadlineExceeded
}
