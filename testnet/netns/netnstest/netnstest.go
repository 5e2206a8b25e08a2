// Package netnstest is testnet/netns for tests: Up builds a topology that
// the test's cleanup removes, and RequireRoot skips a test that cannot
// build one. It is apart from netns so that tools built on netns (the
// benchmark programs) do not link package testing.
package netnstest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/testnet/netns"
)

// RequireRoot skips the test with a message naming what is needed when the
// process is not root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN to create network namespaces, CAP_NET_RAW for AF_PACKET sockets); run the tests as root")
	}
}

// Up builds a topology with netns.New for the test, skipping it without
// root and failing it if the topology cannot be built, and removes the
// topology when the test and its subtests end (also when they fail).
//
// A test killed by go test's -timeout never runs its cleanups. So that
// its namespaces do not pile up (random prefixes) or make the next run's
// New refuse (a fixed one), Up first sweeps the stale topologies of its
// own names (netns.SweepStale): those of opts.Prefix, and once per
// process those of random prefixes, logging each one it removes.
func Up(t testing.TB, opts netns.Options) *netns.Topology {
	t.Helper()
	RequireRoot(t)
	sweepOnce.Do(func() {
		swept, err := netns.SweepStaleRandom()
		for _, s := range swept {
			logSwept(t, s)
		}
		if err != nil {
			t.Logf("netnstest: sweeping stale topologies: %v", err)
		}
	})
	if opts.Prefix != "" {
		s, err := netns.SweepStale(opts.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		if s != nil {
			logSwept(t, *s)
		}
	}
	topo, err := netns.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Error(err)
		}
	})
	return topo
}

var sweepOnce sync.Once

// logSwept says what a sweep removed, in the test's log and on standard
// error (go test shows a passing package's log only with -v).
func logSwept(t testing.TB, s netns.Stale) {
	msg := fmt.Sprintf("netnstest: removed the stale topology %s of process %s, which ended without removing it: %s", s.Prefix, s.Owner, strings.Join(s.Namespaces, " "))
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
}
