package dsm_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/dsm/dsmsim"
)

var update = flag.Bool("update", false, "rewrite testdata/fig7_4.txt")

// Thesis fig. 7.4 as a transcript: p0, p1, p2 on the global channel c_g;
// s1 joined by p0 and p1 (channel c1), s2 by p1 and p2 (c2). At barrier
// b0 (id 10, the second barrier: the first fixes the memberships) p1
// waits for (bar, b0, 0) and (bar, b0, 2) on c_g and for the markers
// (bm, b0, 0) on c1 and (bm, b0, 2) on c2; p0 needs from p2 only its
// barrier message. The transcript lists, in the simulation's global
// order, every barrier event of the run: a member entering and crossing
// a barrier, and every barrier message and marker it handled, with the
// channel. A reviewer holds it against the figure;
// `go test ./dsm -run Fig7_4 -update` rewrites it.
func TestFig7_4Transcript(t *testing.T) {
	segs := map[uint32][]int{1: {0, 1}, 2: {1, 2}}
	var b strings.Builder
	p := func(r int) string { return fmt.Sprintf("p%d", r) }
	trace := func(rank int, ev dsm.TraceEvent) {
		switch ev.Kind {
		case core.EvBarrierEnter:
			fmt.Fprintf(&b, "%s reaches barrier %d (seq %d): sends (bm) on its channels, then (bar) on c_g\n", p(rank), ev.ID, ev.Seq)
		case core.EvArrival:
			fmt.Fprintf(&b, "%s   handles (bar, %d, %s) on c_g\n", p(rank), ev.Seq, p(int(ev.From)-1))
		case core.EvMarker:
			fmt.Fprintf(&b, "%s   handles (bm, %d, %s) on c%d\n", p(rank), ev.Seq, p(int(ev.From)-1), ev.Key)
		case core.EvBarrierPass:
			fmt.Fprintf(&b, "%s crosses barrier %d (seq %d)\n", p(rank), ev.ID, ev.Seq)
		}
	}
	_, err := dsmsim.Run(dsmsim.Config{Members: 3, Seed: 1, Node: dsm.Config{Channels: true}, Trace: trace}, func(n *dsm.Node) error {
		ctx := context.Background()
		mine, err := joinChanSegs(n, segs)
		if err != nil {
			return err
		}
		for _, s := range mine {
			if err := s.Write(n.Rank(), chanValue(n.Rank(), 0, n.Rank())); err != nil {
				return err
			}
		}
		return n.Barrier(ctx, 10)
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "fig7_4.txt")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("transcript differs from %s (-update rewrites it):\n%s", path, b.String())
	}
	// The figure's claims, checked on the transcript: p1 crosses b0 only
	// after both markers; p0 and p2 never handle a marker of the other.
	got := b.String()
	cross := strings.Index(got, "p1 crosses barrier 10")
	for _, m := range []string{"p1   handles (bm, 2, p0) on c1", "p1   handles (bm, 2, p2) on c2"} {
		if i := strings.Index(got, m); i < 0 || i > cross {
			t.Errorf("%q not before p1 crosses b0", m)
		}
	}
	for _, m := range []string{"p0   handles (bm, 2, p2)", "p2   handles (bm, 2, p0)"} {
		if strings.Contains(got, m) {
			t.Errorf("%q: they share no segment", m)
		}
	}
}
