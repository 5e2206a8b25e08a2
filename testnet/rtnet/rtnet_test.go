package rtnet_test

import (
	"testing"

	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// TestConformance runs the link conformance suite on a real-time segment:
// Recv waits, and Wake and Close end the wait.
func TestConformance(t *testing.T) {
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		r := rtnet.New(t, 1)
		return linktest.Pair{A: r.Attach(t, testnet.EndpointConfig{}), B: r.Attach(t, testnet.EndpointConfig{})}
	})
}
