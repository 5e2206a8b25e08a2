package orca_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// Join over a live Views group (the real-time network, 5 % loss): two
// founders write, a third process joins the running group and gets the
// state (its Join returns with it), writes too, and all three replicas
// end alike. The donor's state goes out on a goroutine of its own, not
// on the group's event loop.
func TestJoinViewsLive(t *testing.T) {
	r := rtnet.New(t, 41)
	imp := testnet.Impairment{Loss: 0.05}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	cfg := func(size int) orca.Config {
		return orca.Config{Views: true, Group: reliable.Config{Group: 22, Size: size, FailureTimeout: 300 * time.Millisecond,
			HeartbeatInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}}
	}
	var nodes []*orca.Node
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 {
		l := r.Attach(t, testnet.EndpointConfig{In: imp})
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := orca.Join(ctx, l, cfg(2))
			if err != nil {
				t.Errorf("founder: %v", err)
				return
			}
			mu.Lock()
			nodes = append(nodes, n)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(nodes) != 2 {
		t.FailNow()
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	var objs []*orca.Object[int64]
	for _, n := range nodes {
		c, err := orca.New(n, "c", counter, 0)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, c)
	}
	for i := range 50 {
		if _, err := add.Call(ctx, objs[i%2], 1); err != nil {
			t.Fatal(err)
		}
	}
	late, err := orca.Join(ctx, r.Attach(t, testnet.EndpointConfig{In: imp}), cfg(1))
	if err != nil {
		t.Fatalf("joiner: %v", err)
	}
	nodes = append(nodes, late)
	c, err := orca.New(late, "c", counter, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := value.Call(ctx, c, struct{}{}); v < 50 {
		t.Errorf("the joiner reads %d after Join, want at least the 50 written before", v)
	}
	if late.Size() != 3 {
		t.Errorf("the joiner's Size is %d, want 3", late.Size())
	}
	objs = append(objs, c)
	for _, o := range objs {
		if _, err := add.Call(ctx, o, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		if _, err := atLeast.Call(ctx, o, 53); err != nil {
			t.Fatal(err)
		}
	}
	var ref []byte
	for i, n := range nodes {
		s, err := n.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !bytes.Equal(s, ref) {
			t.Errorf("node %d's snapshot differs from node 0's", i)
		}
		ref = s
	}
	if st := late.Stats(); st.StateReceived == 0 {
		t.Errorf("the joiner restored no state")
	}
}

// A live node whose group stops by itself (not by Node.Close) fails, and
// every waiter returns with ErrClosed: a guarded read that waits with a
// context that cannot end (Wait blocks on its own channel, not on the
// group's end: groupEnv.watch fails the node and wakes it), and the node's
// Err without any waiter.
func TestGroupStopWakesWaiters(t *testing.T) {
	r := rtnet.New(t, 43)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	n, err := orca.Join(ctx, r.Attach(t, testnet.EndpointConfig{}), orca.Config{Views: true, Group: reliable.Config{Group: 23, Size: 1,
		Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := orca.New(n, "c", counter, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := add.Call(bg, c, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := atLeast.Call(bg, c, 2) // never true
		got <- err
	}()
	if err := orca.StopGroup(n); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, orca.ErrClosed) {
			t.Errorf("the waiting read returned %v, want an error wrapping ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting read did not return after the group stopped")
	}
	if err := n.Err(); !errors.Is(err, orca.ErrClosed) {
		t.Errorf("Err() = %v, want an error wrapping ErrClosed", err)
	}
}
