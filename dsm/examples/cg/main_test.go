package main

import (
	"flag"
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
			args := append([]string{"-n", "41", "-iters", "25", "-sim", "-procs", fmt.Sprint(procs), "-loss", "0.05", "-simseed", fmt.Sprint(procs), "-verify"}, extra...)
			ok, out, err := harness.Verified("cg", setup, args...)
			if err != nil || ok != procs {
				t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
			}
		}
	}
}

// A rank over -iface runs at one P unless told otherwise: its matrix-vector
// product lasts microseconds, and with a P per CPU every hand-over between
// the program and its group's loop woke another thread (docs/dsm-history.md,
// "cg's iteration at rank 0").
func TestOneProcByDefault(t *testing.T) {
	fs := flag.NewFlagSet("cg", flag.ContinueOnError)
	o := harness.Flags(fs)
	setup(fs, o)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.GOMAXPROCS != 1 {
		t.Errorf("-gomaxprocs defaults to %d, want 1", o.GOMAXPROCS)
	}
	if f := fs.Lookup("gomaxprocs"); f.DefValue != "1" {
		t.Errorf("-h shows -gomaxprocs's default as %q, want 1", f.DefValue)
	}
}
