package reliable

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// heldLink is a stagingLink whose Recv, once held, parks the event loop
// (entered says it has) until release, deaf to Wake: whatever goes out
// meanwhile is sent by somebody else than the loop.
type heldLink struct {
	stagingLink
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
	kicked  [][]byte // every frame Kick sent
}

func (l *heldLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if l.hold.Load() {
		l.entered <- struct{}{}
		<-l.release
	}
	return l.stagingLink.Recv(deadline, frames)
}

func (l *heldLink) Kick() error {
	l.mu.Lock()
	l.kicked = append(l.kicked, l.pending...)
	l.mu.Unlock()
	return l.stagingLink.Kick()
}

// A Send on a quiet group sends its frame before it returns, on its own
// goroutine, while the loop waits on the link (sendNow): here the loop is
// parked in Recv and cannot send it. With Config.Deliver set the loop
// alone hands out (Deliver runs on it), so Send leaves the frame to the
// loop. Either way the message arrives intact once the loop runs again.
func TestQuietSendSendsItself(t *testing.T) {
	for _, withDeliver := range []bool{false, true} {
		r := rtnet.New(t, 7)
		g, peer, hl := heldPair(t, r, withDeliver)
		<-hl.entered // before the loop's first turn, which starts the core
		hl.release <- struct{}{}
		<-hl.entered // after it: the loop waits in Recv, and stays there
		hl.mu.Lock()
		before := len(hl.kicked)
		hl.mu.Unlock()
		msg := []byte("sent by Send itself")
		if err := g.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		hl.mu.Lock()
		sent := hl.kicked[before:]
		hl.mu.Unlock()
		found := false
		for _, f := range sent {
			if _, body, err := frame.SplitEthernet(f, link.EtherTypeRbcast); err == nil && bytes.Contains(body, msg) {
				found = true
			}
		}
		if found == withDeliver {
			t.Fatalf("Deliver set %v: Send returned with the loop parked, %d frames kicked, the message among them: %v, want %v",
				withDeliver, len(sent), found, !withDeliver)
		}
		hl.hold.Store(false)
		close(hl.release)
		m, err := peer.Recv(t.Context())
		if err != nil || m.From != 1 || !bytes.Equal(m.Data, msg) {
			t.Fatalf("peer received %q from %d (%v), want %q from 1", m.Data, m.From, err, msg)
		}
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := peer.Close(); err != nil {
			t.Errorf("peer Close: %v", err)
		}
	}
}

// SendUnreliable while the loop waits on the link leaves its datagram to
// the kicker, which stages and kicks it (sendNow), instead of waking the
// loop (a deadline set in a ring's poller): here the loop is parked in
// Recv, deaf to Wake, and the datagram goes out all the same, once. With
// Config.Deliver set the loop alone carries out the core's Ready, and the
// datagram waits for it. Either way the peer receives it, bytes equal,
// and the sender sent it once.
func TestQuietSendUnreliableLeftToKicker(t *testing.T) {
	for _, withDeliver := range []bool{false, true} {
		r := rtnet.New(t, 8)
		g, peer, hl := heldPair(t, r, withDeliver)
		<-hl.entered // before the loop's first turn
		hl.release <- struct{}{}
		<-hl.entered // after it: the loop waits in Recv, and stays there
		msg := []byte("a datagram the kicker sends")
		kicked := func() int { // frames kicked that carry msg
			hl.mu.Lock()
			defer hl.mu.Unlock()
			k := 0
			for _, f := range hl.kicked {
				if _, body, err := frame.SplitEthernet(f, link.EtherTypeRbcast); err == nil && bytes.Contains(body, msg) {
					k++
				}
			}
			return k
		}
		if err := g.SendUnreliable(msg); err != nil {
			t.Fatal(err)
		}
		if withDeliver {
			if k := kicked(); k != 0 {
				t.Fatalf("Deliver set: the datagram was kicked %d times with the loop parked, want 0 (the loop sends it)", k)
			}
		} else {
			// The kicker runs on its own goroutine: give it 10 s.
			for end := time.Now().Add(10 * time.Second); kicked() == 0; runtime.Gosched() {
				if time.Now().After(end) {
					t.Fatal("the datagram was not kicked within 10 s while the loop was parked")
				}
			}
		}
		hl.hold.Store(false)
		close(hl.release)
		m, err := peer.Recv(t.Context())
		if err != nil || m.From != 1 || !bytes.Equal(m.Data, msg) {
			t.Fatalf("peer received %q from %d (%v), want %q from 1", m.Data, m.From, err, msg)
		}
		// A reliable message after it, received: the loop has taken
		// turns since, and has not sent the datagram again.
		if err := g.Send(t.Context(), []byte("after")); err != nil {
			t.Fatal(err)
		}
		if m, err := peer.Recv(t.Context()); err != nil || string(m.Data) != "after" {
			t.Fatalf("peer received %q (%v), want %q", m.Data, err, "after")
		}
		if k := kicked(); k != 1 {
			t.Errorf("Deliver set %v: the datagram went out in %d frames, want 1", withDeliver, k)
		}
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := peer.Close(); err != nil {
			t.Errorf("peer Close: %v", err)
		}
	}
}

// heldPair joins two members of group 3 on r: g over a heldLink whose
// loop parks in Recv until released (with Config.Deliver if
// withDeliver), and peer.
func heldPair(t *testing.T, r *rtnet.Net, withDeliver bool) (g, peer *Group, hl *heldLink) {
	t.Helper()
	raw := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})}
	members := staticMembers(raw)
	hl = &heldLink{stagingLink: stagingLink{Link: raw[0]}, entered: make(chan struct{}), release: make(chan struct{})}
	hl.hold.Store(true)
	var err error
	cfg := Config{Group: 3, Members: members, Self: 1, Logger: quiet}
	if withDeliver {
		cfg.Deliver = func(frame.MemberID, []byte) {}
	}
	g, err = Join(t.Context(), hl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	peer, err = Join(t.Context(), raw[1], Config{Group: 3, Members: members, Self: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return g, peer, hl
}

// A Send quietSend or more after the one before sends its frame itself
// (sendNow); one sooner leaves it to the loop (docs/local-api-history.md, "The
// Send's hand-off": 20 µs). On the Group's clock, set by the test, Sends
// at 0, 20 µs and 40 µs − 1 ns, each with the loop parked in Recv
// (it takes one turn between them): the first two are kicked before
// they return, the third is not; it goes out once the loop runs again,
// and the peer receives all three in order.
func TestQuietSendThreshold(t *testing.T) {
	r := rtnet.New(t, 9)
	g, peer, hl := heldPair(t, r, false)
	<-hl.entered // before the loop's first turn, which starts the core
	hl.release <- struct{}{}
	<-hl.entered // after it: the loop waits in Recv, and stays there
	base := time.Now()
	var at time.Duration
	g.mu.Lock()
	g.now = func() time.Time { return base.Add(at) }
	g.mu.Unlock()
	// turn lets the loop take one turn and wait in Recv again, once the
	// wall clock it reads is past the Group's (the core's time goes on).
	turn := func() {
		for time.Since(base) <= at {
			runtime.Gosched()
		}
		hl.release <- struct{}{}
		<-hl.entered
	}
	kicked := func(msg []byte) bool {
		hl.mu.Lock()
		defer hl.mu.Unlock()
		for _, f := range hl.kicked {
			if _, body, err := frame.SplitEthernet(f, link.EtherTypeRbcast); err == nil && bytes.Contains(body, msg) {
				return true
			}
		}
		return false
	}
	sends := []struct {
		at     time.Duration
		msg    string
		itself bool
	}{
		{0, "first, after none", true},
		{20 * time.Microsecond, "second, 20 µs after", true},
		{40*time.Microsecond - time.Nanosecond, "third, 1 ns short of 20 µs after", false},
	}
	for i, s := range sends {
		if i > 0 {
			turn()
		}
		at = s.at
		if err := g.Send(t.Context(), []byte(s.msg)); err != nil {
			t.Fatal(err)
		}
		if got := kicked([]byte(s.msg)); got != s.itself {
			t.Fatalf("%q at %v: sent by Send itself %v, want %v (quietSend is %v)", s.msg, s.at, got, s.itself, quietSend)
		}
	}
	for time.Since(base) <= at {
		runtime.Gosched()
	}
	hl.hold.Store(false)
	close(hl.release)
	for _, s := range sends {
		m, err := peer.Recv(t.Context())
		if err != nil || m.From != 1 || string(m.Data) != s.msg {
			t.Fatalf("peer received %q from %d (%v), want %q from 1", m.Data, m.From, err, s.msg)
		}
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := peer.Close(); err != nil {
		t.Errorf("peer Close: %v", err)
	}
}
