package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
)

// The parallel run on the simulated segment, with 5% of frames lost at
// every receiver, gives exactly the sequential result, for every process
// count (every rank holds the result).
func TestVerifyOnLossySimulator(t *testing.T) {
	for procs := 1; procs <= 4; procs++ {
		for _, extra := range [][]string{nil, {"-unbuffered"}} {
			args := append([]string{"-n", "41", "-iters", "30", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-verify"}, extra...)
			ok, out, err := harness.Verified("jacobi", setup, args...)
			if err != nil || ok != procs {
				t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
			}
		}
	}
}

// The channel mode (each rank's block a segment of its own, joined by its
// neighbours) gives the sequential result too, and refuses what it
// cannot do.
func TestChannelsVerifyOnLossySimulator(t *testing.T) {
	for procs := 1; procs <= 5; procs++ {
		for _, cb := range []bool{false, true} {
			args := []string{"-n", "41", "-iters", "30", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-channels", "-verify"}
			if cb {
				// Channel barriers in the loop (total ones below 4
				// ranks for jacobi, 3 for halo).
				args = append(args, "-channel-barriers")
			}
			ok, out, err := harness.Verified("jacobi", setup, args...)
			if err != nil || ok != procs || !strings.Contains(out, "mode=sim+channels") {
				t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "41", "-eps", "1e-9"}, "-eps 1e-09: convergence is tested over the whole x, which a rank does not hold with -channels (use -eps 0)"},
		{[]string{"-n", "5"}, "-channels needs at least 2 rows per rank (row i reads x[i-2..i+2] from the neighbours' blocks only): -n 5, -procs 3"},
	} {
		_, _, err := harness.Verified("jacobi", setup, append(c.args, "-sim", "-procs", "3", "-channels", "-verify")...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to say %q", c.args, err, c.want)
		}
	}
}
