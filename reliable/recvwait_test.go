package reliable

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// WaitRecv returns once a message waits and takes none of them: Recv
// then returns them all, in order. With nothing waiting it returns the
// context's error, and after the group stopped, the stream's end.
func TestWaitRecv(t *testing.T) {
	r := rtnet.New(t, 5)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{})
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := groups[1].WaitRecv(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRecv with nothing sent: %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	waited := make(chan error, 1)
	go func() { waited <- groups[1].WaitRecv(ctx) }()
	msgs := [][]byte{[]byte("one"), []byte("two"), []byte("three")}
	for _, m := range msgs {
		if err := groups[0].Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitRecv: %v", err)
	}
	if err := groups[1].WaitRecv(ctx); err != nil {
		t.Fatalf("WaitRecv again, messages waiting: %v", err)
	}
	for i, want := range msgs {
		m, err := groups[1].Recv(ctx)
		if err != nil || !bytes.Equal(m.Data, want) {
			t.Fatalf("message %d: %q, %v; want %q (WaitRecv took none)", i, m.Data, err, want)
		}
	}
	groups[1].abort()
	<-groups[1].Done()
	_, recvErr := groups[1].Recv(ctx)
	if err := groups[1].WaitRecv(ctx); err == nil || err != recvErr {
		t.Fatalf("WaitRecv after the group stopped: %v, want Recv's end %v", err, recvErr)
	}
}

// orderHook takes every delivery it is offered except one in every
// refuseEvery (a full ring), recording it in out under mu, the lock the
// reader holds while it takes the queue's messages and records them
// (and that guards the counts).
type orderHook struct {
	mu          *sync.Mutex
	more        *sync.Cond // out grew
	out         *[]uint32
	offers      int
	refuseEvery int
	took        int
	flushes     int
}

func (h *orderHook) Take(_ frame.MemberID, data []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offers++
	if h.offers%h.refuseEvery == 0 {
		return false
	}
	*h.out = append(*h.out, binary.BigEndian.Uint32(data))
	h.more.Broadcast()
	h.took++
	return true
}

func (h *orderHook) Flush() {
	h.mu.Lock()
	h.flushes++
	h.mu.Unlock()
}

// A RecvHook takes the deliveries offered while the receive queue is
// empty; one it refuses, and every one after it until the queue is empty
// again, goes to the queue. A reader that takes the queue's messages
// under the lock the hook records under, while the hook comes and goes,
// sees every message once, in order, between the hook and the queue.
func TestRecvHookOrder(t *testing.T) {
	r := rtnet.New(t, 7)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{})
	var mu sync.Mutex
	more := sync.NewCond(&mu)
	var out []uint32
	hooks := []*orderHook{{mu: &mu, more: more, out: &out, refuseEvery: 5}, {mu: &mu, more: more, out: &out, refuseEvery: 3}}
	const total = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done, stop := context.WithCancel(context.Background())
	stop()
	// The reader runs until every message came (the hook may take the
	// last ones, and nothing then wakes its WaitRecv): endRead ends it.
	readCtx, endRead := context.WithCancel(ctx)
	defer endRead()
	stopWake := context.AfterFunc(ctx, func() { // the waits on more end with ctx
		mu.Lock()
		more.Broadcast()
		mu.Unlock()
	})
	defer stopWake()
	read := make(chan int, 1)
	go func() { // the reader: the queue's messages, under mu
		queued := 0
		buf := make([]byte, 0, 64)
		for {
			mu.Lock()
			for {
				_, data, err := groups[1].RecvAppend(done, buf[:0])
				if err != nil {
					break
				}
				out = append(out, binary.BigEndian.Uint32(data))
				queued++
			}
			more.Broadcast()
			mu.Unlock()
			if err := groups[1].WaitRecv(readCtx); err != nil {
				read <- queued
				return
			}
		}
	}()
	msg := make([]byte, 4)
	for i := range total {
		if i%4 == 0 { // now and then the queue is empty: the hook's turn
			mu.Lock()
			for len(out) < i && ctx.Err() == nil {
				more.Wait()
			}
			mu.Unlock()
		}
		switch i % 300 { // the hook comes and goes
		case 0:
			groups[1].SetRecvHook(hooks[0])
		case 100:
			groups[1].SetRecvHook(nil)
		case 200:
			groups[1].SetRecvHook(hooks[1])
		}
		binary.BigEndian.PutUint32(msg, uint32(i))
		if err := groups[0].Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	for len(out) < total && ctx.Err() == nil {
		more.Wait()
	}
	mu.Unlock()
	endRead()
	queued := <-read
	mu.Lock()
	defer mu.Unlock()
	if len(out) != total {
		t.Fatalf("%d deliveries of %d messages (hook and queue)", len(out), total)
	}
	for i, v := range out {
		if v != uint32(i) {
			t.Fatalf("delivery %d is message %d (hook and queue out of order)", i, v)
		}
	}
	took := hooks[0].took + hooks[1].took
	if took == 0 || queued == 0 {
		t.Fatalf("the hooks took %d messages, the queue had %d: want some of each", took, queued)
	}
	t.Logf("hooks took %d of %d offered (flushed %d times), the queue %d", took, hooks[0].offers+hooks[1].offers, hooks[0].flushes+hooks[1].flushes, queued)
}
