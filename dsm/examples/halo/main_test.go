package main

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
)

// The parallel run on the simulated segment, with 5% of frames lost at
// every receiver, gives exactly the sequential result, for every process
// count (every rank holds the result).
func TestVerifyOnLossySimulator(t *testing.T) {
	for procs := 1; procs <= 4; procs++ {
		for _, extra := range [][]string{nil, {"-unbuffered"}} {
			args := append([]string{"-n", "37", "-iters", "20", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-verify"}, extra...)
			ok, out, err := harness.Verified("halo", setup, args...)
			if err != nil || ok != procs {
				t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
			}
		}
	}
}

// The channel mode gives the sequential result too (segments shared by
// neighbour pairs only: each pair a reliable group of two).
func TestChannelsVerifyOnLossySimulator(t *testing.T) {
	for procs := 1; procs <= 5; procs++ {
		for _, cb := range []bool{false, true} {
			args := []string{"-n", "37", "-iters", "20", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-channels", "-verify"}
			if cb {
				// Channel barriers in the loop (total ones below 4
				// ranks for jacobi, 3 for halo).
				args = append(args, "-channel-barriers")
			}
			ok, out, err := harness.Verified("halo", setup, args...)
			if err != nil || ok != procs {
				t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
			}
		}
	}
}
