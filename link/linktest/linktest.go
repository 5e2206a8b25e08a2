// Package linktest is the conformance suite of link.Link: Run checks that a
// link, or a decorator over one, keeps the contract package link documents,
// its optional capabilities (Stager, NowSender, Waker) included. Every link
// and decorator of the project runs it: link/ring, link/afpacket, testnet's
// Endpoint, testnet/rtnet, capture.Link and the daemon's monitor.
//
// Links on virtual time (testnet) run the checks that do not need a waiting
// Recv; links on real time run them all, with short real deadlines (these
// are tests of the link, not of protocol timing). Staging adds Stage, Kick
// and SendNow to any link in software, so that a decorator's forwarding of
// them can be checked on virtual time too.
package linktest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// Pair is two links on one segment.
type Pair struct {
	// A and B see each other: a broadcast frame of EtherType
	// link.EtherTypeRbcast that one sends reaches the other, and no other
	// frame of that EtherType arrives. Run closes them.
	A, B link.Link
	// Settle, for links on virtual time (testnet), runs the segment until
	// every frame sent so far has arrived. Their Recv never waits (the
	// simulator, not Recv, advances time), so the checks of a waiting Recv
	// are skipped. Nil means real time.
	Settle func()
	// Sent, for a decorator A that observes the frames it sends (capture
	// records them, the daemon's monitor counts them), is how many frames
	// A has seen sent so far, through Send, Stage and SendNow. Run checks
	// that it grew by every frame A sent, after each check.
	Sent func() uint64
	// Group, for views of one rbcast group that receive only its frames
	// (link/mux), makes every test frame one of that group: at least
	// link.GroupOffset+4 bytes long (a header-only frame is that long),
	// with the group id there.
	Group *uint32
}

// Run checks the pairs newPair makes, a fresh one per check (each a
// subtest): capabilities reported alike through decorators, round trips,
// batches, order and counters, frame sizes, deadlines, Close, Wake, and
// Stage, Kick and SendNow where the links have them. Cleanups newPair
// registers run after Run has closed the pair.
func Run(t *testing.T, newPair func(t *testing.T) Pair) {
	for _, c := range []struct {
		name  string
		check func(c *checker)
	}{
		{"Capabilities", (*checker).capabilities},
		{"RoundTrip", (*checker).roundTrip},
		{"BatchOrderStats", (*checker).batch},
		{"FrameSize", (*checker).frameSize},
		{"Deadline", (*checker).deadline},
		{"Close", (*checker).close},
		{"Wake", (*checker).wake},
		{"WakeKeepsFrames", (*checker).wakeKeepsFrames},
		{"StageKick", (*checker).stageKick},
		{"SendNow", (*checker).sendNow},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t)
			ch := &checker{t: t, p: p, rx: make([]link.Frame, 7)}
			t.Cleanup(func() {
				if err := p.A.Close(); err != nil {
					t.Errorf("closing A: %v", err)
				}
				if !ch.closedB {
					if err := p.B.Close(); err != nil {
						t.Errorf("closing B: %v", err)
					}
				}
			})
			if p.Sent != nil {
				ch.sentBefore = p.Sent()
			}
			c.check(ch)
			if p.Sent != nil && !t.Failed() {
				if got := p.Sent() - ch.sentBefore; got != ch.sentA {
					t.Errorf("A observed %d frames sent, the link sent %d (through Send, Stage and SendNow)", got, ch.sentA)
				}
			}
		})
	}
}

// Times of real links: how long a frame sent may take to arrive, how long
// to wait to see that nothing more arrives, and a short deadline.
const (
	arrival  = 5 * time.Second
	quiet    = 50 * time.Millisecond
	shortDue = 30 * time.Millisecond
)

type checker struct {
	t          *testing.T
	p          Pair
	rx         []link.Frame // short, so Recv returns batches in parts
	seq        uint64       // next test frame's number
	sentA      uint64       // frames A reported sent, for Pair.Sent
	sentBefore uint64
	closedB    bool // by the Close check
}

func (c *checker) virtual() bool { return c.p.Settle != nil }

// frame returns test frame c.seq of size bytes (at least the Ethernet
// header) from l: broadcast, EtherType link.EtherTypeRbcast, then, room
// permitting, the frame's number and bytes that depend on it.
func (c *checker) frame(l link.Link, size int) []byte {
	seq := c.seq
	c.seq++
	if c.p.Group != nil {
		size = max(size, link.GroupOffset+4)
	}
	b := make([]byte, size)
	copy(b, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:], l.HardwareAddr())
	binary.BigEndian.PutUint16(b[12:], link.EtherTypeRbcast)
	if size >= 22 {
		binary.BigEndian.PutUint64(b[14:], seq)
		for i := 22; i < size; i++ {
			b[i] = byte(seq*7 + uint64(i))
		}
	}
	if c.p.Group != nil {
		binary.BigEndian.PutUint32(b[link.GroupOffset:], *c.p.Group)
	}
	return b
}

// frames returns count test frames from l, of sizes spread over what the
// link carries.
func (c *checker) frames(l link.Link, count int) [][]byte {
	out := make([][]byte, count)
	span := link.EthernetHeaderLen + l.MTU() - 22 + 1
	for i := range out {
		out[i] = c.frame(l, 22+int(c.seq*7919%uint64(span)))
	}
	return out
}

// small returns count test frames of 64..127 bytes.
func (c *checker) small(l link.Link, count int) [][]byte {
	out := make([][]byte, count)
	for i := range out {
		out[i] = c.frame(l, 64+int(c.seq%64))
	}
	return out
}

// send sends frames from l with Send and fails the test unless all went.
func (c *checker) send(l link.Link, frames [][]byte) {
	c.t.Helper()
	n, err := l.Send(frames)
	c.count(l, n)
	if n != len(frames) || err != nil {
		c.t.Fatalf("Send of %d frames = %d, %v; want %d, nil", len(frames), n, err, len(frames))
	}
}

// count adds frames l sent to A's tally.
func (c *checker) count(l link.Link, n int) {
	if l == c.p.A && n > 0 {
		c.sentA += uint64(n)
	}
}

// recv returns copies of the frames l receives, up to want of them: on
// virtual time those that arrived once the segment settled, on real time
// those that arrived within the arrival time. It fails the test on an
// error other than a deadline.
func (c *checker) recv(l link.Link, want int) [][]byte {
	c.t.Helper()
	if c.virtual() {
		c.p.Settle()
	}
	var got [][]byte
	due := time.Now().Add(arrival)
	for len(got) < want {
		n, err := l.Recv(due, c.rx)
		for _, f := range c.rx[:n] {
			if f.Time.IsZero() {
				c.t.Errorf("frame %d received has no Time", len(got))
			}
			if f.Outgoing {
				c.t.Errorf("frame %d received is marked Outgoing", len(got))
			}
			got = append(got, bytes.Clone(f.Data))
		}
		if n > 0 {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatalf("Recv after %d of %d frames: %d, %v", len(got), want, n, err)
		}
		if c.virtual() || !time.Now().Before(due) {
			break
		}
		// An early return (after a Wake it did not see) is allowed.
	}
	return got
}

// nothingMore checks that l receives no frame (within the quiet time).
func (c *checker) nothingMore(l link.Link, what string) {
	c.t.Helper()
	if c.virtual() {
		c.p.Settle()
	}
	due := time.Now().Add(quiet)
	if c.virtual() {
		due = time.Time{}
	}
	n, err := l.Recv(due, c.rx)
	if n > 0 {
		c.t.Errorf("%s: %d frames arrived, want none (the first is %d bytes)", what, n, len(c.rx[0].Data))
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Errorf("%s: Recv = %v, want a deadline error", what, err)
	}
}

// same fails unless got holds exactly the frames of want, in order.
func (c *checker) same(what string, got, want [][]byte) {
	c.t.Helper()
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i], want[i]) {
			c.t.Fatalf("%s: frame %d of %d differs: %s", what, i, len(want), diff(got[i], want[i]))
		}
	}
	if len(got) != len(want) {
		c.t.Fatalf("%s: %d frames arrived, %d were sent", what, len(got), len(want))
	}
}

// diff says how a received frame differs from the one sent.
func diff(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d is %#x, sent %#x (%d bytes received, %d sent)", i, got[i], want[i], len(got), len(want))
		}
	}
	return fmt.Sprintf("%d bytes received, %d sent", len(got), len(want))
}

func (c *checker) stats(l link.Link) link.Stats {
	c.t.Helper()
	st, err := l.Stats()
	if err != nil {
		c.t.Fatalf("Stats: %v", err)
	}
	return st
}

func bytesOf(frames [][]byte) (n uint64) {
	for _, f := range frames {
		n += uint64(len(f))
	}
	return n
}

// caps names the capabilities the runtime finds on l.
func caps(l link.Link) string {
	_, s := link.StagerOf(l)
	_, n := link.NowSenderOf(l)
	_, w := link.WakerOf(l)
	return fmt.Sprintf("Stager %v, NowSender %v, Waker %v", s, n, w)
}

// capabilities: a decorator reports the capabilities of the link it wraps,
// at every level.
func (c *checker) capabilities() {
	for _, side := range []struct {
		name string
		l    link.Link
	}{{"A", c.p.A}, {"B", c.p.B}} {
		c.t.Logf("%s (%T): %s", side.name, side.l, caps(side.l))
		for l := side.l; ; {
			w, ok := l.(link.Wrapper)
			if !ok {
				break
			}
			inner := w.Unwrap()
			if inner == nil {
				c.t.Errorf("%s: %T unwraps to nil", side.name, l)
				break
			}
			if got, want := caps(l), caps(inner); got != want {
				c.t.Errorf("%s: %T reports %s; the %T it wraps reports %s", side.name, l, got, inner, want)
			}
			l = inner
		}
	}
}

// roundTrip: single frames from the header alone to the largest the MTU
// allows arrive byte for byte, both ways.
func (c *checker) roundTrip() {
	a, b := c.p.A, c.p.B
	if a.MTU() < link.MinMTU || a.MTU() != b.MTU() {
		c.t.Fatalf("MTU of A %d, of B %d: want equal and at least %d", a.MTU(), b.MTU(), link.MinMTU)
	}
	if len(a.HardwareAddr()) != 6 {
		c.t.Fatalf("A's HardwareAddr is %v, want 6 bytes", a.HardwareAddr())
	}
	for _, size := range []int{link.EthernetHeaderLen, 60, 61, link.EthernetHeaderLen + a.MTU()/2, link.EthernetHeaderLen + a.MTU()} {
		f := [][]byte{c.frame(a, size)}
		c.send(a, f)
		c.same(fmt.Sprintf("A to B, %d bytes", size), c.recv(b, 1), f)
	}
	f := [][]byte{c.frame(b, link.EthernetHeaderLen+b.MTU())}
	c.send(b, f)
	c.same("B to A", c.recv(a, 1), f)
}

// batch: batches arrive whole and in order, Recv hands them out in parts
// when its slice is short, and the counters grow by what was sent and
// received.
func (c *checker) batch() {
	a, b := c.p.A, c.p.B
	a0, b0 := c.stats(a), c.stats(b)
	var sent [][]byte
	for range 3 {
		f := c.frames(a, 40)
		c.send(a, f)
		sent = append(sent, f...)
	}
	if n, err := a.Send(nil); n != 0 || err != nil {
		c.t.Errorf("Send of no frames = %d, %v; want 0, nil", n, err)
	}
	c.same("three batches of 40", c.recv(b, len(sent)), sent)
	c.nothingMore(b, "after the batches")
	a1, b1 := c.stats(a), c.stats(b)
	if d := a1.FramesSent - a0.FramesSent; d != uint64(len(sent)) {
		c.t.Errorf("A's Stats.FramesSent grew by %d, %d frames were sent", d, len(sent))
	}
	if d := a1.BytesSent - a0.BytesSent; d != bytesOf(sent) {
		c.t.Errorf("A's Stats.BytesSent grew by %d, %d bytes were sent", d, bytesOf(sent))
	}
	if d := b1.FramesReceived - b0.FramesReceived; d != uint64(len(sent)) {
		c.t.Errorf("B's Stats.FramesReceived grew by %d, %d frames were received", d, len(sent))
	}
	if d := b1.BytesReceived - b0.BytesReceived; d != bytesOf(sent) {
		c.t.Errorf("B's Stats.BytesReceived grew by %d, %d bytes were received", d, bytesOf(sent))
	}
	if b1.KernelPackets < b0.KernelPackets || b1.KernelDrops < b0.KernelDrops || b1.Filtered < b0.Filtered {
		c.t.Errorf("B's counters went back: %+v, then %+v", b0, b1)
	}
}

// sender is one of the ways to send a batch from A.
type sender struct {
	name string
	send func(frames [][]byte) (int, error) // and have them transmitted
}

// senders are the ways A can send: Send, and Stage with Kick and SendNow
// where the runtime would find them.
func (c *checker) senders() []sender {
	out := []sender{{"Send", c.p.A.Send}}
	if s, ok := link.StagerOf(c.p.A); ok {
		out = append(out, sender{"Stage", func(f [][]byte) (int, error) {
			n, err := s.Stage(f)
			if kerr := s.Kick(); kerr != nil {
				c.t.Fatalf("Kick after Stage: %v", kerr)
			}
			return n, err
		}})
	}
	if s, ok := link.NowSenderOf(c.p.A); ok {
		out = append(out, sender{"SendNow", s.SendNow})
	}
	return out
}

// frameSize: a frame longer than the MTU allows is refused with
// ErrFrameTooLarge, one shorter than an Ethernet header with an error;
// exactly the frames the call reports sent arrive, and the link keeps
// working. For every way A can send.
func (c *checker) frameSize() {
	a, b := c.p.A, c.p.B
	limit := link.EthernetHeaderLen + a.MTU()
	for _, s := range c.senders() {
		for _, bad := range []struct {
			name string
			size int
			is   error
		}{{"too large", limit + 1, link.ErrFrameTooLarge}, {"shorter than a header", link.EthernetHeaderLen - 1, nil}} {
			what := fmt.Sprintf("%s with a frame %s", s.name, bad.name)
			f := [][]byte{c.frame(a, 100), c.frame(a, limit), make([]byte, bad.size), c.frame(a, 100)}
			copy(f[2], f[0][:min(bad.size, 14)])
			n, err := s.send(f)
			c.count(a, n)
			switch {
			case err == nil:
				c.t.Errorf("%s: sent %d, no error", what, n)
			case bad.is != nil && !errors.Is(err, bad.is):
				c.t.Errorf("%s: error %q does not match %q", what, err, bad.is)
			case n < 0 || n > 2:
				c.t.Errorf("%s: n = %d, want the frames before it (0..2)", what, n)
			}
			n = min(max(n, 0), 2)
			c.same(what, c.recv(b, n), f[:n])
			c.nothingMore(b, what)
			ok := [][]byte{c.frame(a, 60)}
			if n, err := s.send(ok); n != 1 || err != nil {
				c.t.Fatalf("%s, then a good frame: %d, %v", what, n, err)
			}
			c.count(a, 1)
			c.same(what+", then a good frame", c.recv(b, 1), ok)
		}
	}
}

// deadline: Recv with nothing to receive returns a deadline error, at
// once for a deadline past, not before it for one ahead.
func (c *checker) deadline() {
	b := c.p.B
	if c.virtual() {
		c.p.Settle()
	}
	for _, due := range []time.Time{time.Now().Add(-time.Second), time.Unix(1, 0)} {
		start := time.Now()
		n, err := b.Recv(due, c.rx)
		if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatalf("Recv with a deadline past = %d, %v; want 0 and an error matching os.ErrDeadlineExceeded", n, err)
		}
		if d := time.Since(start); !c.virtual() && d > time.Second {
			c.t.Errorf("Recv with a deadline past took %v", d)
		}
	}
	if c.virtual() {
		c.t.Log("virtual time: Recv does not wait for a deadline ahead")
	} else {
		due := time.Now().Add(shortDue)
		n, err := b.Recv(due, c.rx)
		if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatalf("Recv with a deadline %v ahead = %d, %v; want 0 and a deadline error", shortDue, n, err)
		}
		if now := time.Now(); now.Before(due) {
			c.t.Errorf("Recv returned %v before its deadline", due.Sub(now))
		}
	}
	// The link receives after a deadline.
	f := [][]byte{c.frame(c.p.A, 100)}
	c.send(c.p.A, f)
	c.same("a frame after a deadline", c.recv(b, 1), f)
}

// close: Close ends a waiting Recv with net.ErrClosed; afterwards Recv,
// Send, Stage, Kick and SendNow report net.ErrClosed, Wake does nothing,
// and Stats keeps the counters.
func (c *checker) close() {
	b := c.p.B
	f := [][]byte{c.frame(c.p.A, 100)}
	c.send(c.p.A, f)
	c.same("a frame before Close", c.recv(b, 1), f)
	before := c.stats(b)
	c.closedB = true
	if c.virtual() {
		if err := b.Close(); err != nil {
			c.t.Fatalf("Close: %v", err)
		}
		if n, err := b.Recv(time.Time{}, c.rx); n != 0 || !errors.Is(err, net.ErrClosed) {
			c.t.Errorf("Recv after Close = %d, %v; want net.ErrClosed", n, err)
		}
	} else {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		rx := make([]link.Frame, 4)
		go func() {
			n, err := b.Recv(time.Time{}, rx)
			done <- result{n, err}
		}()
		time.Sleep(quiet) // most likely waiting by now; if not, it starts closed
		if err := b.Close(); err != nil {
			c.t.Fatalf("Close: %v", err)
		}
		select {
		case r := <-done:
			if r.n != 0 || !errors.Is(r.err, net.ErrClosed) {
				c.t.Errorf("the Recv waiting at Close returned %d, %v; want net.ErrClosed", r.n, r.err)
			}
		case <-time.After(arrival):
			c.t.Fatalf("the Recv waiting at Close still waits %v later", arrival)
		}
	}
	g := [][]byte{c.frame(b, 100)}
	if n, err := b.Send(g); n != 0 || !errors.Is(err, net.ErrClosed) {
		c.t.Errorf("Send after Close = %d, %v; want net.ErrClosed", n, err)
	}
	if s, ok := link.StagerOf(b); ok {
		if n, err := s.Stage(g); n != 0 || !errors.Is(err, net.ErrClosed) {
			c.t.Errorf("Stage after Close = %d, %v; want net.ErrClosed", n, err)
		}
		if err := s.Kick(); !errors.Is(err, net.ErrClosed) {
			c.t.Errorf("Kick after Close = %v; want net.ErrClosed", err)
		}
	}
	if s, ok := link.NowSenderOf(b); ok {
		if n, err := s.SendNow(g); n != 0 || !errors.Is(err, net.ErrClosed) {
			c.t.Errorf("SendNow after Close = %d, %v; want net.ErrClosed", n, err)
		}
	}
	if w, ok := link.WakerOf(b); ok {
		w.Wake()
	}
	after, err := b.Stats()
	if err != nil {
		c.t.Errorf("Stats after Close: %v", err)
	}
	if after.FramesReceived < before.FramesReceived || after.BytesReceived < before.BytesReceived {
		c.t.Errorf("Stats after Close lost counters: %+v, before %+v", after, before)
	}
}

// wake: a Wake ends the Recv waiting now, and one made before a Recv ends
// that Recv, with a deadline error long before the deadline.
func (c *checker) wake() {
	w, ok := link.WakerOf(c.p.B)
	if !ok {
		c.t.Skipf("B (%T) cannot be woken", c.p.B)
	}
	if c.virtual() {
		c.t.Skip("virtual time: Recv does not wait")
	}
	long := 10 * arrival
	// Before the Recv.
	w.Wake()
	start := time.Now()
	if n, err := c.p.B.Recv(start.Add(long), c.rx); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("Recv after a Wake = %d, %v; want 0 and a deadline error", n, err)
	}
	if d := time.Since(start); d > arrival {
		c.t.Errorf("Recv after a Wake returned after %v", d)
	}
	// A Recv may return early once more for a Wake it did not see: wait
	// until one lasts until its deadline.
	for i := 0; ; i++ {
		due := time.Now().Add(shortDue)
		if n, err := c.p.B.Recv(due, c.rx); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatalf("Recv = %d, %v; want 0 and a deadline error", n, err)
		}
		if !time.Now().Before(due) {
			break
		}
		if i == 2 {
			c.t.Fatalf("three Recvs in a row returned before their deadline after one Wake")
		}
	}
	// During the Recv.
	done := make(chan error, 1)
	go func() {
		_, err := c.p.B.Recv(time.Now().Add(long), c.rx)
		done <- err
	}()
	time.Sleep(quiet)
	select {
	case err := <-done:
		c.t.Fatalf("Recv returned before the Wake, after no Wake it had not seen: %v", err)
	default:
	}
	woken := time.Now()
	w.Wake()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatalf("the Recv woken returned %v, want a deadline error", err)
		}
		c.t.Logf("the Recv waiting returned %v after Wake", time.Since(woken))
	case <-time.After(arrival):
		c.t.Fatalf("the Recv woken still waits %v after Wake", arrival)
	}
}

// wakeKeepsFrames: frames are never lost to Wakes. A sends a stream while
// another goroutine keeps waking B and B receives: every frame arrives, in
// order and intact, or is counted dropped by B's kernel (a receiver slower
// than the sender can overflow its queue; the sender keeps at most a
// window of frames ahead of the receiver to make that rare).
func (c *checker) wakeKeepsFrames() {
	w, ok := link.WakerOf(c.p.B)
	if !ok {
		c.t.Skipf("B (%T) cannot be woken", c.p.B)
	}
	if c.virtual() {
		c.t.Skip("virtual time: Recv does not wait")
	}
	const count, batch, window = 3000, 10, 100
	a, b := c.p.A, c.p.B
	b0 := c.stats(b)
	frames := make([][]byte, 0, count)
	for range count / batch {
		frames = append(frames, c.small(a, batch)...)
	}
	first := binary.BigEndian.Uint64(frames[0][14:])
	var received atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.Wake()
			runtime.Gosched()
		}
	})
	var sendErr error
	var sent atomic.Int64
	wg.Go(func() {
		for i := 0; i < count; i += batch {
			for wait := time.Now().Add(quiet); int64(i)-received.Load() > window && time.Now().Before(wait); {
				time.Sleep(50 * time.Microsecond)
			}
			n, err := a.Send(frames[i : i+batch])
			sent.Add(int64(n))
			if err != nil {
				sendErr = err
				return
			}
		}
	})
	early := 0
	next := first
	var recvErr error
	lastFrame, due := time.Now(), time.Now().Add(10*arrival)
	for next < first+count && time.Since(lastFrame) < arrival && time.Now().Before(due) {
		n, err := b.Recv(time.Now().Add(quiet), c.rx)
		if n == 0 {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				recvErr = err
				break
			}
			early++
			continue
		}
		lastFrame = time.Now()
		for _, f := range c.rx[:n] {
			seq := binary.BigEndian.Uint64(f.Data[14:])
			if seq < next || seq >= first+count {
				recvErr = fmt.Errorf("frame %d arrived after frame %d", seq-first, next-1-first)
				break
			}
			if want := frames[seq-first]; !bytes.Equal(f.Data, want) {
				recvErr = fmt.Errorf("frame %d differs: %s", seq-first, diff(f.Data, want))
				break
			}
			next = seq + 1
			received.Add(1)
		}
		if recvErr != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	c.count(a, int(sent.Load()))
	if sendErr != nil || recvErr != nil {
		c.t.Fatalf("send: %v; receive: %v", sendErr, recvErr)
	}
	drops := c.stats(b).KernelDrops - b0.KernelDrops
	got := uint64(received.Load())
	c.t.Logf("%d frames received, %d dropped by B's kernel, %d Recvs ended without a frame", got, drops, early)
	if got+drops != count {
		c.t.Errorf("%d of %d frames received and %d counted dropped: %d lost", got, count, drops, count-got-drops)
	}
}

// stageKick: frames staged arrive once kicked, in order, after the frames
// staged before them and before those sent after them; Kick with nothing
// staged does nothing. On real time one goroutine stages while another
// kicks, as reliable's kicker does.
func (c *checker) stageKick() {
	s, ok := link.StagerOf(c.p.A)
	if !ok {
		c.t.Skipf("A (%T) cannot stage", c.p.A)
	}
	a, b := c.p.A, c.p.B
	a0 := c.stats(a)
	if err := s.Kick(); err != nil {
		c.t.Fatalf("Kick with nothing staged: %v", err)
	}
	stage := func(f [][]byte) {
		c.t.Helper()
		n, err := s.Stage(f)
		c.count(a, n)
		if n != len(f) || err != nil {
			c.t.Fatalf("Stage of %d frames = %d, %v", len(f), n, err)
		}
	}
	staged, then := c.frames(a, 20), c.frames(a, 5)
	stage(staged)
	c.send(a, then)
	if err := s.Kick(); err != nil {
		c.t.Fatalf("Kick: %v", err)
	}
	c.same("staged, then sent", c.recv(b, 25), append(staged, then...))

	var all [][]byte
	if c.virtual() {
		for range 3 {
			f := c.frames(a, 20)
			stage(f)
			all = append(all, f...)
		}
		if err := s.Kick(); err != nil {
			c.t.Fatalf("Kick: %v", err)
		}
	} else {
		kick := make(chan struct{}, 1)
		kerr := make(chan error, 1)
		go func() {
			var err error
			for range kick {
				if err == nil {
					err = s.Kick()
				}
			}
			kerr <- err
		}()
		for range 40 {
			f := c.frames(a, 16)
			stage(f)
			all = append(all, f...)
			select {
			case kick <- struct{}{}:
			default:
			}
		}
		close(kick)
		if err := <-kerr; err != nil {
			c.t.Fatalf("Kick on another goroutine: %v", err)
		}
		if err := s.Kick(); err != nil {
			c.t.Fatalf("last Kick: %v", err)
		}
	}
	c.same("staged in batches", c.recv(b, len(all)), all)
	c.nothingMore(b, "after the staged batches")
	want := uint64(len(staged) + len(then) + len(all))
	if d := c.stats(a).FramesSent - a0.FramesSent; d != want {
		c.t.Errorf("A's Stats.FramesSent grew by %d, %d frames were staged and sent", d, want)
	}
}

// sendNow: frames sent with SendNow arrive in order; with frames staged
// and not kicked, those arrive too once kicked, each set in its order.
func (c *checker) sendNow() {
	s, ok := link.NowSenderOf(c.p.A)
	if !ok {
		c.t.Skipf("A (%T) cannot send past its queue", c.p.A)
	}
	a, b := c.p.A, c.p.B
	a0 := c.stats(a)
	now := c.frames(a, 30)
	n, err := s.SendNow(now)
	c.count(a, n)
	if n != len(now) || err != nil {
		c.t.Fatalf("SendNow of %d frames = %d, %v", len(now), n, err)
	}
	c.same("SendNow", c.recv(b, len(now)), now)
	sent := len(now)
	if st, ok := link.StagerOf(a); ok {
		staged, past := c.frames(a, 20), c.frames(a, 5)
		n, err := st.Stage(staged)
		c.count(a, n)
		if n != len(staged) || err != nil {
			c.t.Fatalf("Stage of %d frames = %d, %v", len(staged), n, err)
		}
		n, err = s.SendNow(past)
		c.count(a, n)
		if n != len(past) || err != nil {
			c.t.Fatalf("SendNow past %d staged frames = %d, %v", len(staged), n, err)
		}
		if err := st.Kick(); err != nil {
			c.t.Fatalf("Kick: %v", err)
		}
		got := c.recv(b, len(staged)+len(past))
		var gotStaged, gotPast [][]byte
		for _, f := range got {
			if len(f) >= 22 && binary.BigEndian.Uint64(f[14:]) >= binary.BigEndian.Uint64(past[0][14:]) {
				gotPast = append(gotPast, f)
			} else {
				gotStaged = append(gotStaged, f)
			}
		}
		c.same("staged, with SendNow meanwhile", gotStaged, staged)
		c.same("SendNow past staged frames", gotPast, past)
		sent += len(staged) + len(past)
	}
	c.nothingMore(b, "after SendNow")
	if d := c.stats(a).FramesSent - a0.FramesSent; d != uint64(sent) {
		c.t.Errorf("A's Stats.FramesSent grew by %d, %d frames were sent", d, sent)
	}
}
