package dsm_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// joinAll joins n nodes over a real-time lossy segment.
func joinAll(t *testing.T, n int, seed uint64, cfg dsm.Config) []*dsm.Node {
	t.Helper()
	r := rtnet.New(t, seed)
	var links []*rtnet.Link
	var members []frame.MemberInfo
	for i := range n {
		l := r.Attach(t, testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.03, Reorder: 0.03, ReorderDelay: 200 * time.Microsecond}})
		links = append(links, l)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(l.HardwareAddr()), Incarnation: 1})
	}
	nodes := make([]*dsm.Node, n)
	for i, l := range links {
		c := cfg
		c.Group = reliable.Config{Group: 1, Members: members, Self: frame.MemberID(i + 1), Logger: slog.New(slog.DiscardHandler)}
		nd, err := dsm.Join(context.Background(), l, c)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
	}
	t.Cleanup(func() {
		for _, l := range links {
			l.Close()
		}
	})
	return nodes
}

// lossy3 is an endpoint that loses 3% of the frames it receives.
var lossy3 = testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.03}}

// joinRanked joins size nodes, each on a link of r with ep, all at once
// as separate processes would: node i with cfg(i), given a logger that
// discards when it has none. It returns them in rank order.
func joinRanked(t *testing.T, r *rtnet.Net, ep testnet.EndpointConfig, size int, cfg func(i int) dsm.Config) []*dsm.Node {
	t.Helper()
	nodes := make([]*dsm.Node, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		l := r.Attach(t, ep)
		t.Cleanup(func() { l.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg(i)
			if c.Group.Logger == nil {
				c.Group.Logger = slog.New(slog.DiscardHandler)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes[i], errs[i] = dsm.Join(ctx, l, c)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(nodes, func(a, b *dsm.Node) int { return a.Rank() - b.Rank() })
	return nodes
}

// runLive runs program on every node, each on its own goroutine, and
// exits the nodes.
func runLive(t *testing.T, nodes []*dsm.Node, program func(*dsm.Node) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = program(n)
			if err := n.Exit(); err != nil && errs[i] == nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// The live runtime (Join: reliable.Group, Deliver on its event loop, the
// sender goroutine) passes the sequential-consistency program too.
func TestJoinSequentialConsistency(t *testing.T) {
	before := runtime.NumGoroutine()
	nodes := joinAll(t, 3, 1, dsm.Config{})
	if nodes[0].Rank() != 0 || nodes[2].Rank() != 2 || nodes[1].Size() != 3 {
		t.Fatalf("ranks %d %d, size %d", nodes[0].Rank(), nodes[2].Rank(), nodes[1].Size())
	}
	runLive(t, nodes, scProgram(6))
	st := nodes[1].Stats()
	if st.Barriers != 13 || st.Applied == 0 || st.BadMessages != 0 {
		t.Errorf("stats: %+v", st)
	}
	if err := nodes[0].Barrier(context.Background(), 1); !errors.Is(err, dsm.ErrClosed) {
		t.Errorf("barrier after exit: %v", err)
	}
	// Every goroutine the nodes started has ended (the groups' loops and
	// the senders); the clock goroutine of the segment is still there.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+1 {
		t.Errorf("%d goroutines after exit, %d before", g, before)
	}
}

// Locks over the live runtime: mutual exclusion between two members, a
// counter incremented under the lock ends exact.
func TestJoinLocks(t *testing.T) {
	nodes := joinAll(t, 2, 2, dsm.Config{})
	reads := make([][]uint64, 2)
	var mu sync.Mutex
	runLive(t, nodes, func(n *dsm.Node) error {
		var mine [][]uint64 = make([][]uint64, 2)
		err := lockProgram(30, &mine)(n)
		mu.Lock()
		reads[0] = append(reads[0], mine[0]...)
		reads[1] = append(reads[1], mine[1]...)
		mu.Unlock()
		return err
	})
	for lock, vs := range reads {
		seen := make([]bool, len(vs))
		for _, v := range vs {
			if v >= uint64(len(vs)) || seen[v] {
				t.Fatalf("lock %d: counter reads %v are not a permutation of 0..%d", lock, vs, len(vs)-1)
			}
			seen[v] = true
		}
	}
}
