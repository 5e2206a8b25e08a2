package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
	"golang.org/x/sys/unix"
)

// connRings are a connection's rings (local API version 2,
// docs/local-api.md, "Rings"): memory the daemon makes, seals and shares
// with the client, so that messages and deliveries pass without a system
// call or a copy through the kernel per packet. The connection's own
// goroutine reads the send ring; the fan-out writes the deliver ring,
// under the connection's write lock. The memory is unmapped when the
// connection's goroutine ends, under that lock, once the connection is
// closed.
type connRings struct {
	send    *localapi.Ring
	deliver *localapi.Ring
	space   chan struct{} // the client made room in the deliver ring (its Doorbell)
	mems    [][]byte
	bytes   int64 // the rings' memory, counted in Daemon.ringBytes
}

// MaxRing bounds the data area of a ring the daemon makes for a client:
// two rings per connection.
const MaxRing = 16 << 20

// setupRing answers RingSetup: it makes the ring and sends its memory
// with RingReady. A refusal (an Error) keeps the connection.
func (c *conn) setupRing(m *localapi.RingSetup) bool {
	size := int(m.Size)
	_, serr := localapi.RingSize(size)
	switch {
	case c.version < 2:
		c.fail(localapi.CodeUnexpected, false, "RingSetup needs local API version 2; this connection said hello in version %d", c.version)
		return false
	case serr != nil:
		c.fail(localapi.CodeBadMessage, true, "RingSetup: %v", serr)
		return true
	case size > MaxRing:
		c.fail(localapi.CodeTooLarge, true, "RingSetup: a ring of %d bytes; the daemon makes rings of at most %d", size, MaxRing)
		return true
	case m.Ring == localapi.RingSend && c.rings.send != nil, m.Ring == localapi.RingDeliver && c.rings.deliver != nil:
		c.fail(localapi.CodeUnexpected, false, "this connection has a %s ring already", ringName(m.Ring))
		return false
	}
	if m.Ring == localapi.RingDeliver {
		c.smu.Lock()
		subscribed := c.sub != nil
		c.smu.Unlock()
		if subscribed {
			c.fail(localapi.CodeUnexpected, false, "a deliver ring must be set up before Subscribe")
			return false
		}
		// A delivery goes into the ring whole: one that cannot hold the
		// group's largest message is refused (the client keeps the
		// socket), not closed on the first large delivery.
		if g := c.d.g.Load(); g != nil && localapi.RingFor(g.MaxMessage()) > size {
			c.fail(localapi.CodeTooLarge, true, "RingSetup: a deliver ring of %d bytes cannot hold the group's largest message (%d bytes); ask for %d bytes or more, or use the socket",
				size, g.MaxMessage(), localapi.RingFor(g.MaxMessage()))
			return true
		}
	}
	most := c.d.cfg.MaxRingMemory
	if most == 0 {
		most = DefaultMaxRingMemory
	}
	if held := c.d.ringBytes.Add(int64(size)); held > most {
		c.d.ringBytes.Add(-int64(size))
		c.fail(localapi.CodeTooLarge, true, "RingSetup: the clients' rings hold %d bytes and this one would pass the daemon's bound of %d; use the socket", held-int64(size), most)
		return true
	}
	fd, mem, err := localapi.CreateRingMemory(size)
	if err != nil {
		c.d.ringBytes.Add(-int64(size))
		c.fail(localapi.CodeClosed, true, "RingSetup: %v", err)
		return true
	}
	defer unix.Close(fd)
	r, err := localapi.NewRing(m.Ring, mem, size)
	if err != nil {
		c.d.ringBytes.Add(-int64(size))
		localapi.UnmapRing(mem)
		c.fail(localapi.CodeClosed, true, "RingSetup: %v", err)
		return true
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.rings.mems = append(c.rings.mems, mem)
	c.rings.bytes += int64(size)
	if m.Ring == localapi.RingSend {
		c.rings.send = r
		c.r.SetReady(c.sendRingReady)
	} else {
		c.rings.deliver, c.rings.space = r, make(chan struct{}, 1)
		c.hasDeliverRing.Store(true)
	}
	c.wbuf = (&localapi.RingReady{Ring: m.Ring, Size: m.Size}).Append(c.wbuf[:0])
	_, _, err = c.c.WriteMsgUnix(c.wbuf, unix.UnixRights(fd), nil)
	return err == nil
}

func ringName(r uint8) string {
	if r == localapi.RingSend {
		return "send"
	}
	return "deliver"
}

// doorbell is the client's Doorbell: the send ring has records (the
// serve loop drains it before its next read anyway), or the deliver ring
// has room (wake the fan-out if it waits).
func (c *conn) doorbell(ring uint8) {
	if ring == localapi.RingDeliver && c.rings.space != nil {
		select {
		case c.rings.space <- struct{}{}:
		default:
		}
	}
}

// drainSendRing sends every message waiting in the send ring, in order,
// as Sends; burst is how many of them were published when it first
// looked (a client that sends one message at a time: 1, however many
// of its messages the drain then meets, each published after the one
// before was delivered). ok false ends the connection. The connection's
// read then looks at the ring while it polls the socket, and prepares
// it to sleep (sendRingReady).
func (c *conn) drainSendRing() (burst int, ok bool) {
	r := c.rings.send
	if r == nil {
		return 0, true
	}
	var g *reliable.Group
	n, first := 0, true
	for {
		if n > 0 && !r.Unread() {
			first = false // Next looks at the producer's index again
		}
		_, data, ok, err := r.Next()
		if err != nil {
			c.fail(localapi.CodeBadMessage, false, "%v", err)
			return burst, false
		}
		if !ok {
			break
		}
		n++
		if first {
			burst++
		}
		if g == nil {
			// A ring may be set up before the group starts, or while
			// the daemon joins again: its messages wait for the group.
			if g, err = c.d.started(c.ctx); err != nil {
				c.noGroup(err)
				return burst, false
			}
		}
		if n == 1 {
			hops.At(hops.SocketRead, hops.RingPolled)
			hops.At(hops.ConnRead, uint32(len(data)))
		}
		if len(data) > g.MaxMessage() {
			c.fail(localapi.CodeTooLarge, true, "message %d (of the send ring) is %d bytes; the daemon accepts at most %d bytes per message", c.accepted.Load()+1, len(data), g.MaxMessage())
		} else if !c.sendOn(g, data) {
			return burst, false
		}
		if n == 1 {
			hops.At(hops.ConnHandled, 0)
		}
		if n%64 == 0 && !c.releaseSendFree() { // room for the client as we go
			return burst, false
		}
	}
	return burst, c.releaseSend()
}

// sendRingReady is the connection's read's look at the send ring
// (PacketReader.SetReady): while the read polls the socket (sleep
// false), whether records wait, leaving wantData clear so that the
// client publishes without a Doorbell; before it sleeps, it sets
// wantData and looks again, so that the client's next publish rings.
// A ring that is corrupt reports true: the drain then says what is
// wrong.
func (c *conn) sendRingReady(sleep bool) bool {
	r := c.rings.send
	if !sleep {
		return r.Waiting()
	}
	asleep, err := r.WaitData()
	return err != nil || !asleep
}

// releaseSend frees what was read of the send ring, ringing the client
// if it waits for room.
func (c *conn) releaseSend() bool {
	if c.rings.send.Release() {
		return c.ring(sendRingBell) == nil
	}
	return true
}

// releaseSendFree frees what was read of the send ring as the drain goes
// on, ringing a client that waits for room only once a quarter of the
// ring is free: a client that fills the ring faster than the group takes
// it (bench, send FILE) is woken once per quarter ring, not once per 64
// messages. The drain's end (releaseSend) rings it whatever the room.
func (c *conn) releaseSendFree() bool {
	r := c.rings.send
	if r.ReleaseFree(r.Size() / 4) {
		return c.ring(sendRingBell) == nil
	}
	return true
}

var errConnClosed = errors.New("connection closed")

// The daemon's doorbells, made once: a message passed as an interface
// escapes, and these go out often.
var (
	sendRingBell    = &localapi.DaemonDoorbell{Ring: localapi.RingSend}
	deliverRingBell = &localapi.DaemonDoorbell{Ring: localapi.RingDeliver}
)

// deliverRing copies what the subscriber wants of b into its deliver
// ring and rings the client if it sleeps. When the ring is full it waits
// for the client's Doorbell without the write lock (the connection's
// goroutine may need it to answer a request meanwhile). c.wmu is held on
// entry and on return.
func (c *conn) deliverRing(b *outBatch, from uint16) error {
	if b.one != nil {
		if err := c.ringAdd(b.from, b.one[3:]); err != nil {
			return err
		}
		return c.publishDeliver()
	}
	for off := 1; off < len(b.p); {
		sender := binary.BigEndian.Uint16(b.p[off:])
		n := int(binary.BigEndian.Uint32(b.p[off+2:]))
		if from == localapi.AllMembers || from == sender {
			if err := c.ringAdd(sender, b.p[off+entryLen:off+entryLen+n]); err != nil {
				if errors.Is(err, localapi.ErrRecordTooLarge) {
					c.publishDeliver() // the client has all before the one that failed
				}
				return err
			}
		}
		off += entryLen + n
	}
	return c.publishDeliver()
}

// ringAdd adds one delivery to the deliver ring, waiting for room.
func (c *conn) ringAdd(sender uint16, data []byte) error {
	for {
		r := c.rings.deliver
		if r == nil || c.ctx.Err() != nil {
			return errConnClosed
		}
		err := r.Add(sender, data)
		if err == nil {
			return nil
		}
		if !errors.Is(err, localapi.ErrRingFull) {
			return err
		}
		if err := c.publishDeliver(); err != nil {
			return err
		}
		asleep, err := r.WaitSpace(len(data))
		if err != nil {
			return err
		}
		if !asleep {
			continue
		}
		space := c.rings.space
		c.wmu.Unlock()
		select {
		case <-space:
		case <-c.ctx.Done():
		}
		c.wmu.Lock()
	}
}

// ringRecv takes what the Group has delivered, without waiting (ctx is
// done), straight into the deliver ring: each message is received into
// the ring's next record and committed if the subscriber wants it
// (from). It stops when nothing waits (empty), the ring is full or sole
// says this is no longer the only subscriber (another one, answered
// Subscribed, wants what comes from then on), publishes, and returns how
// many messages it took; an error is the Group's (the stream's end), a
// ring that fails only ends this connection.
func (c *conn) ringRecv(g *reliable.Group, ctx context.Context, from uint16, largest int, sole func() bool) (n int, empty bool, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	r := c.rings.deliver
	if r == nil || c.ringFailed.Load() {
		return 0, false, nil
	}
	for sole() {
		c.slot, err = r.Reserve(c.slot, largest, 1)
		if err != nil {
			if errors.Is(err, localapi.ErrRecordTooLarge) {
				c.ringTooSmall(err)
				return n, false, nil
			}
			if !errors.Is(err, localapi.ErrRingFull) {
				c.closeAsync()
				return n, false, nil
			}
			break
		}
		sender, data, err := g.RecvAppend(ctx, c.slot[0][:0])
		if err != nil {
			if err == ctx.Err() {
				empty = true
				break
			}
			c.publishDeliver()
			return n, false, err
		}
		if from == localapi.AllMembers || from == uint16(sender) {
			r.Commit(uint16(sender), len(data))
		}
		n++
	}
	if err := c.publishDeliver(); err != nil {
		c.closeAsync()
		return n, false, nil
	}
	if n > 0 {
		hops.At(hops.FanoutWrote, uint32(n)) // published, as writeOut's packet
	}
	return n, empty, nil
}

// ringTooSmall ends the connection of a deliver ring set up before the
// group started (its largest message was not known yet: setupRing
// refuses one too small after) that cannot take a delivery, telling the
// client why its stream ends, once. ringRecv calls it holding c.wmu,
// which the Error's write takes: the ending runs on a goroutine of its
// own, as closeAsync. From the call on, the ring takes no delivery
// (deliver, ringRecv): the stream ends at the one it could not take.
func (c *conn) ringTooSmall(err error) {
	if c.ringFailed.Swap(true) {
		return
	}
	go c.endRingTooSmall(err)
}

func (c *conn) endRingTooSmall(err error) {
	c.d.log.Warn("rbcastd: a client's deliver ring cannot hold a delivery; its connection is closed", "err", err)
	largest := 0
	if g := c.d.g.Load(); g != nil {
		largest = g.MaxMessage()
	}
	c.fail(localapi.CodeTooLarge, false, "the deliver ring cannot take the group's deliveries (%v); set up one of %d bytes or more, or use the socket", err, localapi.RingFor(largest))
}

// closeAsync closes the connection from the fan-out, which holds c.wmu:
// the closing (which may need the lock) happens on a goroutine of its own.
func (c *conn) closeAsync() { go c.close() }

// publishDeliver publishes what was added to the deliver ring and rings
// the client if it sleeps (c.wmu is held).
func (c *conn) publishDeliver() error {
	if !c.rings.deliver.Publish() {
		return nil
	}
	c.wbuf = deliverRingBell.Append(c.wbuf[:0])
	return c.bell.Write(c.wbuf)
}

// unmapRings unmaps the connection's rings once its goroutine is done
// with them and the connection is closed: under the write lock, so that
// the fan-out is not writing the deliver ring.
func (c *conn) unmapRings() {
	c.wmu.Lock()
	mems := c.rings.mems
	c.d.ringBytes.Add(-c.rings.bytes)
	c.rings = connRings{}
	c.hasDeliverRing.Store(false)
	c.wmu.Unlock()
	for _, m := range mems {
		if err := localapi.UnmapRing(m); err != nil {
			c.d.log.Error("rbcastd: unmapping a client's ring", "err", fmt.Sprint(err))
		}
	}
}
