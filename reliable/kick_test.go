package reliable

import (
	"errors"
	"strings"
	"sync"
	"testing"

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
