package reliable

import (
	"bytes"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/core"
)

// loopCore is a core that sends what the test posts (send) and records
// the frames it is stepped with; its Reports are the senders of those
// frames, for Collect.
type loopCore struct {
	out      [][]byte
	ready    [][]byte
	stepped  []frame.MemberID
	reported []frame.MemberID
}

func (c *loopCore) Step(now core.Time, src, dst [6]byte, v frame.View) error {
	c.stepped = append(c.stepped, v.Sender())
	c.reported = append(c.reported, v.Sender())
	return nil
}
func (c *loopCore) Tick(core.Time)                  {}
func (c *loopCore) Propose(core.Time, []byte) error { return nil }
func (c *loopCore) Leave(core.Time)                 {}
func (c *loopCore) Ready() core.Ready {
	c.ready, c.out = append(c.ready, c.out...), nil
	return core.Ready{Frames: c.ready}
}
func (c *loopCore) Advance()            { c.ready = nil }
func (c *loopCore) Deadline() core.Time { return 0 }
func (c *loopCore) Blocked() bool       { return false }
func (c *loopCore) Done() bool          { return false }
func (c *loopCore) Stats() core.Stats   { return core.Stats{} }
func (c *loopCore) Info() core.Info {
	return core.Info{Self: 1, Delivers: func(frame.Type) bool { return false }}
}
func (c *loopCore) Members() []core.Member { return []core.Member{{ID: 1, Self: true}} }
func (c *loopCore) Repair(from frame.MemberID) (frame.MemberID, bool) {
	return from, false
}

// loopLink hands out the frames the test puts in rx, refuses the first
// refuse sends and keeps the others; it can be woken.
type loopLink struct {
	rx      chan []byte
	woken   chan struct{}
	mu      sync.Mutex
	refuse  int
	sent    [][]byte
	gotNew  chan struct{}
	refused chan struct{}
}

var errLoopRefused = errors.New("test: the link refused the frames")

func newLoopLink(refuse int) *loopLink {
	return &loopLink{rx: make(chan []byte, 8), woken: make(chan struct{}, 1), refuse: refuse, gotNew: make(chan struct{}, 16), refused: make(chan struct{}, 16)}
}

func (l *loopLink) Send(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse > 0 {
		l.refuse--
		l.refused <- struct{}{}
		return 0, errLoopRefused
	}
	for _, f := range frames {
		l.sent = append(l.sent, bytes.Clone(f))
	}
	l.gotNew <- struct{}{}
	return len(frames), nil
}

func (l *loopLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case b := <-l.rx:
		frames[0] = link.Frame{Data: b}
		return 1, nil
	case <-l.woken:
		return 0, os.ErrDeadlineExceeded
	case <-t.C:
		return 0, os.ErrDeadlineExceeded
	}
}

func (l *loopLink) Wake() {
	select {
	case l.woken <- struct{}{}:
	default:
	}
}
func (l *loopLink) MTU() int                       { return 1500 }
func (l *loopLink) HardwareAddr() net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (l *loopLink) Stats() (link.Stats, error)     { return link.Stats{}, nil }
func (l *loopLink) Close() error                   { return nil }

func (l *loopLink) sentFrames() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

func loopFrame(t *testing.T, sender frame.MemberID) []byte {
	t.Helper()
	h := frame.Header{Group: 7, Sender: sender, Incarnation: 1, AckBase: 1, Acks: make([]uint32, 1)}
	b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, byte(sender)}, frame.EtherType)
	b, err := frame.Append(b, &h, &frame.Empty{T: frame.Ack})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitSignal(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

// A send the link refuses is counted and the CoreLoop goes on: the next
// frames go out (a Group's sender would stop at the first failure).
func TestCoreLoopSendsAfterSendError(t *testing.T) {
	l := newLoopLink(1)
	c := &loopCore{}
	cl := StartCoreLoop(l, c, CoreConfig{Group: 7, Logger: quiet})
	defer cl.Close()
	first, second := loopFrame(t, 1), loopFrame(t, 2)
	post := func(b []byte) {
		if err := cl.Do(func(core.Time) error { c.out = append(c.out, b); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	post(first)
	waitSignal(t, "the refused send", l.refused)
	post(second)
	waitSignal(t, "the second frame", l.gotNew)
	if got := l.sentFrames(); len(got) != 1 || !bytes.Equal(got[0], second) {
		t.Fatalf("sent %d frames after the refused send, want the second frame alone", len(got))
	}
	if got := cl.Counters().SendErrs; got != 1 {
		t.Fatalf("SendErrs = %d, want 1", got)
	}
	cl.Close()
	if err := cl.Do(func(core.Time) error { return nil }); !errors.Is(err, ErrLoopClosed) {
		t.Fatalf("Do after Close: %v, want ErrLoopClosed", err)
	}
}

// Admit decides which received frames the core is stepped with;
// Collect takes what the core reported under the lock, Hand gets it on
// the loop after Advance.
func TestCoreLoopAdmitCollectHand(t *testing.T) {
	l := newLoopLink(0)
	c := &loopCore{}
	var collected []frame.MemberID
	handed := make(chan []frame.MemberID, 8)
	cl := StartCoreLoop(l, c, CoreConfig{Group: 7, Logger: quiet,
		Admit: func(_ core.Time, f *link.Frame) bool {
			_, b, err := frame.SplitEthernet(f.Data, frame.EtherType)
			return err == nil && frame.View(b).Sender() != 3
		},
		Collect: func() { collected, c.reported = append(collected, c.reported...), nil },
		Hand: func() {
			if len(collected) > 0 {
				handed <- collected
				collected = nil
			}
		},
	})
	defer cl.Close()
	var got []frame.MemberID
	for _, s := range []frame.MemberID{2, 3, 4} {
		l.rx <- loopFrame(t, s)
	}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case h := <-handed:
			got = append(got, h...)
		case <-deadline:
			t.Fatalf("handed out %v within 10s, want [2 4]", got)
		}
	}
	var stepped []frame.MemberID
	cl.Read(func() { stepped = append(stepped, c.stepped...) })
	if want := []frame.MemberID{2, 4}; !slices.Equal(got, want) || !slices.Equal(stepped, want) {
		t.Fatalf("handed out %v, stepped %v; want %v (3 not admitted)", got, stepped, want)
	}
}
