//go:build linux

package linkbench

import (
	"os"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet/netns"
)

func TestMain(m *testing.M) {
	MaybeChild()
	os.Exit(m.Run())
}

// The harness itself must work for every backend: a short run delivers
// frames to every receiver and leaves no namespace behind. The numbers are
// not checked here (they go in docs/benchmarks.md).
func TestHarnessRuns(t *testing.T) {
	netns.RequireRoot(t)
	for _, b := range BackendNames {
		t.Run(b, func(t *testing.T) {
			prefix := "rbkt" + b[:2]
			for _, procs := range []bool{false, true} {
				res, err := RunThroughput(Options{Backend: b, Hosts: 3, MTU: 1500, Duration: 100 * time.Millisecond, Prefix: prefix, Processes: procs})
				if err != nil {
					t.Fatalf("processes=%v: %v", procs, err)
				}
				if res.Sent == 0 || len(res.Receivers) != 2 {
					t.Fatalf("processes=%v: sent %d, %d receivers", procs, res.Sent, len(res.Receivers))
				}
				for i, r := range res.Receivers {
					if r.Frames == 0 || r.Frames+r.Lost != res.Sent {
						t.Fatalf("processes=%v: receiver %d: %d frames + %d lost != %d sent", procs, i, r.Frames, r.Lost, res.Sent)
					}
				}
			}
			lat, err := RunLatency(b, 50, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if lat.RoundTrips != 50 || lat.P50 <= 0 {
				t.Fatalf("latency: %+v", lat)
			}
			if left, _ := netns.Leftovers(prefix); len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

func TestUnknownBackend(t *testing.T) {
	if _, err := RunThroughput(Options{Backend: "nope"}); err == nil {
		t.Fatal("unknown backend accepted")
	}
	if os.Geteuid() != 0 {
		t.Log("root-only harness test skipped: needs root (namespaces, CAP_NET_RAW)")
	}
}
