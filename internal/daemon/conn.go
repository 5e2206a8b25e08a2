package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
)

// readBuf is the largest packet read from a client: a batch, or a Send of
// the largest message a frame can carry (65535 bytes) with its type byte.
// A longer packet arrives truncated (MSG_TRUNC) and is refused as too
// large.
const readBuf = localapi.MaxBatch

// DefaultSocketBuffer is the send buffer (SO_SNDBUF) the daemon asks for
// on every client connection: up to this much delivered data waits for a
// reader in the kernel (net.core.wmem_max bounds it; 208 KiB by default,
// 4 MiB on the benchmark machines).
const DefaultSocketBuffer = 4 << 20

// conn is one client connection.
type conn struct {
	d    *Daemon
	c    *net.UnixConn
	bell *localapi.Bell  // c's, for the doorbells
	ctx  context.Context // ends when the connection is closed

	cancel    context.CancelFunc
	wmu       sync.Mutex
	wbuf      []byte
	closeOnce sync.Once
	accepted  atomic.Uint64 // Sends accepted on this connection (read by a rejoin too)
	// bound: the connection asked for something of the membership (all
	// but Hello and Status); a rejoin ends only such connections.
	bound atomic.Bool
	batch bool // the client reads DeliverBatch

	dec     localapi.Decoder
	r       *localapi.PacketReader
	version uint16 // agreed by Hello
	// level is the reliable level of this connection's sends (SendLevel;
	// serve's goroutine alone): the group's own, or Agreed or Safe in a
	// total order over views.
	level reliable.Level
	rings connRings
	// hasDeliverRing: the fan-out may write into the deliver ring
	// directly (ringRecv); slot is its reserved record.
	hasDeliverRing atomic.Bool
	slot           [][]byte
	// ringFailed: ringTooSmall has started ending the connection.
	ringFailed atomic.Bool

	smu  sync.Mutex
	sub  *subscriber
	dead bool // closed: no subscription may start
}

func (d *Daemon) accept() {
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				d.log.Error("rbcastd: accept failed; no more clients are served", "err", err)
			}
			return
		}
		// A large send buffer: what a subscriber has not read yet
		// waits in it, so a client whose output blocks for a moment
		// (a file write) does not hold the fan-out back. The kernel caps
		// it at net.core.wmem_max.
		c.SetWriteBuffer(d.cfg.SocketBuffer)
		r, err := localapi.NewPacketReader(c, 0)
		var rc syscall.RawConn
		if err == nil {
			rc, err = c.SyscallConn()
		}
		if err != nil {
			d.log.Error("rbcastd: a client's connection could not be read", "err", err)
			c.Close()
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		cn := &conn{d: d, c: c, bell: localapi.NewBell(rc), ctx: ctx, cancel: cancel, r: r}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			cancel()
			continue
		}
		d.conns[cn] = struct{}{}
		d.mu.Unlock()
		go cn.serve()
	}
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		c.c.Close()
		c.smu.Lock()
		s := c.sub
		c.dead = true
		c.smu.Unlock()
		if s != nil {
			c.d.removeSub(s)
		}
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
		if f := c.d.files; f != nil {
			f.forgetRoom(c)
		}
	})
}

func (c *conn) write(m localapi.Message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = m.Append(c.wbuf[:0])
	_, err := c.c.Write(c.wbuf)
	return err
}

// ring writes a DaemonDoorbell (localapi.Bell).
func (c *conn) ring(m *localapi.DaemonDoorbell) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = m.Append(c.wbuf[:0])
	return c.bell.Write(c.wbuf)
}

// fail answers with an Error and, unless keep, closes the connection.
func (c *conn) fail(code localapi.Code, keep bool, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	c.d.log.Debug("rbcastd: client request failed", "code", code.String(), "err", text)
	c.write(&localapi.Error{Code: code, Text: text})
	if !keep {
		c.discardInput()
		c.close()
	}
}

// discardInput reads and drops what the client sent that was not read
// yet. Linux resets a unix connection closed with unread packets in its
// receive queue, and the peer's next read then fails with ECONNRESET
// before the Error queued for it: a client that rang the doorbell of a
// ring found corrupt before the doorbell was read lost the reason.
// fail runs on other goroutines too, while the connection's reader
// waits in Read and holds its read lock: so the socket is read here
// through Control (no lock, MSG_DONTWAIT), never through Read.
func (c *conn) discardInput() {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		var buf [512]byte
		for range 1 << 16 { // bounded: a client writing without pause
			n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_DONTWAIT)
			if rerr != nil || n == 0 { // nothing left, or the client's close
				return
			}
		}
	})
}

// read reads one packet; truncated reports a packet longer than buf.
func (c *conn) read(buf []byte) (n int, truncated bool, err error) {
	n, truncated, err = c.r.Read(buf)
	if err == nil && n == 0 {
		return 0, false, errEOF // SOCK_SEQPACKET: a zero-length read is the peer's close
	}
	return n, truncated, err
}

var errEOF = errors.New("connection closed by the client")

func (c *conn) serve() {
	defer c.unmapRings()
	defer c.close()
	buf := make([]byte, readBuf)
	if !c.hello(buf) {
		return
	}
	for {
		// Messages in the send ring go first, and before the next
		// request: a client's Flush follows the messages it published.
		// The read looks at the ring while it polls, and sets its
		// wantData before it sleeps (sendRingReady).
		k, ok := c.drainSendRing()
		if !ok {
			return
		}
		c.spinAfter(k, 0)
		n, trunc, err := c.read(buf)
		if errors.Is(err, localapi.ErrReady) {
			continue
		}
		if err != nil {
			return
		}
		hops.At(hops.ConnRead, uint32(n))
		if k, ok = c.drainSendRing(); !ok {
			return
		}
		if trunc {
			c.fail(localapi.CodeTooLarge, true, "message of more than %d bytes; the daemon accepts at most %s", n-1, c.maxText())
			continue
		}
		m, err := c.dec.Decode(buf[:n])
		if err != nil {
			c.fail(localapi.CodeBadMessage, false, "%v", err)
			return
		}
		if !c.handle(m) {
			return
		}
		hops.At(hops.ConnHandled, 0)
		c.spinAfter(k, m.Type())
	}
}

// spinAfter sets how long the next read polls the client's socket (and
// send ring) before it sleeps, from what came last: a burst of k
// messages of the send ring (drainSendRing), then a packet of type t (0:
// none). A client that sends one message at a time (a ping, an
// interactive writer: a single Send, or a single record published
// alone) waits for each to go out: its next one is worth looking for
// before sleeping. One that sends batches is bound by its own pace;
// looking for its next batch only takes the CPU the group needs. A
// Doorbell, or nothing, leaves it as the ring's messages say.
func (c *conn) spinAfter(k int, t localapi.Type) {
	switch {
	case t == localapi.TSend || (k == 1 && (t == 0 || t == localapi.TDoorbell)):
		c.r.SetSpin(c.d.cfg.ClientSpin)
	case k > 1 || (t != 0 && t != localapi.TDoorbell):
		c.r.SetSpin(0)
	}
}

func (c *conn) maxText() string {
	if g := c.d.g.Load(); g != nil {
		return fmt.Sprintf("%d bytes per message", g.MaxMessage())
	}
	return "what one frame carries"
}

// hello handles the first message.
func (c *conn) hello(buf []byte) bool {
	n, trunc, err := c.read(buf)
	if err != nil {
		return false
	}
	var m localapi.Message
	if !trunc {
		m, err = c.dec.Decode(buf[:n])
	}
	h, ok := m.(*localapi.Hello)
	switch {
	case trunc || err != nil:
		c.fail(localapi.CodeBadMessage, false, "the first message must be Hello: %v", err)
		return false
	case !ok:
		c.fail(localapi.CodeUnexpected, false, "the first message must be Hello, not %v", m.Type())
		return false
	case h.Version < localapi.MinVersion || h.Version > localapi.Version:
		c.fail(localapi.CodeVersion, false, "this daemon speaks local API versions %d to %d; the client speaks version %d", localapi.MinVersion, localapi.Version, h.Version)
		return false
	}
	c.version = h.Version
	c.batch = h.Flags&localapi.HelloBatch != 0
	if h.Flags&localapi.HelloWaitReady != 0 {
		if _, err := c.d.started(c.ctx); err != nil {
			c.noGroup(err)
			return false
		}
	}
	return c.write(c.d.welcome(c.version)) == nil
}

// welcome is the Welcome of a client of the given version.
func (d *Daemon) welcome(version uint16) *localapi.Welcome {
	w := &localapi.Welcome{Version: version, Self: localapi.NoMember, Group: d.cfg.Group.Group,
		Members: uint16(d.members())}
	switch {
	case d.cfg.Group.Order == reliable.Total && d.cfg.Group.Safe:
		w.Order = localapi.OrderSafe
	case d.cfg.Group.Order == reliable.Total:
		w.Order = localapi.OrderTotal
	}
	if g := d.g.Load(); g != nil {
		w.Ready = true
		w.Self = uint16(g.Self())
		w.MaxMessage = uint32(g.MaxMessage())
	}
	return w
}

func (d *Daemon) members() int {
	if n := len(d.cfg.Group.Members); n > 0 {
		return n
	}
	return d.cfg.Group.Size
}

// handle serves one request; false ends the connection.
func (c *conn) handle(m localapi.Message) bool {
	if m.Type() != localapi.TStatus {
		c.bound.Store(true)
	}
	switch m := m.(type) {
	case *localapi.Send:
		return c.send(m.Data)
	case *localapi.SendUnreliable:
		return c.sendUnreliable(m.Data)
	case *localapi.SendLevel:
		return c.setLevel(m.Level)
	case *localapi.SendBatch:
		return c.sendBatch(m.Msgs)
	case *localapi.Flush:
		return c.flush()
	case *localapi.Subscribe:
		return c.subscribe(m.From)
	case *localapi.Status:
		b, err := json.Marshal(c.d.Status())
		if err != nil {
			c.fail(localapi.CodeUnexpected, false, "encoding the status: %v", err)
			return false
		}
		return c.write(&localapi.StatusJSON{JSON: b}) == nil
	case *localapi.Hello:
		c.fail(localapi.CodeUnexpected, false, "Hello is only valid as the first message")
		return false
	case *localapi.RingSetup:
		return c.setupRing(m)
	case *localapi.Doorbell:
		c.doorbell(m.Ring)
		return true
	case *localapi.Rekey:
		return c.rekey(m)
	case *localapi.SendFile:
		return c.sendFile(m)
	case *localapi.ReceiveFiles:
		return c.receiveFiles(m)
	}
	c.fail(localapi.CodeUnexpected, false, "%v is a daemon message; clients may not send it", m.Type())
	return false
}

// sendBatch sends a batch's messages in order; a batch with a message too
// large is refused whole.
func (c *conn) sendBatch(msgs [][]byte) bool {
	g, err := c.d.started(c.ctx)
	if err != nil {
		c.noGroup(err)
		return false
	}
	for i, d := range msgs {
		if len(d) > g.MaxMessage() {
			c.fail(localapi.CodeTooLarge, true, "message %d of the batch is %d bytes; the daemon accepts at most %d bytes per message (none of the batch was sent)", i+1, len(d), g.MaxMessage())
			return true
		}
	}
	for _, d := range msgs {
		if !c.sendOn(g, d) {
			return false
		}
	}
	return true
}

func (c *conn) send(data []byte) bool {
	g, err := c.d.started(c.ctx)
	if err != nil {
		c.noGroup(err)
		return false
	}
	if len(data) > g.MaxMessage() {
		c.fail(localapi.CodeTooLarge, true, "message of %d bytes; the daemon accepts at most %d bytes per message", len(data), g.MaxMessage())
		return true
	}
	return c.sendOn(g, data)
}

// sendOn hands one message of the right size to the group.
func (c *conn) sendOn(g *reliable.Group, data []byte) bool {
	c.d.sendMu.RLock()
	if c.d.leaving {
		c.d.sendMu.RUnlock()
		c.fail(localapi.CodeClosed, false, "the daemon is leaving the group; message %d not accepted", c.accepted.Load()+1)
		return false
	}
	err := g.SendLevel(c.ctx, c.level, data)
	c.d.sendMu.RUnlock()
	if err != nil {
		code := localapi.CodeSendFailed
		if errors.Is(err, reliable.ErrClosed) {
			code = localapi.CodeClosed
		}
		c.lostGroup(g, code, "message %d not accepted: %v", c.accepted.Load()+1, err)
		return false
	}
	c.accepted.Add(1)
	c.d.accepted.Add(1)
	return true
}

// levels are the reliable levels of a SendLevel, by its Welcome order.
var levels = [...]reliable.Level{localapi.OrderFIFO: reliable.LevelFIFO, localapi.OrderTotal: reliable.LevelAgreed, localapi.OrderSafe: reliable.LevelSafe}

// levelNames name them as rbcastd's -level does.
var levelNames = [...]string{localapi.OrderFIFO: "fifo", localapi.OrderTotal: "agreed", localapi.OrderSafe: "safe"}

// setLevel sets the level of the connection's sends from now on: the
// group's own, or in a total order over views Agreed or Safe; another
// is refused and the connection closed, so that nothing sent after it
// goes out at a level the client did not ask for.
func (c *conn) setLevel(level uint8) bool {
	own := c.d.welcome(c.version).Order
	switch {
	case level == own:
		c.level = reliable.LevelGroup
	case c.d.cfg.Group.Views && c.d.cfg.Group.Order == reliable.Total && level != localapi.OrderFIFO:
		c.level = levels[level]
	case own != localapi.OrderFIFO && level == localapi.OrderFIFO:
		c.fail(localapi.CodeSendFailed, false, "-level fifo: the daemon's group runs at %s, and FIFO per message is not offered in a total order (a FIFO message would wait for its sender's earlier messages to be ordered, as late as an Agreed one); send with -level agreed", levelNames[own])
	default:
		c.fail(localapi.CodeSendFailed, false, "-level %s: the daemon's group runs at %s, which has that level alone; a message may go agreed or safe, whatever the group's level, only in a group run with -order total -membership views", levelNames[level], levelNames[own])
	}
	return true
}

// sendUnreliable hands one message to the group at the Unreliable level.
// It is not counted as accepted (nothing acknowledges it, so a Flush does
// not wait for it); a group that has no such level refuses it, and the
// connection goes on.
func (c *conn) sendUnreliable(data []byte) bool {
	g, err := c.d.started(c.ctx)
	if err != nil {
		c.noGroup(err)
		return false
	}
	return c.unreliableOn(g, data)
}

// unreliableOn is sendUnreliable on group g.
func (c *conn) unreliableOn(g *reliable.Group, data []byte) bool {
	if len(data) > g.MaxMessage() {
		c.fail(localapi.CodeTooLarge, true, "message of %d bytes; the daemon accepts at most %d bytes per message", len(data), g.MaxMessage())
		return true
	}
	c.d.sendMu.RLock()
	if c.d.leaving {
		c.d.sendMu.RUnlock()
		c.fail(localapi.CodeClosed, false, "the daemon is leaving the group; the unreliable message was not sent")
		return false
	}
	err := g.SendUnreliable(data)
	c.d.sendMu.RUnlock()
	switch {
	case err == nil:
		c.d.datagrams.Add(1)
		return true
	case errors.Is(err, reliable.ErrNoUnreliable):
		c.fail(localapi.CodeSendFailed, true, "unreliable message not sent: this group has no Unreliable level: run the daemons with -membership views, or with -order fifo")
		return true
	case errors.Is(err, reliable.ErrClosed) || g.Err() != nil:
		// A stopped group (closed, or removed: ErrRemoved) is lost for
		// this connection as for a reliable Send: a rejoin when one comes.
		c.lostGroup(g, localapi.CodeClosed, "unreliable message not sent: %v", err)
		return false
	}
	c.fail(localapi.CodeSendFailed, true, "unreliable message not sent: %v", err)
	return true
}

// flushPoll is how often a Flush looks whether everything sent is
// acknowledged (the Group reports it in its counters, not as an event).
const flushPoll = time.Millisecond

// flush answers once every live member holds everything this member sent
// (unacked: under FIFO the core's window is empty and no frame waits for
// room; under Order Total the sequencer's all-held cursor passed our last
// message).
func (c *conn) flush() bool {
	g, err := c.d.started(c.ctx)
	if err != nil {
		c.noGroup(err)
		return false
	}
	n := waitHeld(c.ctx, g)
	switch {
	case n == 0:
		return c.write(&localapi.Flushed{Accepted: c.accepted.Load()}) == nil
	case c.ctx.Err() != nil:
		return false
	}
	what := "frames unacknowledged"
	if g.Stats().Order == reliable.Total {
		what = "messages not held by every live member"
	}
	c.lostGroup(g, localapi.CodeClosed, "the group stopped with %d %s: %v", n, what, g.Err())
	return false
}

// waitHeld waits, looking every flushPoll, until every live member holds
// everything this member sent (unacked is 0), the group stops or ctx
// ends, and returns how much is still not held then. Flush and the leave
// on SIGTERM both wait this way.
func waitHeld(ctx context.Context, g *reliable.Group) int {
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	for {
		n := unacked(g.Stats())
		if n == 0 {
			return 0
		}
		select {
		case <-t.C:
		case <-g.Done():
			return unacked(g.Stats())
		case <-ctx.Done():
			return n
		}
	}
}

func (c *conn) subscribe(from uint16) bool {
	s := &subscriber{c: c, from: from}
	c.smu.Lock()
	again, dead := c.sub != nil, c.dead
	if !again && !dead {
		c.sub = s
	}
	c.smu.Unlock()
	if dead {
		return false
	}
	if again {
		c.fail(localapi.CodeUnexpected, false, "already subscribed on this connection")
		return false
	}
	// Registered before Subscribed is answered: from Subscribed on, the
	// client may have a message sent (another connection) and expects its
	// delivery; registered after, the fan-out could deliver it before the
	// subscriber is in the list and skip it. The write lock is held from
	// before the registration until Subscribed is out, so the fan-out's
	// first delivery waits for it.
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.d.addSub(s) {
		return false
	}
	c.wbuf = (&localapi.Subscribed{From: from}).Append(c.wbuf[:0])
	_, err := c.c.Write(c.wbuf)
	return err == nil
}
