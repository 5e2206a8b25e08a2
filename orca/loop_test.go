package orca_test

import (
	"context"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/reliable"
)

// loop is a total order in memory for unit tests: a Send delivers its
// message to every node at once, in the order Sends take the loop's lock,
// as a view valid during the delivery, as the reliable layer hands it: a
// view into a frame buffer of the loop's own, overwritten after every
// delivery (a replica that kept a view sees garbage), and reused, so
// that BenchmarkWriteLocal and TestWriteAllocs measure Orca, not the
// loop.
type loop struct {
	mu    sync.Mutex
	frame []byte
	hosts []*orca.Host
	// hold, when set, queues messages instead of delivering them, until
	// release.
	hold    bool
	pending []loopMsg
}

type loopMsg struct {
	from frame.MemberID
	data []byte
}

type loopEnv struct {
	l  *loop
	id frame.MemberID
}

func (e *loopEnv) Send(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if e.l.hold {
		e.l.pending = append(e.l.pending, loopMsg{e.id, append([]byte(nil), msg...)})
		return nil
	}
	e.l.frame = append(e.l.frame[:0], msg...)
	e.l.deliver(loopMsg{e.id, e.l.frame})
	for i := range e.l.frame {
		e.l.frame[i] = 0xee
	}
	return nil
}

// deliver hands m to every host (l.mu held).
func (l *loop) deliver(m loopMsg) {
	for _, h := range l.hosts {
		h.Deliver(m.from, m.data)
	}
}

// release delivers what hold queued.
func (l *loop) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold = false
	for _, m := range l.pending {
		l.deliver(m)
	}
	l.pending = nil
}

func (e *loopEnv) Wait(ctx context.Context, w orca.Waiter) error {
	for {
		ch := w.Wake()
		if w.Ready() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if w.Ready() {
				return nil
			}
			return ctx.Err()
		}
	}
}

func (e *loopEnv) Leave() error               { return nil }
func (e *loopEnv) GroupStats() reliable.Stats { return reliable.Stats{} }

// newLoop starts members nodes on one loop; maxMessage is what the
// "group" carries in one message.
func newLoop(t testing.TB, members, maxMessage int, cfg orca.Config) (*loop, []*orca.Node) {
	t.Helper()
	l := &loop{}
	var ids []frame.MemberID
	for i := range members {
		ids = append(ids, frame.MemberID(i+1))
	}
	var nodes []*orca.Node
	for _, id := range ids {
		n := l.add(t, id, ids, maxMessage, cfg)
		nodes = append(nodes, n)
	}
	return l, nodes
}

// add starts one more node on l (it hears what is sent from now on).
func (l *loop) add(t testing.TB, id frame.MemberID, ids []frame.MemberID, maxMessage int, cfg orca.Config) *orca.Node {
	t.Helper()
	e := &loopEnv{l: l, id: id}
	n, h, err := orca.NewHosted(e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(id, ids, maxMessage); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	return n
}

// must makes object name of class c with initial on every node.
func must[S any](t testing.TB, nodes []*orca.Node, name string, c *orca.Class[S], initial func() S) []*orca.Object[S] {
	t.Helper()
	var objs []*orca.Object[S]
	for _, n := range nodes {
		o, err := orca.New(n, name, c, initial())
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}
