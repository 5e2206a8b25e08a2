package testnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/rbcast/rbcast/link"
)

var _ link.Link = (*Endpoint)(nil)

// Defaults used for zero EndpointConfig fields.
const (
	DefaultMTU      = 1500
	DefaultQueueLen = 256
	// MaxMTU is the largest MTU an endpoint accepts (the largest the Linux
	// kernel allows on a veth).
	MaxMTU = 65535
)

// EndpointConfig describes one simulated NIC.
type EndpointConfig struct {
	// MAC is the endpoint's unicast address. Nil means a locally
	// administered address derived from the endpoint's index:
	// 02:00:00:00:00:01 for the first, and so on.
	MAC net.HardwareAddr
	// MTU is the largest Ethernet payload; 0 means DefaultMTU. It must lie
	// in [link.MinMTU, MaxMTU] (9000 for jumbo frames, 65535 like loopback).
	MTU int
	// QueueLen bounds the receive queue in frames; 0 means DefaultQueueLen.
	// A frame that arrives at a full queue is dropped and counted in
	// Stats.KernelDrops, as the kernel does when a socket's receive buffer
	// is full. Full buffers were what lost frames in the thesis's runs
	// (Auld 2001, ch. 6, fig. 6.10): receive buffers lose a frame at one
	// member, send buffers (model them with Out loss) at all of them.
	QueueLen int
	// In and Out are the impairments of each direction.
	In, Out Impairment
}

// ErrCrashed is returned by Send and Recv on a crashed endpoint.
var ErrCrashed = errors.New("testnet: endpoint is crashed (Restart brings it back)")

// errNothingQueued is what Recv returns on an empty queue. It is a fixed
// value so that polling allocates nothing.
var errNothingQueued = fmt.Errorf("testnet: no frame has arrived by the current virtual time (time is advanced by the simulator, not by Recv): %w", os.ErrDeadlineExceeded)

// Endpoint is one NIC on a simulated segment. It implements link.Link.
type Endpoint struct {
	n     *Network
	index int
	mac   [6]byte
	mtu   int

	groups   [][6]byte // multicast addresses joined
	imp      [2]impairer
	counters [2]Counters
	stats    link.Stats

	// queue is a ring of frames that have arrived and wait for Recv.
	queue       []queued
	head, count int
	// lent holds the packets returned by the last Recv; they are recycled
	// at the next Recv, which is the ring-reuse rule of link.Link.
	lent []*packet

	crashed, closed bool
	group           int          // partition group, see Network.Partition
	deafTo          map[int]bool // endpoints whose frames it drops, see Deafen

	txFree   int64 // Switch: when this endpoint's uplink is next idle
	portFree int64 // Switch: when the switch port towards it is next idle

	onReceive  func()
	node       Node
	binding    uint64 // counts Bind calls, to notice a node replaced mid-Step
	wakeEv     *event // pending step because frames arrived
	deadlineEv *event // pending step at the node's deadline
}

type queued struct {
	pkt *packet
	at  int64
}

// Attach plugs a new endpoint into the network. Its index is the number of
// endpoints attached before it; its random streams depend only on the seed
// and that index.
func (n *Network) Attach(cfg EndpointConfig) (*Endpoint, error) {
	index := len(n.endpoints)
	where := fmt.Sprintf("endpoint %d", index)
	e := &Endpoint{n: n, index: index, mtu: cfg.MTU}
	if e.mtu == 0 {
		e.mtu = DefaultMTU
	}
	if e.mtu < link.MinMTU || e.mtu > MaxMTU {
		return nil, configErrorf("%s: MTU is %d, want %d..%d", where, cfg.MTU, link.MinMTU, MaxMTU)
	}
	qlen := cfg.QueueLen
	if qlen == 0 {
		qlen = DefaultQueueLen
	}
	if qlen < 0 {
		return nil, configErrorf("%s: QueueLen is %d, want > 0 (0 means %d)", where, cfg.QueueLen, DefaultQueueLen)
	}
	if cfg.MAC == nil {
		i := uint32(index + 1)
		e.mac = [6]byte{0x02, 0x00, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}
	} else {
		if len(cfg.MAC) != 6 {
			return nil, configErrorf("%s: MAC %v has %d bytes, want 6", where, cfg.MAC, len(cfg.MAC))
		}
		if cfg.MAC[0]&1 != 0 {
			return nil, configErrorf("%s: MAC %v is a multicast address, want unicast", where, cfg.MAC)
		}
		copy(e.mac[:], cfg.MAC)
	}
	for _, o := range n.endpoints {
		if o.mac == e.mac && !o.closed {
			return nil, configErrorf("%s: MAC %v is already used by endpoint %d", where, net.HardwareAddr(e.mac[:]), o.index)
		}
	}
	for d, im := range [2]Impairment{In: cfg.In, Out: cfg.Out} {
		if err := im.validate(fmt.Sprintf("%s, %v", where, Direction(d))); err != nil {
			return nil, err
		}
		e.imp[d] = impairer{im: im, rng: stream(n.seed, index, Direction(d))}
	}
	e.queue = make([]queued, qlen)
	n.endpoints = append(n.endpoints, e)
	return e, nil
}

// Index is the endpoint's position in attach order; traces name endpoints
// by it.
func (e *Endpoint) Index() int { return e.index }

// Network returns the network the endpoint is attached to.
func (e *Endpoint) Network() *Network { return e.n }

// MTU returns the largest Ethernet payload the endpoint carries.
func (e *Endpoint) MTU() int { return e.mtu }

// HardwareAddr returns the endpoint's MAC address.
func (e *Endpoint) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(bytes.Clone(e.mac[:])) }

// Stats returns the endpoint's counters. KernelPackets counts frames that
// reached the receive queue, KernelDrops those dropped because it was full.
func (e *Endpoint) Stats() (link.Stats, error) { return e.stats, nil }

// Counters returns what happened to frames in one direction.
func (e *Endpoint) Counters(dir Direction) Counters { return e.counters[dir&1] }

// Impairment returns the impairment of one direction.
func (e *Endpoint) Impairment(dir Direction) Impairment { return e.imp[dir&1].im }

// SetImpairment changes the impairment of one direction from now on; frames
// already in flight keep their fate. The Gilbert–Elliott state carries over.
func (e *Endpoint) SetImpairment(dir Direction, im Impairment) error {
	if dir != In && dir != Out {
		return configErrorf("endpoint %d: direction %v, want In or Out", e.index, dir)
	}
	if err := im.validate(fmt.Sprintf("endpoint %d, %v", e.index, dir)); err != nil {
		return err
	}
	e.imp[dir].im = im
	return nil
}

// JoinMulticast makes the endpoint accept frames sent to the Ethernet
// multicast address mac. Memberships survive Crash and Restart.
func (e *Endpoint) JoinMulticast(mac net.HardwareAddr) error {
	g, err := e.multicastAddr("join", mac)
	if err != nil {
		return err
	}
	for _, have := range e.groups {
		if have == g {
			return nil
		}
	}
	e.groups = append(e.groups, g)
	return nil
}

// LeaveMulticast undoes JoinMulticast.
func (e *Endpoint) LeaveMulticast(mac net.HardwareAddr) error {
	g, err := e.multicastAddr("leave", mac)
	if err != nil {
		return err
	}
	for i, have := range e.groups {
		if have == g {
			e.groups = append(e.groups[:i], e.groups[i+1:]...)
			break
		}
	}
	return nil
}

func (e *Endpoint) multicastAddr(op string, mac net.HardwareAddr) ([6]byte, error) {
	var g [6]byte
	if len(mac) != 6 || mac[0]&1 == 0 {
		return g, configErrorf("endpoint %d: %s multicast group %v: want a 6-byte address with the group bit (01 in the first byte) set", e.index, op, mac)
	}
	copy(g[:], mac)
	return g, nil
}

// accepts is the NIC's address filter.
func (e *Endpoint) accepts(dst []byte) bool {
	if dst[0]&1 == 0 {
		return [6]byte(dst[:6]) == e.mac
	}
	if [6]byte(dst[:6]) == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
		return true
	}
	for _, g := range e.groups {
		if g == [6]byte(dst[:6]) {
			return true
		}
	}
	return false
}

func (e *Endpoint) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "testnet", Addr: endpointAddr{e.index, e.mac}, Err: err}
}

type endpointAddr struct {
	index int
	mac   [6]byte
}

func (a endpointAddr) Network() string { return "testnet" }
func (a endpointAddr) String() string {
	return fmt.Sprintf("endpoint %d (%v)", a.index, net.HardwareAddr(a.mac[:]))
}

// Send puts copies of frames on the segment, in order; the caller may reuse
// its buffers at once. Every frame must hold an Ethernet header and be no
// longer than EthernetHeaderLen+MTU(). The simulated segment never pushes
// back, so Stats.SendRetries stays zero.
func (e *Endpoint) Send(frames [][]byte) (int, error) {
	switch {
	case e.closed:
		return 0, e.opError("send", net.ErrClosed)
	case e.crashed:
		return 0, e.opError("send", ErrCrashed)
	}
	for i, f := range frames {
		if len(f) < link.EthernetHeaderLen {
			return i, e.opError("send", fmt.Errorf("frame %d is %d bytes, shorter than the %d-byte Ethernet header", i, len(f), link.EthernetHeaderLen))
		}
		if limit := link.EthernetHeaderLen + e.mtu; len(f) > limit {
			return i, e.opError("send", fmt.Errorf("frame %d is %d bytes, more than %d (%d-byte header + MTU %d): %w", i, len(f), limit, link.EthernetHeaderLen, e.mtu, link.ErrFrameTooLarge))
		}
		e.transmit(f)
	}
	return len(frames), nil
}

// transmit applies the Out impairment, puts the frame on the wire and hands
// it to every receiver whose filter accepts it.
func (e *Endpoint) transmit(f []byte) {
	n := e.n
	e.stats.FramesSent++
	e.stats.BytesSent += uint64(len(f))
	pkt := n.pool.get(f)
	n.trace(EventSend, DropNone, Out, e, nil, pkt.buf)

	out := &e.imp[Out]
	ft := out.decide()
	c := &e.counters[Out]
	if ft.drop != DropNone {
		c.countDrop(ft.drop)
		n.trace(EventDrop, ft.drop, Out, e, nil, pkt.buf)
		n.pool.put(pkt)
		return
	}
	if ft.corrupt {
		out.corrupt(pkt.buf)
		c.Corrupted++
		n.trace(EventCorrupt, DropNone, Out, e, nil, pkt.buf)
	}
	if ft.reorder {
		c.Reordered++
		n.trace(EventReorder, DropNone, Out, e, nil, pkt.buf)
	}
	if ft.copies > 1 {
		c.Duplicated++
		n.trace(EventDuplicate, DropNone, Out, e, nil, pkt.buf)
	}

	pkt.refs++ // held while fanning out
	ser := n.wireTime(len(f))
	for copyNo := range ft.copies {
		extra := ft.delay
		if copyNo > 0 {
			extra = ft.delay2
		}
		var done int64
		if n.medium == SharedBus {
			n.busFree = max(n.now, n.busFree) + ser
			done = n.busFree
		} else {
			e.txFree = max(n.now, e.txFree) + ser
			done = e.txFree
		}
		for _, r := range n.endpoints {
			if r == e || r.closed || !r.accepts(pkt.buf) {
				continue
			}
			at := done
			if n.medium == Switch {
				r.portFree = max(done, r.portFree) + ser
				at = r.portFree
			}
			r.receive(e, pkt, at+n.latency+extra)
		}
	}
	n.pool.release(pkt)
}

// receive applies the In impairment to a frame from src bound for e and
// schedules its arrival at virtual time at.
func (e *Endpoint) receive(src *Endpoint, pkt *packet, at int64) {
	n := e.n
	c := &e.counters[In]
	if reason := e.barrier(src); reason != DropNone {
		c.countDrop(reason)
		n.trace(EventDrop, reason, In, src, e, pkt.buf)
		return
	}
	in := &e.imp[In]
	ft := in.decide()
	if ft.drop != DropNone {
		c.countDrop(ft.drop)
		n.trace(EventDrop, ft.drop, In, src, e, pkt.buf)
		return
	}
	frame := pkt.buf
	var corrupted *packet
	if ft.corrupt {
		corrupted = n.pool.get(frame)
		in.corrupt(corrupted.buf)
		frame = corrupted.buf
		c.Corrupted++
		n.trace(EventCorrupt, DropNone, In, src, e, frame)
	}
	if ft.reorder {
		c.Reordered++
		n.trace(EventReorder, DropNone, In, src, e, frame)
	}
	if ft.copies > 1 {
		c.Duplicated++
		n.trace(EventDuplicate, DropNone, In, src, e, frame)
	}
	for copyNo := range ft.copies {
		extra := ft.delay
		if copyNo > 0 {
			extra = ft.delay2
		}
		// Every delivery gets a buffer of its own, as every socket does on
		// Linux, so a receiver that writes into a frame cannot change what
		// another one sees.
		own := n.pool.get(frame)
		own.refs = 1
		ev := n.newEvent(evArrival, at+extra)
		ev.pkt, ev.from, ev.to = own, src, e
		n.schedule(ev)
	}
	if corrupted != nil {
		n.pool.put(corrupted)
	}
}

// barrier says whether the segment's state keeps a frame from src away from
// e: a partition between them, or e being down.
func (e *Endpoint) barrier(src *Endpoint) DropReason {
	switch {
	case e.n.partitioned && e.group != src.group, len(e.deafTo) > 0 && e.deafTo[src.index]:
		return DropPartition
	case e.crashed || e.closed:
		return DropCrashed
	}
	return DropNone
}

// arrive lands a frame in the receive queue (event evArrival).
func (e *Endpoint) arrive(pkt *packet, src *Endpoint) {
	n := e.n
	reason := e.barrier(src)
	if reason == DropNone && e.count == len(e.queue) {
		reason = DropOverflow
		e.stats.KernelDrops++
	}
	if reason != DropNone {
		e.counters[In].countDrop(reason)
		n.trace(EventDrop, reason, In, src, e, pkt.buf)
		n.pool.release(pkt)
		return
	}
	e.queue[(e.head+e.count)%len(e.queue)] = queued{pkt: pkt, at: n.now}
	e.count++
	e.stats.KernelPackets++
	n.trace(EventDeliver, DropNone, In, src, e, pkt.buf)
	if e.onReceive != nil {
		e.onReceive()
	}
	e.wake()
}

// Recv returns frames that have arrived by the network's current virtual
// time, oldest first, up to len(frames). It never blocks and ignores
// deadline: on a simulated link time is virtual and only the simulator
// advances it, so with nothing queued Recv returns 0 and an error matching
// os.ErrDeadlineExceeded at once. Returned frames stay valid until the next
// Recv or Close of this endpoint: a Crash keeps them, since under rtnet
// the crashed member's goroutine may still be reading them when another
// goroutine crashes its host.
func (e *Endpoint) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	e.releaseLent()
	switch {
	case e.closed:
		return 0, e.opError("recv", net.ErrClosed)
	case e.crashed:
		return 0, e.opError("recv", ErrCrashed)
	case len(frames) == 0:
		return 0, nil
	case e.count == 0:
		return 0, errNothingQueued
	}
	k := 0
	for k < len(frames) && e.count > 0 {
		q := e.queue[e.head]
		e.queue[e.head] = queued{}
		e.head = (e.head + 1) % len(e.queue)
		e.count--
		frames[k] = link.Frame{Data: q.pkt.buf, Time: e.n.timeAt(q.at)}
		e.lent = append(e.lent, q.pkt)
		e.stats.FramesReceived++
		e.stats.BytesReceived += uint64(len(q.pkt.buf))
		k++
	}
	return k, nil
}

// Queued returns the number of frames waiting for Recv.
func (e *Endpoint) Queued() int { return e.count }

func (e *Endpoint) releaseLent() {
	for i, pkt := range e.lent {
		e.n.pool.release(pkt)
		e.lent[i] = nil
	}
	e.lent = e.lent[:0]
}

// dropQueue discards every queued frame, counting them under reason.
func (e *Endpoint) dropQueue(reason DropReason) {
	for e.count > 0 {
		q := e.queue[e.head]
		e.queue[e.head] = queued{}
		e.head = (e.head + 1) % len(e.queue)
		e.count--
		e.counters[In].countDrop(reason)
		e.n.trace(EventDrop, reason, In, e, e, q.pkt.buf)
		e.n.pool.release(q.pkt)
	}
}

// Crash takes the endpoint down as if its host died: queued frames are
// dropped (counted as DropCrashed), frames arriving are dropped, Send and
// Recv fail with ErrCrashed, and a bound Node is not stepped. Frames it
// already put on the wire still arrive.
func (e *Endpoint) Crash() {
	if e.crashed || e.closed {
		return
	}
	e.crashed = true
	e.dropQueue(DropCrashed)
	e.cancelSteps()
}

// Restart brings a crashed endpoint back with an empty queue. Counters,
// multicast memberships and the bound Node are kept; bind a fresh Node to
// model a process that lost its state. A bound Node is stepped at once.
func (e *Endpoint) Restart() {
	if !e.crashed || e.closed {
		return
	}
	e.crashed = false
	e.wake()
}

// Crashed reports whether the endpoint is crashed.
func (e *Endpoint) Crashed() bool { return e.crashed }

// Close unplugs the endpoint for good: frames are no longer delivered to it,
// and Send and Recv return net.ErrClosed.
func (e *Endpoint) Close() error {
	if e.closed {
		return e.opError("close", net.ErrClosed)
	}
	e.dropQueue(DropCrashed)
	e.releaseLent()
	e.closed = true
	e.cancelSteps()
	e.node = nil
	return nil
}

// OnReceive sets fn to be called from the network's Step each time a frame
// lands in the receive queue (nil removes it). It is how a driver learns
// that the node owning this endpoint has input.
func (e *Endpoint) OnReceive(fn func()) { e.onReceive = fn }
