package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

var (
	_ link.Wrapper   = (*Link)(nil)
	_ link.Stager    = (*Link)(nil)
	_ link.NowSender = (*Link)(nil)
	_ link.Lender    = (*Link)(nil)
)

// Options describe one wrapped link.
type Options struct {
	// Node is the node's id as it should appear in the capture, e.g. "3".
	Node string
	// Interface is the interface's name, e.g. "eth0"; it becomes the
	// pcapng interface name. Empty means the link's MAC address.
	Interface string
	// Clock stamps sent frames and statistics; nil means time.Now.
	// Received frames carry their own time (link.Frame.Time) and use the
	// clock only when it is zero. Simulations pass the network's virtual
	// clock (testnet.Network.Now).
	Clock func() time.Time
	// StatsInterval, when positive, writes the link's counters (a pcapng
	// Interface Statistics Block: received, kernel drops) at most this
	// often, checked as frames pass. They are always written at Close.
	StatsInterval time.Duration
	// Recorder, when set, also keeps the frames in this flight recorder.
	Recorder *Recorder
	// Invariants, when set, checks every frame sent and received against
	// the protocol invariants one node's traffic shows (see Invariants).
	Invariants *Invariants
	// EtherType of the group's frames, for Invariants; 0 means
	// frame.EtherType.
	EtherType uint16
}

// sink is a destination of records: a Writer or a Recorder.
type sink interface {
	add(rec record)
	detach(id int)
}

type sinkRef struct {
	s  sink
	id uint32 // the link's interface number in that sink
}

// Link is a link.Link that records every frame sent and received through
// it into a Writer and/or a Recorder, then passes it on. Recording never
// blocks and never fails a Send or Recv: a full queue drops the record
// and counts it in the sink's stats.
//
// It is a link.Wrapper with the inner link's capabilities: frames staged
// (Stage) and sent past the queue (SendNow) are recorded like those sent,
// and link.StagerOf, link.NowSenderOf and link.WakerOf report it as they
// report the inner link, so a runtime keeps a ring's fast send path.
type Link struct {
	l     link.Link
	sinks []sinkRef
	clock func() time.Time
	start time.Time

	statsEvery int64        // nanoseconds, 0 = only at Close
	nextStats  atomic.Int64 // Unix ns when the next periodic ISB is due
	closeOnce  sync.Once
	statsMu    sync.Mutex // serialises ISBs so they are in counter order

	inv       *Invariants
	invIface  int // the link's interface in inv
	etherType uint16
}

// Wrap returns l with every frame it sends and receives recorded into w
// (one pcapng interface per wrapped link) and opts.Recorder. Either may be
// nil, not both.
func Wrap(l link.Link, w *Writer, opts Options) (*Link, error) {
	if l == nil {
		return nil, errors.New("capture: Wrap: link is nil")
	}
	if w == nil && opts.Recorder == nil && opts.Invariants == nil {
		return nil, errors.New("capture: Wrap: neither a Writer nor a Recorder to record into, nor Invariants to check")
	}
	if opts.StatsInterval < 0 {
		return nil, fmt.Errorf("capture: Wrap: StatsInterval is %v, want >= 0 (0: statistics only at Close)", opts.StatsInterval)
	}
	c := &Link{l: l, clock: opts.Clock, statsEvery: int64(opts.StatsInterval), inv: opts.Invariants, etherType: opts.EtherType}
	if c.etherType == 0 {
		c.etherType = frame.EtherType
	}
	if c.clock == nil {
		c.clock = time.Now
	}
	c.start = c.clock()
	if c.statsEvery > 0 {
		c.nextStats.Store(c.start.UnixNano() + c.statsEvery)
	}
	mac := l.HardwareAddr()
	name := opts.Interface
	if name == "" {
		name = mac.String()
	}
	node := opts.Node
	if node == "" {
		node = "?"
	}
	desc := fmt.Sprintf("rbcast node %s on %s (%v, MTU %d)", node, name, mac, l.MTU())
	if w != nil {
		id, err := w.addInterface(name, desc, c)
		if err != nil {
			return nil, fmt.Errorf("capture: Wrap %s: %w", name, err)
		}
		c.sinks = append(c.sinks, sinkRef{w, uint32(id)})
	}
	if r := opts.Recorder; r != nil {
		c.sinks = append(c.sinks, sinkRef{r, uint32(r.addInterface(name, desc))})
	}
	if c.inv != nil {
		c.invIface = c.inv.addInterface(node)
	}
	return c, nil
}

// Unwrap returns the wrapped link.
func (c *Link) Unwrap() link.Link { return c.l }

func (c *Link) record(dir uint8, ts int64, data []byte) {
	rec := record{kind: kindPacket, dir: dir, reception: receptionType(data), ts: ts, data: data}
	if c.inv == nil {
		c.addToSinks(rec)
		return
	}
	// Checked after recording, so that a dump a violation starts (see
	// Recorder.DumpOnViolation) holds the offending frame itself: checked
	// first, the dump's goroutine could run before the frame was added.
	d := invariant.DirIn
	if dir == uint8(pcapgo.NgEpbFlagDirectionOutbound) {
		d = invariant.DirOut
	}
	c.inv.observe(c, rec, ts, d)
}

func (c *Link) addToSinks(rec record) {
	for _, s := range c.sinks {
		rec.iface = s.id
		s.s.add(rec)
	}
}

// Send records the frames the inner link sent, stamped with the clock's
// time before the send, as outbound.
func (c *Link) Send(frames [][]byte) (int, error) {
	ts := c.clock().UnixNano()
	n, err := c.l.Send(frames)
	c.sent(ts, frames[:max(n, 0)])
	return n, err
}

// Stage records the frames the inner link staged, as Send does, and
// forwards the call with link.Stage: staged where the inner link can stage
// (link.StagerOf reports this Link then too), else sent. The time stamped
// is when they were staged; a frame the kernel refuses only at Kick stays
// recorded.
func (c *Link) Stage(frames [][]byte) (int, error) {
	ts := c.clock().UnixNano()
	n, err := link.Stage(c.l, frames)
	c.sent(ts, frames[:max(n, 0)])
	return n, err
}

// Kick forwards to the inner link (link.Kick); Stage recorded the frames.
func (c *Link) Kick() error { return link.Kick(c.l) }

// SendNow records the frames the inner link sent past its queue, as Send
// does, and forwards the call with link.SendNow.
func (c *Link) SendNow(frames [][]byte) (int, error) {
	ts := c.clock().UnixNano()
	n, err := link.SendNow(c.l, frames)
	c.sent(ts, frames[:max(n, 0)])
	return n, err
}

// sent records frames sent (or staged) at ts as outbound.
func (c *Link) sent(ts int64, frames [][]byte) {
	for _, f := range frames {
		c.record(uint8(pcapgo.NgEpbFlagDirectionOutbound), ts, f)
	}
	c.maybeStats(ts)
}

// Recv records the frames the inner link returned as inbound, at their
// receive time. Copies of our own frames (Frame.Outgoing, on links that
// keep them) are recorded as outbound.
// Loan, Lend, Return and Due forward to the wrapped link's (link.LenderOf
// reports c when it has them): Recv hands the frames up unchanged, and
// what it records it copies.
func (c *Link) Loan(data []byte) (link.Loan, bool) { return link.LoanFrom(c.l, data) }
func (c *Link) Lend(loans []link.Loan)             { link.Lend(c.l, loans) }
func (c *Link) Return(loans []link.Loan)           { link.Return(c.l, loans) }
func (c *Link) Due() (link.Loan, bool)             { return link.Due(c.l) }

func (c *Link) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n, err := c.l.Recv(deadline, frames)
	var now int64
	for i := range frames[:max(n, 0)] {
		f := &frames[i]
		var ts int64
		if f.Time.IsZero() {
			if now == 0 {
				now = c.clock().UnixNano()
			}
			ts = now
		} else {
			ts = f.Time.UnixNano()
		}
		dir := uint8(pcapgo.NgEpbFlagDirectionInbound)
		if f.Outgoing {
			dir = uint8(pcapgo.NgEpbFlagDirectionOutbound)
		}
		c.record(dir, ts, f.Data)
	}
	if c.statsEvery > 0 && n > 0 {
		if now == 0 {
			now = c.clock().UnixNano()
		}
		c.maybeStats(now)
	}
	return n, err
}

func (c *Link) maybeStats(now int64) {
	if c.statsEvery == 0 {
		return
	}
	due := c.nextStats.Load()
	if now < due || !c.nextStats.CompareAndSwap(due, now+c.statsEvery) {
		return
	}
	c.writeStats()
}

// writeStats records the inner link's counters as an ISB.
func (c *Link) writeStats() {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	st, err := c.l.Stats()
	if err != nil {
		return
	}
	var data [24]byte
	binary.LittleEndian.PutUint64(data[0:], st.KernelPackets)
	binary.LittleEndian.PutUint64(data[8:], st.KernelDrops)
	binary.LittleEndian.PutUint64(data[16:], uint64(c.start.UnixNano()))
	rec := record{kind: kindStats, ts: c.clock().UnixNano(), data: data[:]}
	for _, s := range c.sinks {
		rec.iface = s.id
		s.s.add(rec)
	}
}

// interfaceStats turns a kindStats record into what pcapgo writes as an
// ISB: isb_starttime, isb_endtime, isb_ifrecv, isb_ifdrop.
func interfaceStats(rec *record) pcapgo.NgInterfaceStatistics {
	now := time.Unix(0, rec.ts)
	return pcapgo.NgInterfaceStatistics{
		LastUpdate:      now,
		StartTime:       time.Unix(0, int64(binary.LittleEndian.Uint64(rec.data[16:]))),
		EndTime:         now,
		PacketsReceived: binary.LittleEndian.Uint64(rec.data[0:]),
		PacketsDropped:  binary.LittleEndian.Uint64(rec.data[8:]),
	}
}

// MTU, HardwareAddr and Stats are the inner link's.
func (c *Link) MTU() int                       { return c.l.MTU() }
func (c *Link) HardwareAddr() net.HardwareAddr { return c.l.HardwareAddr() }
func (c *Link) Stats() (link.Stats, error)     { return c.l.Stats() }

// Close records the link's final counters, then closes the inner link.
// The Writer stays open for the other links sharing it.
func (c *Link) Close() error {
	c.closeOnce.Do(func() {
		c.writeStats()
		for _, s := range c.sinks {
			s.s.detach(int(s.id))
		}
	})
	return c.l.Close()
}

// Err returns the first error of the Writer this link records into, or
// nil. Recording errors never reach Send or Recv.
func (c *Link) Err() error {
	for _, s := range c.sinks {
		if w, ok := s.s.(*Writer); ok {
			return w.Err()
		}
	}
	return nil
}
