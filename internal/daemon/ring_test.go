package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
)

// memGroup starts n daemons on an in-memory segment.
func memGroup(t testing.TB, n int, order reliable.Order) []*running {
	t.Helper()
	seg := newMemSeg(n)
	dir := t.TempDir()
	var ds []*running
	for i, l := range seg.links {
		cfg := Config{Logger: quiet, Group: reliable.Config{Group: 9, Size: n, Server: i == 0, Order: order, FailureTimeout: testFailureTimeout}}
		ds = append(ds, startDaemon(t, l, dir+"/"+string(rune('a'+i))+".sock", cfg))
	}
	t.Cleanup(func() {
		for _, l := range seg.links {
			l.Close()
		}
	})
	return ds
}

// ringSubscriber is a client of the daemon at socket that reads a deliver
// ring of MinRing bytes, subscribed to member 0 (Subscribed read): the
// connection and its ring.
func ringSubscriber(t testing.TB, socket string) (*localapi.Conn, *localapi.RingReceiver) {
	t.Helper()
	sub, _ := dialFlags(t, socket, localapi.HelloBatch)
	rr, err := sub.DeliverRing(localapi.MinRing)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Write(&localapi.Subscribe{From: 0}); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, sub, 0)
	return sub, rr
}

// ringSender is a client of the daemon at socket, once its group is
// ready, that sends through a send ring of MinRing bytes: the
// connection, its ring and the daemon's Welcome.
func ringSender(t testing.TB, socket string) (*localapi.Conn, *localapi.RingSender, *localapi.Welcome) {
	t.Helper()
	c, w := dial(t, socket, true)
	sr, err := c.SendRing(localapi.MinRing)
	if err != nil {
		t.Fatal(err)
	}
	return c, sr, w
}

// A file's worth of messages through a send ring at one daemon and a
// deliver ring at the other arrives whole, in order; the Flush after
// them counts them all; two rings of 64 KiB wrap and fill many times.
func TestRings(t *testing.T) {
	ds := memGroup(t, 2, reliable.FIFO)
	sub, rr := ringSubscriber(t, ds[1].socket) // before the stream: it counts every byte
	if sub.Version() != localapi.Version {
		t.Fatalf("Hello agreed on version %d", sub.Version())
	}
	c, sr, w := ringSender(t, ds[0].socket)
	data := randomBytes(7, 3_000_000)
	max := int(w.MaxMessage)
	sent := make(chan error, 1)
	go func() {
		msgs := 0
		for off := 0; off < len(data); {
			slots, err := sr.Reserve(max, 8)
			if err != nil {
				sent <- err
				return
			}
			for _, s := range slots {
				k := copy(s, data[off:])
				sr.Commit(k)
				off += k
				msgs++
				if off == len(data) {
					break
				}
			}
			if err := sr.Publish(); err != nil {
				sent <- err
				return
			}
		}
		f, err := flushOn(c)
		if err == nil && f.Accepted != uint64(msgs) {
			err = errors.New("Flushed does not count every message")
		}
		sent <- err
	}()
	var got []byte
	for len(got) < len(data) {
		from, d, ok, err := rr.Next(true)
		if err != nil || !ok {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		if from != 0 {
			t.Fatalf("a message from %d", from)
		}
		got = append(got, d...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("%d bytes through the rings differ from the %d sent", len(got), len(data))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// A client that corrupts its send ring is told what was wrong and
// disconnected; the daemon goes on.
func TestRingCorruptByClient(t *testing.T) {
	ds := memGroup(t, 1, reliable.FIFO)
	c, _ := dial(t, ds[0].socket, true)
	if _, err := c.SendRing(localapi.MinRing); err != nil {
		t.Fatal(err)
	}
	// Publish a head far beyond the ring, then ring.
	mem := ringMemOf(t, c)
	*(*uint64)(unsafe.Pointer(&mem[64])) = 1 << 40
	c.Write(&localapi.Doorbell{Ring: localapi.RingSend})
	_, err := c.Read()
	var e *localapi.Error
	if !errors.As(err, &e) || e.Code != localapi.CodeBadMessage || !strings.Contains(e.Text, "send ring corrupt at position") {
		t.Fatalf("got %v, want an Error saying the send ring is corrupt", err)
	}
	// The daemon still serves others.
	c2, _ := dial(t, ds[0].socket, true)
	if f, err := sendAll(t, c2, []byte("after"), 100); err != nil || f.Accepted != 1 {
		t.Fatalf("another client after the corrupt one: %+v, %v", f, err)
	}
}

// ringMemOf is the mapping of the connection's one ring.
func ringMemOf(t *testing.T, c *localapi.Conn) []byte {
	t.Helper()
	mems := localapi.RingMemories(c)
	if len(mems) != 1 {
		t.Fatalf("%d rings", len(mems))
	}
	return mems[0]
}

// RingSetup is refused, with its reason, for a version 1 connection, a
// size that is not a power of two, and after Subscribe.
func TestRingSetupErrors(t *testing.T) {
	ds := memGroup(t, 1, reliable.FIFO)
	for _, tc := range []struct {
		name   string
		before []localapi.Message
		setup  localapi.RingSetup
		want   string
	}{
		{"size", nil, localapi.RingSetup{Ring: localapi.RingSend, Size: 100_000}, "ring size 100000 bytes: want a power of two"},
		{"too large", nil, localapi.RingSetup{Ring: localapi.RingSend, Size: 64 << 20}, "rings of at most 16777216"},
		{"after subscribe", []localapi.Message{&localapi.Subscribe{From: 0}}, localapi.RingSetup{Ring: localapi.RingDeliver, Size: localapi.MinRing}, "before Subscribe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := dial(t, ds[0].socket, true)
			for _, m := range tc.before {
				c.Write(m)
				c.Read()
			}
			c.Write(&tc.setup)
			_, err := c.Read()
			var e *localapi.Error
			if !errors.As(err, &e) || !strings.Contains(e.Text, tc.want) {
				t.Fatalf("got %v, want an Error saying %q", err, tc.want)
			}
		})
	}
	t.Run("version 1", func(t *testing.T) {
		c, err := localapi.Dial(ds[0].socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(&localapi.Hello{Version: 1})
		if m, err := c.Read(); err != nil || m.(*localapi.Welcome).Version != 1 {
			t.Fatalf("Hello version 1: %v %v", m, err)
		}
		c.Write(&localapi.RingSetup{Ring: localapi.RingSend, Size: localapi.MinRing})
		_, err = c.Read()
		if err == nil || !strings.Contains(err.Error(), "RingSetup needs local API version 2") {
			t.Fatalf("got %v", err)
		}
	})
}

// While the fan-out copies a stream straight into one subscriber's ring,
// a second subscriber that has read Subscribed gets every message sent
// after that: the straight copy stops as the list of subscribers moves.
// (The window it guards is open only while the group's queue never runs
// dry; 20 rounds under a stream reach it now and then, not always.)
func TestSecondSubscriberDuringRingStream(t *testing.T) {
	ds := memGroup(t, 2, reliable.FIFO)
	first, _ := dialFlags(t, ds[1].socket, localapi.HelloBatch)
	rr, err := first.DeliverRing(localapi.MinRing)
	if err != nil {
		t.Fatal(err)
	}
	first.Write(&localapi.Subscribe{From: 0})
	drained := make(chan struct{})
	go func() { // keep the ring drained
		defer close(drained)
		for {
			if _, _, _, err := rr.Next(true); err != nil {
				return
			}
			rr.Release()
		}
	}()
	// first's Close (its cleanup, which runs after this one) unmaps the
	// ring: the drain must have stopped by then, or it reads unmapped
	// memory. A deadline in the past ends its wait for a doorbell.
	t.Cleanup(func() {
		first.SetDeadline(time.Now())
		<-drained
	})
	c, _ := dial(t, ds[0].socket, true)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a stream that never ends
		b := localapi.SendBatch{Msgs: [][]byte{make([]byte, 500), make([]byte, 500), make([]byte, 500)}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c.Write(&b) != nil {
				return
			}
		}
	}()
	for i := range 20 {
		second := subscribeFlags(t, ds[1].socket, 0, localapi.HelloBatch)
		marker := []byte("marker " + string(rune('a'+i)))
		m, _ := dial(t, ds[0].socket, true)
		if err := m.Write(&localapi.Send{Data: marker}); err != nil {
			t.Fatal(err)
		}
		for found := false; !found; {
			msg, err := second.Read()
			if err != nil {
				t.Fatalf("round %d: the second subscriber did not get the message sent after its Subscribed: %v", i, err)
			}
			switch d := msg.(type) {
			case *localapi.Deliver:
				found = bytes.Equal(d.Data, marker)
			case *localapi.DeliverBatch:
				for _, x := range d.Msgs {
					found = found || bytes.Equal(x.Data, marker)
				}
			}
		}
		second.Close()
		m.Close()
	}
}

// The clients' rings together stay within Config.MaxRingMemory: a
// RingSetup past it is refused with an Error that keeps the connection
// (the client goes on over its socket), and a closed connection's rings
// count no more.
func TestRingMemoryBound(t *testing.T) {
	seg := newMemSeg(1)
	t.Cleanup(func() { seg.links[0].Close() })
	cfg := Config{Logger: quiet, MaxRingMemory: 2 * localapi.MinRing, Group: reliable.Config{Group: 9, Size: 1, Server: true}}
	d := startDaemon(t, seg.links[0], t.TempDir()+"/a.sock", cfg)
	a, _ := dial(t, d.socket, true)
	if _, err := a.SendRing(localapi.MinRing); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DeliverRing(localapi.MinRing); err != nil {
		t.Fatal(err)
	}
	b, _ := dial(t, d.socket, true)
	_, err := b.SendRing(localapi.MinRing)
	var e *localapi.Error
	if !errors.As(err, &e) || e.Code != localapi.CodeTooLarge || !strings.Contains(e.Text, "the clients' rings hold 131072 bytes and this one would pass the daemon's bound of 131072; use the socket") {
		t.Fatalf("third ring: %v; want a refusal naming the bound", err)
	}
	// The refused connection still sends over its socket.
	if err := b.Write(&localapi.Send{Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(&localapi.Flush{}); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Read(); err != nil || m.Type() != localapi.TFlushed {
		t.Fatalf("Flush after the refusal: %v %v", m, err)
	}
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := b.SendRing(localapi.MinRing)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the first client closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that sends one message at a time through its send ring, and
// one that polls its deliver ring, cross to and from the daemons without
// a doorbell: the sending daemon polls the send ring while it polls the
// client's socket (ClientSpin), with the ring's wantData clear, and the
// receiving daemon finds wantData clear while its client polls. Each
// message arrives whole, in order.
func TestRingsPolledNoDoorbells(t *testing.T) {
	for _, poll := range []bool{true, false} {
		t.Run(map[bool]string{true: "client polls", false: "client sleeps"}[poll], func(t *testing.T) {
			testRingsPolled(t, poll)
		})
	}
}

// testRingsPolled: with poll false the client sleeps whenever it finds
// no delivery, as clients did before they could poll, and a doorbell
// wakes it each time, whatever the daemons do.
func testRingsPolled(t *testing.T, poll bool) {
	seg := newMemSeg(2)
	dir := t.TempDir()
	var ds []*running
	for i, l := range seg.links {
		// A spin far longer than a message's trip: the polls never run
		// out between two messages (they stop early only when a yield
		// keeps the CPU away longer than the spin).
		cfg := Config{Logger: quiet, ClientSpin: time.Second, Group: reliable.Config{Group: 9, Size: 2, Server: i == 0}}
		ds = append(ds, startDaemon(t, l, dir+"/"+string(rune('a'+i))+".sock", cfg))
	}
	t.Cleanup(func() {
		for _, l := range seg.links {
			l.Close()
		}
	})
	sub, rr := ringSubscriber(t, ds[1].socket)
	if poll {
		rr.SetSpin(time.Second)
	}
	_, sr, _ := ringSender(t, ds[0].socket)
	const n = 200
	for i := range n {
		msg := []byte(fmt.Sprintf("message %d", i))
		if err := sr.Add(msg); err != nil {
			t.Fatal(err)
		}
		if err := sr.Publish(); err != nil {
			t.Fatal(err)
		}
		_, got, ok, err := rr.Next(true)
		if err != nil || !ok || !bytes.Equal(got, msg) {
			t.Fatalf("message %d: got %q, %v, %v; want %q", i, got, ok, err, msg)
		}
	}
	// The first message may find the sending daemon asleep (or, on a
	// loaded machine, still polling since the ring was set up: ci61 saw
	// 0); none after it.
	if b := sr.Doorbells(); b > 1 {
		t.Errorf("the sender wrote %d doorbells for %d messages sent one at a time; want at most 1 (the first)", b, n)
	}
	if !poll {
		// It sleeps whenever it finds the ring empty, woken by a
		// doorbell (none lost: it got all n). A message can be in the
		// ring before it looks (this goroutine, preempted between
		// Publish and Next, found it there), so not every message
		// needs a sleep; but it never polls, so it sleeps.
		if s := rr.Sleeps(); s == 0 {
			t.Errorf("the receiver slept 0 times for %d messages; want a sleep whenever it found the ring empty (it does not poll)", n)
		}
		return
	}
	if s := rr.Sleeps(); s != 0 {
		t.Errorf("the receiver slept %d times for %d messages; want 0 (it polls)", s, n)
	}
	if sub.Pending() {
		t.Errorf("a packet waits on the receiver's socket: the daemon rang a client that polls")
	}
}

// A sole subscriber with a deliver ring gets every message straight into
// its ring, also the first after the fan-out found nothing waiting and
// waited: no packet is built for it (which copied that message a second
// time and published it alone, with a doorbell of its own). Messages
// sent one at a time, each after the one before arrived, have the
// fan-out wait before each.
func TestRingSubscriberAfterWaitNoPacket(t *testing.T) {
	ds := memGroup(t, 2, reliable.FIFO)
	_, rr := ringSubscriber(t, ds[1].socket)
	c, _ := dial(t, ds[0].socket, true)
	const n = 100
	for i := range n {
		msg := []byte(fmt.Sprintf("message %d", i))
		if err := c.Write(&localapi.Send{Data: msg}); err != nil {
			t.Fatal(err)
		}
		_, got, ok, err := rr.Next(true)
		if err != nil || !ok || !bytes.Equal(got, msg) {
			t.Fatalf("message %d: got %q, %v, %v; want %q", i, got, ok, err, msg)
		}
	}
	if p := ds[1].d.packets.Load(); p != 0 {
		t.Errorf("the fan-out built %d packets for %d messages to its one ring subscriber; want 0", p, n)
	}
}

// A deliver ring must take the group's largest message whole (a record
// is at most half the ring). Set up before the group started, when that
// size was not known, a ring too small ends its connection at the first
// delivery that does not fit, with an Error that says why and what size
// would do; once the group has started such a ring is refused and the
// connection stays, for the socket. (bench -ping's 64 KiB rings against
// daemons over link/udp, whose largest message is 65 k, were closed
// without a word.)
func TestRingTooSmallForGroup(t *testing.T) {
	for _, other := range []bool{false, true} {
		name := "sole subscriber" // the fan-out receives into the ring (ringRecv)
		if other {
			name = "beside a socket subscriber" // it copies into the ring (deliverRing)
		}
		t.Run(name, func(t *testing.T) { ringTooSmall(t, other) })
	}
}

func ringTooSmall(t *testing.T, other bool) {
	seg := newMemSegMTU(2, 60000, 64)
	defer func() {
		for _, l := range seg.links {
			l.Close()
		}
	}()
	dir := t.TempDir()
	cfg := func(server bool) Config {
		return Config{Logger: quiet, Group: reliable.Config{Group: 9, Size: 2, Server: server}}
	}
	a := startDaemon(t, seg.links[0], dir+"/a.sock", cfg(true))
	early, w := dial(t, a.socket, false)
	if w.Ready {
		t.Fatal("the group started with one of two daemons")
	}
	rr, err := early.DeliverRing(localapi.MinRing)
	if err != nil {
		t.Fatalf("a deliver ring before the group started: %v", err)
	}
	if err := early.Write(&localapi.Subscribe{From: localapi.AllMembers}); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, early, localapi.AllMembers)
	var sock *localapi.Conn
	if other {
		sock = subscribe(t, a.socket, localapi.AllMembers)
	}
	b := startDaemon(t, seg.links[1], dir+"/b.sock", cfg(false))
	c, w := dial(t, b.socket, true)
	want := localapi.RingFor(int(w.MaxMessage))
	if int(w.MaxMessage) < localapi.MinRing/2 || want <= localapi.MinRing {
		t.Fatalf("the group's largest message is %d bytes: it fits a ring of %d, the test shows nothing", w.MaxMessage, localapi.MinRing)
	}
	big := randomBytes(3, localapi.MinRing/2+1)
	if err := c.Write(&localapi.Send{Data: big}); err != nil {
		t.Fatal(err)
	}
	_, _, ok, err := rr.Next(true)
	var e *localapi.Error
	if ok || !errors.As(err, &e) || e.Code != localapi.CodeTooLarge ||
		!strings.Contains(e.Text, "the deliver ring cannot take the group's deliveries") || !strings.Contains(e.Text, fmt.Sprintf("set up one of %d bytes or more", want)) {
		t.Fatalf("a delivery of %d bytes into a ring of %d: ok %v, %v; want an Error naming a ring of %d", len(big), localapi.MinRing, ok, err, want)
	}
	if other {
		if got, err := collect(sock, len(big)); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("the socket subscriber beside the ring: %d bytes, %v; want the %d sent", len(got), err, len(big))
		}
	}

	// After the start: refused, and the socket serves.
	late, _ := dial(t, a.socket, true)
	_, err = late.DeliverRing(localapi.MinRing)
	if !errors.As(err, &e) || e.Code != localapi.CodeTooLarge || !strings.Contains(e.Text, fmt.Sprintf("cannot hold the group's largest message (%d bytes); ask for %d bytes or more", w.MaxMessage, want)) {
		t.Fatalf("a deliver ring of %d after the start: %v; want refused, naming %d", localapi.MinRing, err, want)
	}
	if err := late.Write(&localapi.Subscribe{From: localapi.AllMembers}); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, late, localapi.AllMembers)
	if err := c.Write(&localapi.Send{Data: big}); err != nil {
		t.Fatal(err)
	}
	if got, err := collect(late, len(big)); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the socket after the refused ring: %d bytes, %v; want the %d sent", len(got), err, len(big))
	}
}

// A delivery the deliver ring cannot take ends the client's stream
// there: the deliveries before it in its batch are published, and none
// after it go into the ring while ringTooSmall's goroutine ends the
// connection (a smaller one would fit, after a gap the client would not
// see).
func TestRingTooSmallStreamEndsThere(t *testing.T) {
	fd, mem, err := localapi.CreateRingMemory(localapi.MinRing)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	t.Cleanup(func() { localapi.UnmapRing(mem) })
	r, err := localapi.NewRing(localapi.RingDeliver, mem, localapi.MinRing)
	if err != nil {
		t.Fatal(err)
	}
	client, err := localapi.NewRing(localapi.RingDeliver, mem, localapi.MinRing)
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{ctx: context.Background()}
	c.rings.deliver = r
	batch := func(msgs ...[]byte) *outBatch {
		b := newOutBatch(localapi.MinRing)
		for _, m := range msgs {
			b.p = binary.BigEndian.AppendUint16(b.p, 1)
			b.p = binary.BigEndian.AppendUint32(b.p, uint32(len(m)))
			b.p = append(b.p, m...)
			b.n++
		}
		b.from = 1
		return b
	}
	before, big, after := []byte("before"), make([]byte, localapi.MinRing/2+1), []byte("after")
	if err := c.deliver(batch(before, big), localapi.AllMembers); !errors.Is(err, localapi.ErrRecordTooLarge) {
		t.Fatalf("a batch with a delivery of %d bytes into a ring of %d: %v; want ErrRecordTooLarge", len(big), localapi.MinRing, err)
	}
	c.ringFailed.Store(true) // ringTooSmall, which the fan-out calls next
	if err := c.deliver(batch(after), localapi.AllMembers); err != nil {
		t.Fatalf("a delivery after the ring failed: %v", err)
	}
	var got []string
	for {
		_, data, ok, err := client.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(data))
	}
	if len(got) != 1 || got[0] != string(before) {
		t.Fatalf("the client's ring holds %q; want only %q, the delivery before the one that failed", got, before)
	}
}
