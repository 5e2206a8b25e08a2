package main

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/orca/examples/internal/harness"
)

// The parallel run on the simulated segment, with 5% of frames lost at
// every receiver, gives exactly the sequential result, for every process
// count (rank 0 holds the result).
func TestVerifyOnLossySimulator(t *testing.T) {
	for procs := 1; procs <= 4; procs++ {
		args := []string{"-n", "40", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-verify"}
		ok, out, err := harness.Verified("asp", setup, args...)
		if err != nil || ok != 1 {
			t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
		}
	}
}
