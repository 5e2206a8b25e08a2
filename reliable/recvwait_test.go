package reliable

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

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
