package testnet_test

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet"
)

// newPair attaches two endpoints to a fresh segment; the pair settles by
// running the segment until nothing is pending.
func newPair(t *testing.T, mtu int) (a, b *testnet.Endpoint, settle func()) {
	t.Helper()
	n, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err = n.Attach(testnet.EndpointConfig{MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	b, err = n.Attach(testnet.EndpointConfig{MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, func() {
		for n.Step() {
		}
	}
}

// TestEndpointConformance runs the link conformance suite on endpoints,
// at the smallest MTU rbcast accepts, 1500 and jumbo.
func TestEndpointConformance(t *testing.T) {
	for _, mtu := range []int{576, 1500, 9000} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				a, b, settle := newPair(t, mtu)
				return linktest.Pair{A: a, B: b, Settle: settle}
			})
		})
	}
}
