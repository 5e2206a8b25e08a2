package orca_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/frame"

	"github.com/rbcast/rbcast/orca"
)

// A write in the steady state allocates nothing of Orca's own (DESIGN.md,
// decision 4): the message is encoded into a pooled buffer, a Call's
// bookkeeping is reused by the next, the replica decodes, guards and
// applies with the operation's types (no boxing), and the result goes
// to the caller the same way. What is left is the user's: a Pending for
// each Go (the caller holds it; GoReuse reuses one waited for), and what
// the argument codec's Decode makes at every replica (Bytes copies,
// BytesView does not).
func TestWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	_, one := newLoop(t, 1, 1400, orca.Config{})
	c := must(t, one, "c", counter, func() int64 { return 0 })[0]
	q := must(t, one, "q", queue, func() Queue { return Queue{} })[0]
	if _, err := closeQ.Call(bg, q, struct{}{}); err != nil { // get's guard holds from now on
		t.Fatal(err)
	}
	_, three := newLoop(t, 3, 1400, orca.Config{})
	s := must(t, three, "sink", sink, func() int64 { return 0 })[0]
	args := make([]byte, 54)
	reused := add.Go(bg, c, 0)
	if _, err := reused.Wait(bg); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want float64
		fn   func() error
	}{
		{"Call", 0, func() error { _, err := add.Call(bg, c, 1000); return err }},
		{"guarded Call whose guard holds", 0, func() error { _, err := getJob.Call(bg, q, struct{}{}); return err }},
		{"Go and Wait", 1, func() error { _, err := add.Go(bg, c, 1000).Wait(bg); return err }},
		{"GoReuse and Wait", 0, func() error { _, err := add.GoReuse(bg, reused, c, 1000).Wait(bg); return err }},
		{"Call with BytesView, 3 members", 0, func() error { _, err := sinkPut.Call(bg, s, args); return err }},
		{"Call with Bytes, 3 members", 3, func() error { _, err := sinkPutCopy.Call(bg, s, args); return err }},
	} {
		for range 10 { // fill the pools
			if err := tc.fn(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if got := testing.AllocsPerRun(1000, func() {
			if err := tc.fn(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}); got != tc.want {
			t.Errorf("%s: %v allocations a write, want %v", tc.name, got, tc.want)
		}
	}
}

// asyncEnv is an order whose deliveries run on a goroutine of their own,
// as a live group's event loop: a caller's wait and the replica's finish
// of its call run at the same time.
type asyncEnv struct {
	loopEnv
	msgs chan loopMsg
}

func (e *asyncEnv) Send(ctx context.Context, msg []byte) error {
	select {
	case e.msgs <- loopMsg{e.id, append([]byte(nil), msg...)}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Calls from several goroutines while the replica runs on another: every
// one returns its own result (a Call's bookkeeping, reused by the next
// Call, is not touched by the replica once its caller has the result;
// go test -race checks it).
func TestCallsWithAsyncDelivery(t *testing.T) {
	msgs := make(chan loopMsg, 64)
	l := &loop{}
	ids := []frame.MemberID{1, 2}
	var nodes []*orca.Node
	for _, id := range ids {
		n, h, err := orca.NewHosted(&asyncEnv{loopEnv{l: l, id: id}, msgs}, orca.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(id, ids, 1400); err != nil {
			t.Fatal(err)
		}
		l.hosts = append(l.hosts, h)
		nodes = append(nodes, n)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			l.deliver(m)
		}
	}()
	regs := must(t, nodes, "r", register, func() int64 { return 0 })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				// set returns the value before: this goroutine's last,
				// or another's.
				v := int64(g*1000 + i + 1)
				if _, err := set.Call(bg, regs[g%2], v); err != nil {
					errs <- err
					return
				}
				if got, _ := get.Call(bg, regs[g%2], struct{}{}); got == 0 {
					errs <- fmt.Errorf("goroutine %d: read 0 after its write %d", g, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(msgs)
	<-done
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if a, b := nodes[0].Stats().Applied, nodes[1].Stats().Applied; a != 1200 || b != 1200 {
		t.Errorf("applied %d and %d writes, want 1200 each", a, b)
	}
}
