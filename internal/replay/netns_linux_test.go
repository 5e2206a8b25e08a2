package replay

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestSimulateNetns: a real lossy run — four members on a namespace
// segment, ring links, 5% nftables loss into hosts 1-3, a registered group
// — each member's link captured into its own file; simulate, on the files
// read together, must deliver what each live member delivered, message for
// message — in a total-order group the sequencer too, whose loop steps
// requests later than the kernel stamped them (simulate steps them when
// the capture shows them numbered).
func TestSimulateNetns(t *testing.T) {
	t.Run("fifo", func(t *testing.T) { simulateNetns(t, reliable.Config{Group: 11}) })
	t.Run("total", func(t *testing.T) { simulateNetns(t, reliable.Config{Group: 12, Order: reliable.Total}) })
}

func simulateNetns(t *testing.T, base reliable.Config) {
	const n, k = 4, 150
	// A random prefix (netns.Options): two runs at once (a CI run beside
	// a manual one) must not share namespaces.
	topo := netnstest.Up(t, netns.Options{Hosts: n})
	for i := 1; i < n; i++ {
		if err := topo.Hosts[i].SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	var paths []string
	var writers []*capture.Writer
	var links []*capture.Link
	for i, h := range topo.Hosts {
		var l *ring.Link
		if err := h.Do(func() (err error) { l, err = ring.Open(h.Iface, ring.Config{}); return err }); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		p := filepath.Join(dir, fmt.Sprintf("h%d.pcapng", i))
		w, err := capture.CreateFile(p, capture.WriterOptions{QueueBytes: 32 << 20})
		if err != nil {
			t.Fatal(err)
		}
		inv := capture.NewInvariants(0, func(v capture.Violation) { t.Errorf("host %d: online invariant check: %v", i, v) })
		cl, err := capture.Wrap(l, w, capture.Options{Interface: "eth0", Invariants: inv})
		if err != nil {
			t.Fatal(err)
		}
		paths, writers, links = append(paths, p), append(writers, w), append(links, cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type delivery struct {
		from frame.MemberID
		data []byte
	}
	got := make([][]delivery, n)
	var mu sync.Mutex // got is appended to on each group's loop
	groups := make([]*reliable.Group, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		cfg := base
		cfg.Size, cfg.Server = n, i == 0
		cfg.Logger = quietLogger()
		cfg.Deliver = func(from frame.MemberID, data []byte) {
			mu.Lock()
			got[i] = append(got[i], delivery{from, bytes.Clone(data)})
			mu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[i], errs[i] = reliable.Join(ctx, links[i], cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: Join: %v", i, err)
		}
	}
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range k {
				if err := g.Send(ctx, fmt.Appendf(nil, "message %d from member %d", m, g.Self())); err != nil {
					t.Errorf("member %d: Send: %v", g.Self(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Every member delivers every other member's messages (and, in total
	// order, its own) before anyone leaves: a leaving member stops
	// delivering, and the others stop waiting for it.
	want := (n - 1) * k
	if base.Order == reliable.Total {
		want = n * k
	}
	for {
		mu.Lock()
		done := true
		for i := range n {
			done = done && len(got[i]) >= want
		}
		mu.Unlock()
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not every member delivered %d messages in time", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Close(); err != nil {
				t.Errorf("member %d: Close: %v", g.Self(), err)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		links[i].Close()
		if err := writers[i].Close(); err != nil {
			t.Fatal(err)
		}
		if st := writers[i].Stats(); st.Dropped != 0 {
			t.Fatalf("host %d: the capture dropped %d frames", i, st.Dropped)
		}
	}
	c, err := ReadFiles(paths, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vs := Check(c, CheckOptions{}); len(vs) != 0 {
		t.Errorf("%d violations on a correct run, first %v", len(vs), vs[0])
	}
	for i, g := range groups {
		id := g.Self()
		if len(got[i]) != want {
			t.Fatalf("member %d delivered %d messages live, want %d", id, len(got[i]), want)
		}
		res, err := Simulate(c, SimOptions{Node: id, Iface: i})
		if err != nil {
			t.Fatal(err)
		}
		same := len(res.Deliveries) == len(got[i])
		first := -1
		for j := 0; same && j < len(got[i]); j++ {
			d := res.Deliveries[j]
			if d.From != got[i][j].from || !bytes.Equal(d.Data, got[i][j].data) {
				same, first = false, j
			}
		}
		diverged := 0
		for _, note := range res.Notes {
			if bytes.Contains([]byte(note), []byte("diverge")) {
				diverged++
			}
		}
		switch {
		case same:
			t.Logf("member %d: re-run delivers the live %d messages; %d divergence notes", id, len(got[i]), diverged)
		default:
			t.Errorf("member %d: re-run delivered %d messages, live %d, first difference at %d (notes %q)", id, len(res.Deliveries), len(got[i]), first, res.Notes)
		}
	}
}
