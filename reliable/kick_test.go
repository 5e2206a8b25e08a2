package reliable

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// stagingLink makes an rtnet.Link a stager, as link/ring is: Stage keeps
// copies, Kick sends them. Kick fails once the group is stopping its
// kicker (the last Kick, which carries the Leave repeats) when failLast.
type stagingLink struct {
	*rtnet.Link
	mu       sync.Mutex
	pending  [][]byte
	g        *Group
	failLast bool
}

var errKickRefused = errors.New("test: kernel refused the frame")

func (l *stagingLink) Stage(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range frames {
		l.pending = append(l.pending, append([]byte(nil), f...))
	}
	return len(frames), nil
}

func (l *stagingLink) Kick() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failLast && l.g != nil {
		select {
		case <-l.g.kickStop:
			l.pending = nil
			return errKickRefused
		default:
		}
	}
	frames := l.pending
	l.pending = nil
	if len(frames) == 0 {
		return nil
	}
	_, err := l.Link.Send(frames)
	return err
}

// The last Kick, made when the group stops, fails: Close must say so
// instead of reporting a clean leave; with it succeeding, Close is clean.
func TestCloseReportsLastKickError(t *testing.T) {
	for _, failLast := range []bool{false, true} {
		r := rtnet.New(t, 5)
		raw := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})}
		members := staticMembers(raw)
		sl := &stagingLink{Link: raw[0], failLast: failLast}
		g, err := Join(t.Context(), sl, Config{Group: 3, Members: members, Self: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		sl.mu.Lock()
		sl.g = g
		sl.mu.Unlock()
		peer, err := Join(t.Context(), raw[1], Config{Group: 3, Members: members, Self: 2, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Send(t.Context(), []byte("hello")); err != nil {
			t.Fatal(err)
		}
		m, err := peer.Recv(t.Context())
		if err != nil || m.From != 1 || string(m.Data) != "hello" {
			t.Fatalf("peer received %q from %d (%v), want \"hello\" from 1", m.Data, m.From, err)
		}
		err = g.Close()
		if !failLast {
			if err != nil {
				t.Errorf("Close with every Kick succeeding: %v, want nil", err)
			}
		} else {
			if !errors.Is(err, errKickRefused) || !strings.Contains(err.Error(), "Leave repeats") {
				t.Errorf("Close with the last Kick failing: %v, want the Kick's error naming the Leave repeats", err)
			}
			if gerr := g.Err(); !errors.Is(gerr, errKickRefused) {
				t.Errorf("Err after the failed last Kick: %v, want the Kick's error", gerr)
			}
		}
		if err := peer.Close(); err != nil && !failLast {
			t.Errorf("peer Close: %v", err)
		}
	}
}

// nowLink is a stagingLink with link/ring's SendNow: it sends at once and
// keeps a copy of what it sent; with fail set it sends nothing and says
// so, as a link that cannot send at the moment would.
type nowLink struct {
	stagingLink
	fail   bool
	nowed  [][]byte
	staged [][]byte // every frame Stage took
}

var errNowRefused = errors.New("test: SendNow refused")

func (l *nowLink) SendNow(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return 0, errNowRefused
	}
	for _, f := range frames {
		l.nowed = append(l.nowed, append([]byte(nil), f...))
	}
	return l.Link.Send(frames)
}

func (l *nowLink) Stage(frames [][]byte) (int, error) {
	l.mu.Lock()
	for _, f := range frames {
		l.staged = append(l.staged, append([]byte(nil), f...))
	}
	l.mu.Unlock()
	return l.stagingLink.Stage(frames)
}

// A FIFO sender on a link with SendNow sends its Data retransmissions
// with it, and everything else (first transmissions, Acks, Nacks,
// Heartbeats) through Stage, in order; when SendNow fails, the
// retransmissions are staged instead. Either way the receiver, which
// loses 20% of its frames, gets every message intact and in order.
func TestRetransmissionsSendNow(t *testing.T) {
	for _, fail := range []bool{false, true} {
		r := rtnet.New(t, 11)
		raw := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.2}})}
		members := staticMembers(raw)
		nl := &nowLink{stagingLink: stagingLink{Link: raw[0]}, fail: fail}
		logged := &logBuffer{} // the group logs from its goroutines
		logger := slog.New(slog.NewTextHandler(logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
		g, err := Join(t.Context(), nl, Config{Group: 3, Members: members, Self: 1, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		peer, err := Join(t.Context(), raw[1], Config{Group: 3, Members: members, Self: 2, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		const k, size = 2000, 1000
		sent := sendMessages(t.Context(), g, k, size)
		recvMessages(t.Context(), t, peer, k, size)
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		peer.Close()

		retx := func(f []byte) bool {
			_, body, err := frame.SplitEthernet(f, link.EtherTypeRbcast)
			return err == nil && frame.View(body).Type() == frame.Data && frame.View(body).Retransmission()
		}
		nl.mu.Lock()
		var stagedRetx, stagedData int
		for _, f := range nl.staged {
			switch {
			case retx(f):
				stagedRetx++
			case len(f) > 200:
				stagedData++
			}
		}
		nowed := len(nl.nowed)
		for i, f := range nl.nowed {
			if !retx(f) {
				t.Errorf("fail=%v: SendNow frame %d is not a Data retransmission", fail, i)
			}
		}
		nl.mu.Unlock()
		st := g.Stats().Protocol
		t.Logf("fail=%v: %d retransmitted, %d sent with SendNow, %d staged", fail, st.Retransmitted, nowed, stagedRetx)
		if st.Retransmitted == 0 || stagedData == 0 {
			t.Fatalf("fail=%v: %d retransmissions and %d staged Data frames; the test needs both", fail, st.Retransmitted, stagedData)
		}
		switch {
		case g.Stats().RetransmitsSentNow != uint64(nowed):
			t.Errorf("fail=%v: Stats.RetransmitsSentNow = %d, SendNow sent %d", fail, g.Stats().RetransmitsSentNow, nowed)
		case !fail && (stagedRetx != 0 || uint64(nowed) != st.Retransmitted):
			t.Errorf("SendNow working: %d retransmissions staged, %d sent with SendNow, of %d; want 0 and all", stagedRetx, nowed, st.Retransmitted)
		case fail && (nowed != 0 || uint64(stagedRetx) != st.Retransmitted):
			t.Errorf("SendNow failing: %d retransmissions staged, %d sent with SendNow, of %d; want all and 0", stagedRetx, nowed, st.Retransmitted)
		}
		// A failing SendNow is said once, with its error; a working one
		// not at all.
		out := logged.String()
		if n := strings.Count(out, "past the transmit queue failed"); fail && (n != 1 || !strings.Contains(out, errNowRefused.Error())) || !fail && n != 0 {
			t.Errorf("fail=%v: the log says %d times that SendNow failed, want %d with its error: %q", fail, n, map[bool]int{true: 1}[fail], out)
		}
	}
}
