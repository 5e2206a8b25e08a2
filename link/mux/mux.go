// Package mux runs several rbcast groups over one link in one process: a
// Mux demultiplexes the frames of one link.Link by their group id
// (link.GroupOffset) into views, one link.Link per group, each of which a
// runtime (reliable.Join, dsm) uses as if it had the link to itself.
//
// # Receiving
//
// There is no goroutine of the Mux's own. A view's Recv that finds its
// queue empty reads the shared link itself, if no other view is reading
// it, and hands what it reads to the views it belongs to; otherwise it
// waits until the view reading hands it frames, or its deadline passes,
// or the reader leaves (then it reads itself). So the link is read by
// whichever group's event loop needs frames, and a group whose loop is
// busy stepping frames never delays another's.
//
// Every frame is copied, once, from the shared link into a buffer of its
// view's queue, which Recv then returns as views valid until the view's
// next Recv (the ring-reuse rule of link.Link, per view). Handing out the
// shared link's own buffers instead is not possible without coupling the
// groups: a ring-backed link gives back every slot of a batch at its next
// Recv, so that Recv would have to wait until every group holding a frame
// of the batch had finished with it (a reliable event loop holds its
// frames while it steps them and hands out what they deliver, up to a
// millisecond), and a busy group would delay an idle one's frames by that
// much. docs/groups.md has the copy's cost.
//
// A view's queue holds Config.Queue frames; a frame that finds its view's
// queue full is dropped and counted in that view's Stats.KernelDrops, as a
// kernel ring counts what overflows it: the protocol repairs it, and a
// group that does not read never holds up the others.
//
// A frame of a group without a view, or too short to name a group, is
// dropped and counted in every view's Stats.Filtered. If the shared link
// has a kernel group filter (link.GroupFilterOf: link/ring,
// link/afpacket), the Mux keeps it set to the groups of its open views, so
// such frames are dropped by the kernel and cost the process nothing.
//
// # Sending
//
// Views send on the shared link, one at a time: Send and Stage under one
// lock (a Send goes out after the frames staged before it, whichever view
// staged them), SendNow under another where the link can send past its
// queue. Kick runs unlocked (link.Stager allows it beside the others).
// A view forwards the link's capabilities as a decorator does (it is a
// link.Wrapper: StagerOf and NowSenderOf report them as the shared link
// has them), and is a link.Waker if the shared link is one.
package mux

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/link"
)

// DefaultQueueBytes bounds the memory of one view's queue when
// Config.Queue is zero: at most DefaultQueue frames, fewer at a large MTU.
const (
	DefaultQueue      = 1024
	DefaultQueueBytes = 8 << 20
)

// Config tunes a Mux. The zero value is ready to use.
type Config struct {
	// Queue is how many received frames wait in one view's queue (each in
	// a buffer of 14+MTU bytes, allocated when the view opens); 0 means
	// DefaultQueue, or as many as fit in DefaultQueueBytes at a large MTU.
	Queue int
	// NoKernelFilter leaves the shared link's group filter alone: every
	// group's frames then reach the Mux, which drops those of groups
	// without a view (for measurements, and for links shared with code
	// that filters by itself).
	NoKernelFilter bool
}

// Stats are a Mux's own counters.
type Stats struct {
	// NoView counts frames of a group without an open view, or too short
	// to name a group: dropped.
	NoView uint64
	// Late counts frames of a group whose view this Mux closed, read
	// after the close (queued before the kernel filter dropped the
	// group): dropped, and not counted in NoView or a view's Filtered.
	Late uint64
	// Groups are the open views' counters, by group id.
	Groups map[uint32]GroupStats
}

// GroupStats are one view's counters.
type GroupStats struct {
	FramesReceived, BytesReceived uint64 // handed out by Recv
	FramesSent, BytesSent         uint64
	Dropped                       uint64 // the view's queue was full
	Queued                        int    // waiting for Recv now
}

// Mux demultiplexes one link by rbcast group. Its methods and its views'
// are safe for concurrent use; each view, like any link.Link, for one
// receiving and one sending goroutine at a time.
type Mux struct {
	l       link.Link
	cfg     Config
	waker   link.Waker       // nil: the shared link cannot be woken
	filter  link.GroupFilter // nil: no kernel filter (or NoKernelFilter)
	slotLen int

	mu     sync.Mutex
	views  []*view // open views, by group, sorted
	reader *view   // the view whose Recv is reading l; nil: none
	rx     []link.Frame
	err    error // l's Recv failed for good (closed)
	closed bool
	noView uint64
	// gone: groups whose view this Mux closed. Their frames read after
	// the close were queued before the kernel filter dropped the group:
	// they are not another group's, so they count in lateFrames, not in
	// noView (Filtered).
	gone       []uint32
	lateFrames uint64
	sendMu     sync.Mutex // Send and Stage, and SendNow where l has no NowSender
	nowMu      sync.Mutex // SendNow
	filterM    sync.Mutex // serialises SetGroups calls in filter order
}

// New returns a Mux over l, which it owns: Close closes it.
func New(l link.Link, cfg Config) (*Mux, error) {
	if cfg.Queue < 0 {
		return nil, fmt.Errorf("mux: Config.Queue = %d: want 0 (the default) or more", cfg.Queue)
	}
	m := &Mux{l: l, cfg: cfg, slotLen: link.EthernetHeaderLen + l.MTU(), rx: make([]link.Frame, 64)}
	if m.cfg.Queue == 0 {
		m.cfg.Queue = max(16, min(DefaultQueue, DefaultQueueBytes/m.slotLen))
	}
	if w, ok := link.WakerOf(l); ok {
		m.waker = w
	}
	if f, ok := link.GroupFilterOf(l); ok && !cfg.NoKernelFilter {
		m.filter = f
	}
	return m, nil
}

// Link returns the shared link.
func (m *Mux) Link() link.Link { return m.l }

// ErrGroupOpen is Open's error for a group that has a view already.
var ErrGroupOpen = errors.New("mux: the group has an open view already")

// Open returns the view of group: a link.Link that receives the shared
// link's frames of that group only, and sends on the shared link. Close
// it to drop the group. The kernel filter, if the link has one, passes
// the group's frames from now on.
func (m *Mux) Open(group uint32) (link.Link, error) {
	v := &view{m: m, group: group, sig: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	v.timer.Stop()
	v.addr = viewAddr(fmt.Sprintf("group %d", group))
	v.expired = &net.OpError{Op: "recv", Net: "rbcast", Addr: v.addr, Err: os.ErrDeadlineExceeded}
	v.q.init(m.cfg.Queue, m.slotLen)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, &net.OpError{Op: "open", Net: "rbcast", Addr: v.addr, Err: net.ErrClosed}
	}
	i, found := slices.BinarySearchFunc(m.views, group, func(v *view, g uint32) int { return cmpGroup(v.group, g) })
	if found {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: group %d", ErrGroupOpen, group)
	}
	m.views = slices.Insert(m.views, i, v)
	if j := slices.Index(m.gone, group); j >= 0 {
		m.gone = slices.Delete(m.gone, j, j+1)
	}
	m.mu.Unlock()
	if err := m.setFilter(); err != nil {
		v.Close()
		return nil, err
	}
	if m.waker != nil {
		return &wakerView{v}, nil
	}
	return v, nil
}

func cmpGroup(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// setFilter sets the kernel filter to the open views' groups. With no
// view open it leaves the filter as it was: an empty set would pass
// every group.
func (m *Mux) setFilter() error {
	if m.filter == nil {
		return nil
	}
	m.filterM.Lock()
	defer m.filterM.Unlock()
	m.mu.Lock()
	groups := make([]uint32, len(m.views))
	for i, v := range m.views {
		groups[i] = v.group
	}
	closed := m.closed
	m.mu.Unlock()
	if len(groups) == 0 || closed {
		return nil
	}
	if err := m.filter.SetGroups(groups); err != nil {
		return fmt.Errorf("mux: setting the link's group filter: %w", err)
	}
	return nil
}

// Stats returns the Mux's counters.
func (m *Mux) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{NoView: m.noView, Late: m.lateFrames, Groups: make(map[uint32]GroupStats, len(m.views))}
	for _, v := range m.views {
		s.Groups[v.group] = v.groupStats()
	}
	return s
}

// Close closes every view and the shared link.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	views := m.views
	m.views = nil
	for _, v := range views {
		v.closed = true
		v.signal()
	}
	m.mu.Unlock()
	return m.l.Close()
}

// view finds the open view of group; m.mu is held.
func (m *Mux) view(group uint32) *view {
	if len(m.views) == 1 {
		if m.views[0].group == group {
			return m.views[0]
		}
		return nil
	}
	i, found := slices.BinarySearchFunc(m.views, group, func(v *view, g uint32) int { return cmpGroup(v.group, g) })
	if !found {
		return nil
	}
	return m.views[i]
}

// viewOf is the open view of f's group, or nil: f is then counted as
// late (its group's view closed) or of no view; m.mu is held.
func (m *Mux) viewOf(f *link.Frame) *view {
	g, ok := link.FrameGroup(f.Data)
	if ok {
		if v := m.view(g); v != nil {
			return v
		}
	}
	if ok && slices.Contains(m.gone, g) {
		m.lateFrames++
	} else {
		m.noView++
	}
	return nil
}

// dispatch copies frames into their views' queues and signals the views
// that got some, but self; m.mu is held.
func (m *Mux) dispatch(frames []link.Frame, self *view) {
	for i := range frames {
		f := &frames[i]
		v := m.viewOf(f)
		if v == nil {
			continue
		}
		if !v.q.push(f) {
			v.dropped++
			continue
		}
		if v != self {
			v.signal()
		}
	}
}

// handOff wakes the views waiting for frames, so that one of them reads
// the link now that its reader has left Recv; m.mu is held.
func (m *Mux) handOff() {
	for _, v := range m.views {
		if v.waiting {
			v.signal()
		}
	}
}

// queue is one view's received frames: a ring of buffers, each holding a
// copy of one frame. Slots [start, start+held) were returned by the last
// Recv and stay untouched until the next; the n after them wait.
type queue struct {
	slots             [][]byte
	meta              []link.Frame // Time, Outgoing and length (in Data) of each slot
	start, held, n    int
	bytesIn, framesIn uint64
}

func (q *queue) init(count, slotLen int) {
	backing := make([]byte, count*slotLen)
	q.slots = make([][]byte, count)
	q.meta = make([]link.Frame, count)
	for i := range q.slots {
		q.slots[i] = backing[i*slotLen : (i+1)*slotLen : (i+1)*slotLen]
	}
}

// push copies f into the next free slot; false if there is none.
func (q *queue) push(f *link.Frame) bool {
	if q.held+q.n == len(q.slots) || len(f.Data) > len(q.slots[0]) {
		return false
	}
	i := (q.start + q.held + q.n) % len(q.slots)
	m := &q.meta[i]
	m.Data = q.slots[i][:copy(q.slots[i], f.Data)]
	m.Time, m.Outgoing = f.Time, f.Outgoing
	q.n++
	return true
}

// release gives back the slots the last take returned.
func (q *queue) release() {
	q.start = (q.start + q.held) % len(q.slots)
	q.held = 0
}

// take fills frames from the queue and holds those slots until release.
func (q *queue) take(frames []link.Frame) int {
	k := min(len(frames), q.n)
	for j := range k {
		i := (q.start + j) % len(q.slots)
		frames[j] = q.meta[i]
		q.bytesIn += uint64(len(q.meta[i].Data))
	}
	q.held, q.n = k, q.n-k
	q.framesIn += uint64(k)
	return k
}

// view is one group's link.Link over the Mux.
type view struct {
	m       *Mux
	group   uint32
	addr    viewAddr
	expired error // returned at the deadline; made once, timeouts do not allocate

	// Guarded by m.mu.
	q       queue
	closed  bool
	waiting bool // in Recv, waiting for frames or for the reader to leave
	woken   bool // Wake was called and no Recv has seen it yet
	dropped uint64

	sig   chan struct{} // signalled (m.mu held) when there is news for a waiting Recv
	timer *time.Timer   // the waiting Recv's deadline; used by the receiving goroutine only

	framesSent, bytesSent atomic.Uint64
}

var (
	_ link.Wrapper   = (*view)(nil)
	_ link.Stager    = (*view)(nil)
	_ link.NowSender = (*view)(nil)
	_ link.Waker     = (*wakerView)(nil)
)

// wakerView is a view over a link that can be woken, and so can be too.
type wakerView struct{ *view }

// Wake implements link.Waker.
func (w *wakerView) Wake() { w.view.wake() }

func (v *view) signal() {
	select {
	case v.sig <- struct{}{}:
	default:
	}
}

// Unwrap returns the shared link.
func (v *view) Unwrap() link.Link { return v.m.l }

// MTU is the shared link's.
func (v *view) MTU() int { return v.m.l.MTU() }

// HardwareAddr is the shared link's.
func (v *view) HardwareAddr() net.HardwareAddr { return v.m.l.HardwareAddr() }

// Recv implements link.Link: it returns this group's frames, reading the
// shared link itself when no other view is reading it.
func (v *view) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if len(frames) == 0 {
		return 0, v.opError("recv", errors.New("no room: Recv was given an empty frames slice"))
	}
	m := v.m
	m.mu.Lock()
	read := false
	defer func() {
		if read {
			// The link has no reader now: a view waiting for frames
			// reads it.
			m.handOff()
		}
		m.mu.Unlock()
	}()
	v.q.release()
	for {
		switch {
		case v.closed:
			return 0, v.opError("recv", net.ErrClosed)
		case v.q.n > 0:
			return v.q.take(frames), nil
		case v.woken:
			v.woken = false
			return 0, v.expired
		case m.err != nil:
			return 0, v.opError("recv", m.err)
		case m.reader == nil:
			read = true
			n, err := v.read(deadline)
			if v.q.n > 0 || n > 0 && err == nil {
				continue
			}
			switch {
			case v.closed:
				continue // woken by Close
			case err == nil:
				continue
			case errors.Is(err, os.ErrDeadlineExceeded):
				v.woken = false
				return 0, v.expired
			}
			return 0, v.opError("recv", err)
		case !deadline.IsZero() && !time.Now().Before(deadline):
			return 0, v.expired
		}
		v.wait(deadline)
	}
}

// read reads the shared link once, as the reader, and dispatches what it
// read; m.mu is held, and released while reading.
func (v *view) read(deadline time.Time) (int, error) {
	m := v.m
	m.reader = v
	rx := m.rx
	m.mu.Unlock()
	n, err := m.l.Recv(deadline, rx)
	m.mu.Lock()
	m.reader = nil
	m.dispatch(rx[:n], v)
	clear(rx[:n]) // the link's buffers are its own again
	if err != nil && errors.Is(err, net.ErrClosed) {
		m.err = net.ErrClosed
	}
	return n, err
}

// wait waits until the view is signalled or its deadline passes; m.mu is
// held, and released while waiting.
func (v *view) wait(deadline time.Time) {
	v.waiting = true
	v.m.mu.Unlock()
	if deadline.IsZero() {
		<-v.sig
	} else {
		v.timer.Reset(time.Until(deadline))
		select {
		case <-v.sig:
		case <-v.timer.C:
		}
		v.timer.Stop()
	}
	v.m.mu.Lock()
	v.waiting = false
}

func (v *view) wake() {
	m := v.m
	m.mu.Lock()
	v.woken = true
	reading := m.reader == v
	v.signal()
	m.mu.Unlock()
	if reading {
		m.waker.Wake()
	}
}

// Send implements link.Link on the shared link.
func (v *view) Send(frames [][]byte) (int, error) {
	if v.isClosed() {
		return 0, v.opError("send", net.ErrClosed)
	}
	v.m.sendMu.Lock()
	n, err := v.m.l.Send(frames)
	v.m.sendMu.Unlock()
	v.sent(frames, n)
	return n, err
}

// Stage implements link.Stager by the shared link's (link.Stage).
func (v *view) Stage(frames [][]byte) (int, error) {
	if v.isClosed() {
		return 0, v.opError("stage", net.ErrClosed)
	}
	v.m.sendMu.Lock()
	n, err := link.Stage(v.m.l, frames)
	v.m.sendMu.Unlock()
	v.sent(frames, n)
	return n, err
}

// Kick implements link.Stager by the shared link's (link.Kick).
func (v *view) Kick() error {
	if v.isClosed() {
		return v.opError("kick", net.ErrClosed)
	}
	return link.Kick(v.m.l)
}

// SendNow implements link.NowSender by the shared link's (link.SendNow).
func (v *view) SendNow(frames [][]byte) (int, error) {
	if v.isClosed() {
		return 0, v.opError("send", net.ErrClosed)
	}
	mu := &v.m.sendMu
	if _, ok := link.NowSenderOf(v.m.l); ok {
		mu = &v.m.nowMu
	}
	mu.Lock()
	n, err := link.SendNow(v.m.l, frames)
	mu.Unlock()
	v.sent(frames, n)
	return n, err
}

func (v *view) sent(frames [][]byte, n int) {
	if n <= 0 {
		return
	}
	var b uint64
	for _, f := range frames[:n] {
		b += uint64(len(f))
	}
	v.framesSent.Add(uint64(n))
	v.bytesSent.Add(b)
}

func (v *view) isClosed() bool {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.closed
}

// Stats implements link.Link: this view's frames and bytes; the kernel's
// counters and SendRetries of the shared link; KernelDrops adds the frames
// this view's queue had no room for, Filtered the frames of no view.
func (v *view) Stats() (link.Stats, error) {
	s, err := v.m.l.Stats()
	m := v.m
	m.mu.Lock()
	s.FramesReceived, s.BytesReceived = v.q.framesIn, v.q.bytesIn
	s.KernelDrops += v.dropped
	s.Filtered += m.noView
	m.mu.Unlock()
	s.FramesSent, s.BytesSent = v.framesSent.Load(), v.bytesSent.Load()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return s, err
}

func (v *view) groupStats() GroupStats {
	return GroupStats{FramesReceived: v.q.framesIn, BytesReceived: v.q.bytesIn, FramesSent: v.framesSent.Load(),
		BytesSent: v.bytesSent.Load(), Dropped: v.dropped, Queued: v.q.n}
}

// Close implements link.Link: it drops the group from the Mux (and from
// the kernel filter); a Recv waiting on the view returns net.ErrClosed.
// The shared link stays open.
func (v *view) Close() error {
	m := v.m
	m.mu.Lock()
	if v.closed {
		m.mu.Unlock()
		return nil
	}
	v.closed = true
	if i := slices.Index(m.views, v); i >= 0 {
		m.views = slices.Delete(m.views, i, i+1)
	}
	if !slices.Contains(m.gone, v.group) {
		m.gone = append(m.gone, v.group)
	}
	reading := m.reader == v
	v.signal()
	m.mu.Unlock()
	if reading && m.waker != nil {
		m.waker.Wake()
	}
	return m.setFilter()
}

func (v *view) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "rbcast", Addr: v.addr, Err: err}
}

// viewAddr names the view in errors.
type viewAddr string

func (a viewAddr) Network() string { return "rbcast" }
func (a viewAddr) String() string  { return string(a) }

// ErrViewReading is RecvAll's error while a view's Recv reads the
// shared link.
var ErrViewReading = errors.New("mux: a view's Recv is reading the shared link")

// RecvAll reads the shared link once for every open view, for a caller
// that takes every group's frames itself (one event loop for all of a
// process's groups: reliable.Loop): it returns, in place in frames, the
// frames of groups with an open view, uncopied (the shared link's own
// buffers, valid until the next RecvAll, as link.Link's Recv), and
// counts them in their views' Stats (FramesReceived, BytesReceived) as
// a view's Recv would; the others are dropped and counted as a view's
// Recv counts them (Stats.NoView and every view's Filtered, or Late).
// Nothing is queued, so it must not be mixed with the views' own Recv:
// it fails with ErrViewReading while one reads. It waits until frames
// arrive, deadline passes (os.ErrDeadlineExceeded) or Wake is called.
func (m *Mux) RecvAll(deadline time.Time, frames []link.Frame) (int, error) {
	m.mu.Lock()
	switch {
	case m.reader != nil:
		m.mu.Unlock()
		return 0, ErrViewReading
	case m.closed || m.err != nil:
		m.mu.Unlock()
		return 0, &net.OpError{Op: "recv", Net: "rbcast", Err: net.ErrClosed}
	}
	m.mu.Unlock()
	n, err := m.l.Recv(deadline, frames)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && errors.Is(err, net.ErrClosed) {
		m.err = net.ErrClosed
	}
	k := 0
	for i := range frames[:n] {
		f := &frames[i]
		v := m.viewOf(f)
		if v == nil {
			continue
		}
		v.q.framesIn++
		v.q.bytesIn += uint64(len(f.Data))
		frames[k] = *f
		k++
	}
	clear(frames[k:n])
	return k, err
}

// Wake ends a RecvAll's wait (os.ErrDeadlineExceeded), or has the next
// one return at once, where the shared link can be woken (link.Waker);
// otherwise it does nothing.
func (m *Mux) Wake() {
	if m.waker != nil {
		m.waker.Wake()
	}
}

// CanWake says whether Wake ends a RecvAll's wait (the shared link is a
// link.Waker).
func (m *Mux) CanWake() bool { return m.waker != nil }
