// Package netnstest is testnet/netns for tests: Up builds a topology that
// the test's cleanup removes, and RequireRoot skips a test that cannot
// build one. It is apart from netns so that tools built on netns (the
// benchmark programs) do not link package testing.
package netnstest

import (
	"os"
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
func Up(t testing.TB, opts netns.Options) *netns.Topology {
	t.Helper()
	RequireRoot(t)
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
