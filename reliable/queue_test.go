package reliable

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// The receive queue signals only whom it wakes: a push with no Recv
// waiting, and a pop with the loop not waiting for room, leave no token
// in ready or room (each token is a channel send per message, and a
// spurious wake-up later). A push between an empty pop and the wait is
// still seen: startWait refuses to wait while a message is queued.
func TestQueueSignalsOnlyWaiters(t *testing.T) {
	g := &Group{queue: newMsgQueue(2)}
	q := g.queue
	if _, _, ok, err := q.pop(nil); ok || err != nil {
		t.Fatalf("pop of an empty queue: ok %v, err %v", ok, err)
	}
	g.enqueue(1, []byte("a")) // after the empty pop, before the wait
	if len(q.ready) != 0 {
		t.Fatal("a push with no Recv waiting signalled ready")
	}
	if q.startWait() {
		t.Fatal("startWait waits with a message queued: the push's wake-up is lost")
	}
	g.enqueue(1, []byte("b"))
	g.enqueue(1, []byte("c")) // over the limit: full
	for i := range 3 {
		if _, _, ok, err := q.pop(nil); !ok || err != nil {
			t.Fatalf("pop %d: ok %v, err %v", i, ok, err)
		}
	}
	if len(q.ready) != 0 || len(q.room) != 0 {
		t.Fatalf("pops with no one waiting left tokens: ready %d, room %d", len(q.ready), len(q.room))
	}
	if !q.startWait() {
		t.Fatal("startWait refused to wait on an empty queue")
	}
	g.enqueue(1, []byte("d"))
	if len(q.ready) != 1 {
		t.Fatal("a push with a Recv waiting did not signal ready")
	}
	q.endWait()

	// The loop waiting for room is woken by the pop that makes it.
	g.enqueue(1, []byte("e"))
	if !q.startRoomWait() {
		t.Fatal("startRoomWait refused to wait on a full queue")
	}
	if _, _, ok, _ := q.pop(nil); !ok {
		t.Fatal("pop of a full queue found nothing")
	}
	if len(q.room) != 1 {
		t.Fatal("a pop below the limit did not signal the loop waiting for room")
	}
	q.endRoomWait()
	if _, _, ok, _ := q.pop(nil); !ok {
		t.Fatal("pop found nothing")
	}
	if q.startRoomWait() {
		t.Fatal("startRoomWait waits with room in the queue")
	}
}

// Every Recv waiting when the group stops returns its end, not only the
// one that close's signal woke.
func TestRecvWaitersAllEnd(t *testing.T) {
	r := rtnet.New(t, 5)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const waiters = 3
	ended := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := groups[1].Recv(ctx)
			ended <- err
		}()
	}
	q := groups[1].queue
	for {
		q.mu.Lock()
		w := q.waiting
		q.mu.Unlock()
		if w == waiters {
			break
		}
		runtime.Gosched()
	}
	groups[1].abort()
	<-groups[1].Done()
	for i := range waiters {
		if err := <-ended; err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter %d of %d: Recv returned %v, want the group's end", i+1, waiters, err)
		}
	}
}
