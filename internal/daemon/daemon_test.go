package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/reliable/seq"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testFailureTimeout is the failure timeout of test groups that do not
// measure failure detection. It is real time: on a loaded machine (the
// race detector, -cpu 1, other jobs) a daemon starved for over a second
// was removed as failed with a 1 s timeout, after which Flush completed
// without the only reader and subscribers missed messages. 5 s leaves
// room for such stalls.
const testFailureTimeout = 5 * time.Second

// crashFailureTimeout is the failure timeout of tests that crash a
// member and wait for its removal; they measure it, so it stays short.
const crashFailureTimeout = time.Second

// crashTimeout is an adjust for startGroup that sets crashFailureTimeout.
func crashTimeout(_ int, c *Config) { c.Group.FailureTimeout = crashFailureTimeout }

// running is one daemon of a test group.
type running struct {
	d      *Daemon
	socket string
	link   *rtnet.Link // set by startGroup
	cancel context.CancelFunc
	done   chan error
}

// startGroup starts n daemons on the simulated segment r, daemon 0 the
// registration server, and returns them once each serves its socket.
func startGroup(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, adjust func(i int, c *Config)) []*running {
	t.Helper()
	dir := t.TempDir()
	out := make([]*running, n)
	for i := range n {
		ep := testnet.EndpointConfig{}
		if i < len(imp) {
			ep.In = imp[i]
		}
		l := r.Attach(t, ep)
		cfg := Config{Logger: quiet, Group: reliable.Config{Group: 7, Size: n, Server: i == 0, FailureTimeout: testFailureTimeout}}
		if adjust != nil {
			adjust(i, &cfg)
		}
		out[i] = startDaemon(t, l, filepath.Join(dir, fmt.Sprintf("d%d.sock", i)), cfg)
		out[i].link = l
	}
	return out
}

func startDaemon(t testing.TB, l link.Link, socket string, cfg Config) *running {
	t.Helper()
	return startDaemonWith(t, l, socket, cfg, nil)
}

// startDaemonWith is startDaemon with prepare called on the daemon before
// it runs.
func startDaemonWith(t testing.TB, l link.Link, socket string, cfg Config, prepare func(d *Daemon)) *running {
	t.Helper()
	ln, err := Listen(socket, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &running{d: New(cfg), socket: socket, cancel: cancel, done: make(chan error, 1)}
	if prepare != nil {
		prepare(x.d)
	}
	go func() { x.done <- x.d.Run(ctx, l, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-x.done:
		case <-time.After(20 * time.Second):
			t.Errorf("daemon on %s did not stop", socket)
		}
	})
	return x
}

// self waits for the group to start at x and returns x's member id.
func (x *running) self(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st := x.d.Status(); st.Ready {
			return st.Self
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon on %s: the group did not start", x.socket)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (x *running) stop(t *testing.T) error {
	t.Helper()
	x.cancel()
	select {
	case err := <-x.done:
		x.done <- err // for Cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("daemon on %s did not stop", x.socket)
	}
	return nil
}

func dial(t testing.TB, socket string, waitReady bool) (*localapi.Conn, *localapi.Welcome) {
	var flags uint16
	if waitReady {
		flags = localapi.HelloWaitReady
	}
	return dialFlags(t, socket, flags)
}

func dialFlags(t testing.TB, socket string, flags uint16) (*localapi.Conn, *localapi.Welcome) {
	t.Helper()
	c, err := localapi.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	w, err := c.Hello(flags)
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// subscribe returns a connection delivering from's messages, one per
// packet.
func subscribe(t *testing.T, socket string, from uint16) *localapi.Conn {
	return subscribeFlags(t, socket, from, 0)
}

// subscribeFlags is subscribe with Hello flags (HelloBatch: several
// messages per packet).
func subscribeFlags(t *testing.T, socket string, from uint16, flags uint16) *localapi.Conn {
	t.Helper()
	c, _ := dialFlags(t, socket, flags)
	if err := c.Write(&localapi.Subscribe{From: from}); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, c, from)
	return c
}

// awaitSubscribed reads Subscribe's answer on c, which must be
// Subscribed (for from): the daemon hands the subscriber every message
// delivered after it, none delivered before (TestSubscribedMeansRegistered),
// so a test that counts messages sends only once it is subscribed.
func awaitSubscribed(t testing.TB, c *localapi.Conn, from uint16) {
	t.Helper()
	m, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := m.(*localapi.Subscribed); !ok || s.From != from {
		t.Fatalf("Subscribe answered with %#v", m)
	}
}

// collect reads Delivers from c until want bytes arrived.
func collect(c *localapi.Conn, want int) ([]byte, error) {
	var got []byte
	for len(got) < want {
		m, err := c.Read()
		if err != nil {
			return got, err
		}
		switch d := m.(type) {
		case *localapi.Deliver:
			got = append(got, d.Data...)
		case *localapi.DeliverBatch:
			for _, x := range d.Msgs {
				got = append(got, x.Data...)
			}
		}
	}
	return got, nil
}

// sendAll sends data in chunks of max and returns the Flushed answer.
func sendAll(t *testing.T, c *localapi.Conn, data []byte, max int) (*localapi.Flushed, error) {
	t.Helper()
	for off := 0; off < len(data); off += max {
		if err := c.Write(&localapi.Send{Data: data[off:min(off+max, len(data))]}); err != nil {
			return nil, err
		}
	}
	return flushOn(c)
}

// flushOn sends Flush on c and returns the daemon's Flushed answer.
func flushOn(c *localapi.Conn) (*localapi.Flushed, error) {
	if err := c.Write(&localapi.Flush{}); err != nil {
		return nil, err
	}
	m, err := c.Read()
	if err != nil {
		return nil, err
	}
	f, ok := m.(*localapi.Flushed)
	if !ok {
		return nil, fmt.Errorf("Flush answered with %#v", m)
	}
	return f, nil
}

// sendAllBatched is sendAll with up to 40 messages per SendBatch packet.
func sendAllBatched(t *testing.T, c *localapi.Conn, data []byte, max int) (*localapi.Flushed, error) {
	t.Helper()
	var b localapi.SendBatch
	for off := 0; off < len(data); off += max {
		b.Msgs = append(b.Msgs, data[off:min(off+max, len(data))])
		if len(b.Msgs) == 40 || off+max >= len(data) {
			if err := c.Write(&b); err != nil {
				return nil, err
			}
			b.Msgs = b.Msgs[:0]
		}
	}
	return flushOn(c)
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	rnd := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(rnd.Uint32())
	}
	return b
}

// Once a client has read Subscribed, its subscription is in the fan-out's
// list: a message it then has sent (bench -ping, another connection) is
// delivered to it. Registering after answering let the fan-out skip such
// a message now and then (TestBenchPingSelf in cmd/rbcastd timed out).
func TestSubscribedMeansRegistered(t *testing.T) {
	ds := startGroup(t, rtnet.New(t, 2), 1, nil, nil)
	for i := range 50 {
		subscribe(t, ds[0].socket, 0)
		if n := len(ds[0].d.subscribers()); n != i+1 {
			t.Fatalf("after Subscribed %d: %d subscribers registered, want %d", i+1, n, i+1)
		}
	}
}

// Three daemons under loss: readers subscribed before the group starts
// get exactly what a client of daemon 0 sent; Flush answers only once
// everything is acknowledged; status shows every member alive.
func TestSendRecvUnderLoss(t *testing.T) {
	r := rtnet.New(t, 1)
	imp := []testnet.Impairment{{}, {Loss: 0.05}, {Loss: 0.05, Burst: testnet.GilbertElliott{GoodToBad: 0.02, BadToGood: 0.3, LossBad: 1}}}
	ds := startGroup(t, r, 3, imp, nil)
	// Subscribed before the group starts: nothing may be missed.
	from0 := subscribe(t, ds[1].socket, 0)
	all := subscribeFlags(t, ds[2].socket, localapi.AllMembers, localapi.HelloBatch)

	c, w := dial(t, ds[0].socket, true)
	if !w.Ready || w.Self != 0 || w.Members != 3 || w.MaxMessage == 0 {
		t.Fatalf("Welcome %+v, want a ready member 0 of 3", w)
	}
	data := randomBytes(1, 300_000)
	f, err := sendAll(t, c, data, int(w.MaxMessage))
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64((len(data) + int(w.MaxMessage) - 1) / int(w.MaxMessage)); f.Accepted != want {
		t.Fatalf("Flushed.Accepted = %d, want %d", f.Accepted, want)
	}
	st := ds[0].d.Status()
	if st.InFlight != 0 || st.Accepted != f.Accepted {
		t.Fatalf("after Flushed: in flight %d, accepted %d; want 0, %d", st.InFlight, st.Accepted, f.Accepted)
	}
	for name, sub := range map[string]*localapi.Conn{"-from 0": from0, "-all": all} {
		got, err := collect(sub, len(data))
		if err != nil {
			t.Fatalf("%s: %v after %d bytes", name, err, len(got))
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes differ from the %d sent", name, len(got), len(data))
		}
	}
	for i, x := range ds {
		st := x.d.Status()
		if !st.Ready || len(st.Members) != 3 || i == 0 && st.Self != 0 {
			t.Fatalf("daemon %d status %+v", i, st)
		}
		for _, m := range st.Members {
			if m.State == StateDead {
				t.Fatalf("daemon %d sees member %d dead", i, m.ID)
			}
		}
	}
	if st := ds[1].d.Status(); st.Members[0].DeliveredBytes != uint64(len(data)) {
		t.Fatalf("daemon 1 counts %d bytes from member 0, want %d", st.Members[0].DeliveredBytes, len(data))
	}
}

// A reader that does not read holds the group back instead of losing
// messages: the sender's Flush waits, and once the reader reads it gets
// every byte.
func TestSlowReaderBackPressure(t *testing.T) {
	r := rtnet.New(t, 2)
	ds := startGroup(t, r, 2, nil, func(i int, c *Config) {
		c.Group.RecvQueue = 8
		c.SocketBuffer = 64 << 10
	})
	slow := subscribeFlags(t, ds[1].socket, 0, localapi.HelloBatch)
	c, w := dial(t, ds[0].socket, true)
	data := randomBytes(2, 1_000_000) // ~700 messages: far more than the queues and socket buffers between hold
	type result struct {
		f   *localapi.Flushed
		err error
	}
	flushed := make(chan result, 1)
	go func() {
		f, err := sendAllBatched(t, c, data, int(w.MaxMessage))
		flushed <- result{f, err}
	}()
	// While nobody reads, the sender cannot finish: its window fills.
	deadline := time.Now().Add(10 * time.Second)
	for ds[0].d.Status().InFlight == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case res := <-flushed:
		t.Fatalf("Flush answered (%+v, %v) while the only reader read nothing", res.f, res.err)
	case <-time.After(200 * time.Millisecond):
	}
	got, err := collect(slow, len(data))
	if err != nil {
		t.Fatalf("%v after %d bytes", err, len(got))
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the slow reader got %d bytes that differ from the %d sent", len(got), len(data))
	}
	if res := <-flushed; res.err != nil {
		t.Fatal(res.err)
	}
	if held := ds[1].d.Status().HeldData; held == 0 {
		t.Logf("no Data frame was held back at the reader (the group paused reading instead)")
	}
}

// SIGTERM's clean leave: messages accepted (but not flushed) when the
// daemon is told to stop still reach the other members, and their readers
// see the end of the stream.
func TestLeaveDeliversAccepted(t *testing.T) {
	for _, order := range []reliable.Order{reliable.FIFO, reliable.Total} {
		t.Run(order.String(), func(t *testing.T) { testLeaveDeliversAccepted(t, order) })
	}
}

func testLeaveDeliversAccepted(t *testing.T, order reliable.Order) {
	r := rtnet.New(t, 3)
	ds := startGroup(t, r, 3, []testnet.Impairment{{}, {Loss: 0.1}}, func(i int, c *Config) { c.Group.Order = order })
	subs := []*localapi.Conn{subscribe(t, ds[1].socket, 0), subscribe(t, ds[2].socket, 0)}
	c, w := dial(t, ds[0].socket, true)
	data := randomBytes(3, 100_000)
	max := int(w.MaxMessage)
	n := 0
	for off := 0; off < len(data); off += max {
		if err := c.Write(&localapi.Send{Data: data[off:min(off+max, len(data))]}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for ds[0].d.Status().Accepted < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	if err := ds[0].stop(t); err != nil {
		t.Fatalf("clean leave: %v", err)
	}
	for i, sub := range subs {
		got, err := collect(sub, len(data))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("reader at daemon %d: %d of %d bytes (equal: %v), err %v", i+1, len(got), len(data), bytes.Equal(got, data), err)
		}
	}
	// The departure shows as dead (left) once the others have it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := ds[1].d.Status()
		if st.Members[0].State == StateDead && st.Members[0].Reason == "left" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member 0 after its leave: %+v", st.Members[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its own readers' streams end with an Error saying why.
	m, err := c.Read()
	var e *localapi.Error
	if !errors.As(err, &e) && !errors.Is(err, localapi.ErrDaemonClosed) {
		t.Fatalf("the sender's connection after the leave: %v, %v", m, err)
	}
}

// A crashed member shows as dead (failed) within the failure timeout,
// and the others keep delivering.
func TestCrashShowsDead(t *testing.T) {
	ds := startGroup(t, rtnet.New(t, 4), 3, nil, crashTimeout)
	sub := subscribe(t, ds[1].socket, 0)
	c, w := dial(t, ds[0].socket, true)
	victim := ds[2].self(t)
	ds[1].self(t)
	ds[2].link.Crash()
	crashed := time.Now()
	deadline := crashed.Add(5 * time.Second)
	suspected := false
	for {
		st := ds[0].d.Status()
		suspected = suspected || member(st, victim).State == StateSuspected
		if m := member(st, victim); m.State == StateDead {
			if m.Reason != "failed" {
				t.Fatalf("member %d dead for %q, want failed", victim, m.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %d still %s 5s after it crashed", victim, member(st, victim).State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !suspected {
		t.Errorf("member %d went from alive to dead without being suspected (silent for half the failure timeout)", victim)
	}
	// Dead: when it was removed and how long it had been silent then, both
	// frozen (two reads give the same), no growing "last heard".
	a, b := member(ds[0].d.Status(), victim), member(ds[0].d.Status(), victim)
	if a.DiedAt == "" || a.LastHeardMs != 0 || a.SilentBeforeDeathMs < 500 || a != b {
		t.Errorf("dead member %d: died_at %q, last heard %v ms ago, silent %v ms before death (then %+v); want a time, 0, >= 500 (half the failure timeout) and the same twice", victim, a.DiedAt, a.LastHeardMs, a.SilentBeforeDeathMs, b)
	}
	t.Logf("member %d shown dead %v after the crash, failure timeout 1s", victim, time.Since(crashed))
	data := randomBytes(4, 50_000)
	if _, err := sendAll(t, c, data, int(w.MaxMessage)); err != nil {
		t.Fatal(err)
	}
	got, err := collect(sub, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the crash: %d of %d bytes, err %v\nsender %+v\nreader %+v", len(got), len(data), err, ds[0].d.Status(), ds[1].d.Status())
	}
}

// Local API errors a client can provoke, each with its text.
func TestClientErrors(t *testing.T) {
	r := rtnet.New(t, 5)
	ds := startGroup(t, r, 1, nil, nil)
	sock := ds[0].socket

	t.Run("version", func(t *testing.T) {
		c, err := localapi.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(&localapi.Hello{Version: 9})
		_, err = c.Read()
		var e *localapi.Error
		if !errors.As(err, &e) || e.Code != localapi.CodeVersion || !strings.Contains(e.Text, "local API versions 1 to 6; the client speaks version 9") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no hello", func(t *testing.T) {
		c, err := localapi.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(&localapi.Flush{})
		_, err = c.Read()
		var e *localapi.Error
		if !errors.As(err, &e) || e.Code != localapi.CodeUnexpected || !strings.Contains(e.Text, "first message must be Hello, not Flush") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		c, w := dial(t, sock, true)
		big := make([]byte, w.MaxMessage+1)
		c.Write(&localapi.Send{Data: big})
		_, err := c.Read()
		var e *localapi.Error
		want := fmt.Sprintf("message of %d bytes; the daemon accepts at most %d bytes per message", len(big), w.MaxMessage)
		if !errors.As(err, &e) || e.Code != localapi.CodeTooLarge || !strings.Contains(e.Text, want) {
			t.Fatalf("got %v, want %q", err, want)
		}
		// Larger than any frame: the packet is truncated on read.
		c.Write(&localapi.Send{Data: make([]byte, 100_000)})
		_, err = c.Read()
		if !errors.As(err, &e) || e.Code != localapi.CodeTooLarge || !strings.Contains(e.Text, "the daemon accepts at most") {
			t.Fatalf("got %v", err)
		}
		// A batch with one message too large is refused whole.
		c.Write(&localapi.SendBatch{Msgs: [][]byte{[]byte("fits"), big}})
		_, err = c.Read()
		if !errors.As(err, &e) || e.Code != localapi.CodeTooLarge || !strings.Contains(e.Text, "message 2 of the batch is") || !strings.Contains(e.Text, "none of the batch was sent") {
			t.Fatalf("got %v", err)
		}
		// The connection stays usable after a too-large message.
		f, err := sendAll(t, c, []byte("fits"), int(w.MaxMessage))
		if err != nil {
			t.Fatalf("after a refused message: %v", err)
		}
		if f.Accepted != 1 {
			t.Fatalf("accepted %d messages, want only the 1 after the refusals", f.Accepted)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		c, _ := dial(t, sock, false)
		c.Write(rawMessage{0x42})
		_, err := c.Read()
		var e *localapi.Error
		if !errors.As(err, &e) || e.Code != localapi.CodeBadMessage || !strings.Contains(e.Text, "unknown message type 0x42") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("daemon message", func(t *testing.T) {
		c, _ := dial(t, sock, false)
		c.Write(&localapi.Flushed{})
		_, err := c.Read()
		var e *localapi.Error
		if !errors.As(err, &e) || e.Code != localapi.CodeUnexpected || !strings.Contains(e.Text, "Flushed is a daemon message") {
			t.Fatalf("got %v", err)
		}
	})
}

// rawMessage writes arbitrary bytes as a message.
type rawMessage []byte

func (m rawMessage) Type() localapi.Type    { return localapi.Type(m[0]) }
func (m rawMessage) Append(b []byte) []byte { return append(b, m...) }

func TestListenErrors(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	first, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := first.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The message names no program: the command that prints it adds its
	// own name.
	if _, err := Listen(sock, 0o600); !errors.Is(err, ErrSocketInUse) || err.Error() != "socket "+sock+": in use by a running daemon (stop it, or pick another path with -socket)" {
		t.Fatalf("second Listen: %v", err)
	}
	first.SetUnlinkOnClose(false)
	first.Close()
	// A stale socket file is replaced.
	ln, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln.Close()

	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o600)
	if _, err := Listen(plain, 0); err == nil || err.Error() != "socket "+plain+": exists and is not a socket (----------); refusing to replace it" {
		t.Fatalf("over a regular file: %v", err)
	}
	if _, err := Listen(filepath.Join(dir, "no", "s.sock"), 0); err == nil || !strings.Contains(err.Error(), "directory does not exist") {
		t.Fatalf("in a missing directory: %v", err)
	}
}

// A joiner configured differently from the server is refused with the
// reason; a host speaking another protocol version is named.
func TestGroupMismatch(t *testing.T) {
	t.Run("config", func(t *testing.T) {
		r := rtnet.New(t, 6)
		ds := startGroup(t, r, 2, nil, func(i int, c *Config) {
			if i == 1 {
				c.Group.FailureTimeout = 3 * time.Second
			}
		})
		select {
		case err := <-ds[1].done:
			ds[1].done <- err
			if err == nil || !strings.Contains(err.Error(), "every member must use the same group settings") {
				t.Fatalf("joiner with another failure timeout: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the misconfigured joiner was not refused")
		}
	})
	t.Run("version", func(t *testing.T) {
		r := rtnet.New(t, 7)
		ds := startGroup(t, r, 2, nil, func(i int, c *Config) { c.Group.Server = false })
		// A host speaking another version on the segment.
		other := r.Attach(t, testnet.EndpointConfig{})
		b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte(other.HardwareAddr()), frame.EtherType)
		b, err := frame.Append(b, &frame.Header{Group: 7, Sender: 0, Incarnation: 1}, &frame.WelcomeBody{Nonce: 1, Assigned: 1, Members: 2})
		if err != nil {
			t.Fatal(err)
		}
		b[frame.EthernetHeaderLen] = frame.Version + 1
		deadline := time.Now().Add(10 * time.Second)
		for len(ds[0].d.Status().ForeignVersions) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the other-version host was not noticed")
			}
			other.Send([][]byte{b})
			time.Sleep(20 * time.Millisecond)
		}
		fv := ds[0].d.Status().ForeignVersions[0]
		if fv.Host != other.HardwareAddr().String() || fv.Version != frame.Version+1 {
			t.Fatalf("foreign version %+v", fv)
		}
		ds[0].stop(t)
		if st := ds[0].d.Status(); !strings.Contains(st.JoinErr, fmt.Sprintf("frames of rbcast protocol version %d from %s were dropped", frame.Version+1, fv.Host)) {
			t.Fatalf("join error %q does not name the version", st.JoinErr)
		}
	})
}

// Order Total through the daemon: every member's subscriber to all
// senders sees the same sequence, own messages included, and Flush
// answers once this member's messages are sequenced.
func TestTotalOrderSameSequence(t *testing.T) {
	r := rtnet.New(t, 8)
	const n, per = 3, 40
	ds := startGroup(t, r, n, []testnet.Impairment{{}, {Loss: 0.05}}, func(i int, c *Config) { c.Group.Order = reliable.Total })
	var subs []*localapi.Conn
	for _, x := range ds {
		subs = append(subs, subscribe(t, x.socket, localapi.AllMembers))
	}
	errs := make(chan error, n)
	for i, x := range ds {
		go func() {
			c, err := localapi.Dial(x.socket)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := c.Hello(localapi.HelloWaitReady); err != nil {
				errs <- err
				return
			}
			for k := range per {
				if err := c.Write(&localapi.Send{Data: fmt.Appendf(nil, "daemon %d message %d", i, k)}); err != nil {
					errs <- err
					return
				}
			}
			c.Write(&localapi.Flush{})
			m, err := c.Read()
			if f, ok := m.(*localapi.Flushed); err == nil && (!ok || f.Accepted != per) {
				err = fmt.Errorf("Flush answered %#v", m)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var first []string
	for i, sub := range subs {
		var got []string
		for len(got) < n*per {
			m, err := sub.Read()
			if err != nil {
				t.Fatalf("subscriber at daemon %d after %d messages: %v", i, len(got), err)
			}
			if d, ok := m.(*localapi.Deliver); ok {
				got = append(got, fmt.Sprintf("%d\t%s", d.From, d.Data))
			}
		}
		if i == 0 {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("daemon %d delivered another sequence than daemon 0", i)
		}
	}
	if st := ds[0].d.Status(); st.Order != "total" || st.Mode != "sequencer" || st.Sequencer == nil {
		t.Fatalf("status under Order Total: %+v", st)
	}
}

// Under Order Total, Flush (and so `rbcastd send`) answers only once every
// live member holds the messages — not when they are delivered back, which
// needs only ⌈n/2⌉ holders — and a crashed member stops counting once the
// sequencer removes it.
func TestTotalFlushWaitsForEveryLiveMember(t *testing.T) {
	// Daemon 2 is the member the majority does not wait for.
	imp := []testnet.Impairment{{}, {}, {Loss: 0.3}}
	ds := startGroup(t, rtnet.New(t, 9), 3, imp, func(i int, c *Config) { c.Group.Order = reliable.Total; crashTimeout(i, c) })
	groups := make([]*reliable.Group, 3)
	for i, x := range ds {
		x.self(t)
		g, err := x.d.started(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = g
	}
	if seqStats(groups[0]).Sequencer != groups[0].Self() {
		t.Fatalf("daemon 0 (member %d) is not the sequencer (%d)", groups[0].Self(), seqStats(groups[0]).Sequencer)
	}
	c, _ := dial(t, ds[1].socket, true)
	flush := func(round, n int) {
		t.Helper()
		for k := range n {
			if err := c.Write(&localapi.Send{Data: fmt.Appendf(nil, "round %d message %d", round, k)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := flushOn(c); err != nil {
			t.Fatal(err)
		}
	}

	// Only daemon 1 sends: right after Flushed its delivered cursor is one
	// past its last message, and every member must hold everything below.
	flush(1, 200)
	end := seqStats(groups[1]).Next
	if st := seqStats(groups[1]); st.NotHeldByAll != 0 || frame.SeqLess(st.AllHeld, end) {
		t.Fatalf("after Flushed: sender NotHeldByAll %d, AllHeld %d, delivered up to %d", st.NotHeldByAll, st.AllHeld, end)
	}
	for i, g := range groups {
		if got := seqStats(g).Received; frame.SeqLess(got, end) {
			t.Fatalf("after Flushed: daemon %d holds globals up to %d, the sender's last is %d", i, got, end-1)
		}
	}

	// Daemon 2 crashes: the sender's messages are delivered back at once
	// (members 0 and 1 are a majority), but Flush waits until the
	// sequencer removed member 2, which it decides once member 2 was
	// silent for FailureTimeout (1 s; it was last heard at most a
	// heartbeat, 100 ms, before the crash). The removal reaches the
	// status a little later, once its SeqMember entry is delivered, so
	// the status is checked with a bound, and the time Flush took is what
	// shows it waited.
	victim := groups[2].Self()
	crashed := time.Now()
	ds[2].link.Crash()
	flush(2, 50)
	if took := time.Since(crashed); took < 800*time.Millisecond {
		t.Fatalf("Flushed %v after member %d crashed: before the sequencer could remove it (FailureTimeout 1 s)", took, victim)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range []*running{ds[0], ds[1]} {
		for member(d.d.Status(), int(victim)).State != StateDead {
			if time.Now().After(deadline) {
				t.Fatalf("5 s after Flushed the crashed member %d is %s, want dead (removed)", victim, member(d.d.Status(), int(victim)).State)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Under Order Total the followers learn of a failure from the sequencer's
// removal, numbered in the global stream: a follower's status shows the
// crashed member dead too, with the time it was removed.
func TestCrashShowsDeadTotal(t *testing.T) {
	ds := startGroup(t, rtnet.New(t, 4), 3, nil, func(i int, c *Config) { c.Group.Order = reliable.Total; crashTimeout(i, c) })
	victim := ds[2].self(t)
	follower := ds[1].self(t)
	if st := ds[1].d.Status(); member(st, follower).Sequencer || member(st, victim).Sequencer {
		t.Fatalf("members 1 and 2 should be followers: %+v", st.Members)
	}
	ds[2].link.Crash()
	crashed := time.Now()
	for _, d := range []*running{ds[0], ds[1]} {
		for {
			m := member(d.d.Status(), victim)
			if m.State == StateDead {
				if m.Reason != "failed" || m.DiedAt == "" {
					t.Fatalf("member %d dead (%q, died at %q), want failed with a time", victim, m.Reason, m.DiedAt)
				}
				break
			}
			if time.Since(crashed) > 5*time.Second {
				t.Fatalf("member %d still %s 5s after it crashed", victim, m.State)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("member %d shown dead by both survivors %v after the crash, failure timeout 1s", victim, time.Since(crashed))
	for _, m := range ds[1].d.Status().Members {
		if m.ID != victim && m.State != StateAlive {
			t.Errorf("follower's status: member %d %s", m.ID, m.State)
		}
	}
}

// seqStats is the sequencer core's own counters of a total-order group.
func seqStats(g *reliable.Group) seq.Stats {
	d, _ := g.Stats().Protocol.Detail.(seq.Stats)
	return d
}

// member is member id's entry in st (a zero entry, State "", if st does
// not list it: a status taken before the group started lists no one).
func member(st Status, id int) MemberStatus {
	for _, m := range st.Members {
		if m.ID == id {
			return m
		}
	}
	return MemberStatus{ID: id}
}
