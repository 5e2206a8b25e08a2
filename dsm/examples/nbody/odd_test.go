package main

import (
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// Sizes that are negative, zero or too large for memory are refused,
// naming the flag and its range, before anything is computed: they used
// to panic (a slice of a negative or overflowing length) or run out of
// memory.
func TestOddInputs(t *testing.T) {
	clitest.Runner{}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "Usage of nbody:"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"extra"}, Code: 2, Want: `nbody: unexpected argument "extra"`},
		{Args: []string{"-n", "0"}, Code: 1, Want: "-n is 0, want 1..1048576"},
		{Args: []string{"-n", "-1"}, Code: 1, Want: "-n is -1, want 1..1048576"},
		{Args: []string{"-n", "99999999"}, Code: 1, Want: "-n is 99999999, want 1..1048576"},
		{Args: []string{"-steps", "-1"}, Code: 1, Want: "-steps is -1, want 0..1000000000"},
		{Args: []string{"-steps", "9999999999"}, Code: 1, Want: "-steps is 9999999999, want 0..1000000000"},
		{Args: []string{"-procs", "0"}, Code: 1, Want: "-procs is 0, want at least 1"},
		{Args: []string{"-sim", "-procs", "2", "-loss", "2"}, Code: 1, Want: "-loss is 2, want a probability in [0, 1)"},
		{Args: []string{"-iface", "rbuxnosuch0", "-procs", "2", "-rank", "5"}, Code: 1, Want: "-iface needs -rank in 0..1 (-procs 2); it is 5"},
	})
}
