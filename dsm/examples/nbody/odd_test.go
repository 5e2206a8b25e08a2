package main

import (
	"slices"
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// Sizes that are negative, zero or too large for memory are refused,
// naming the flag and its range, before anything is computed: they used
// to panic (a slice of a negative or overflowing length) or run out of
// memory.
func TestOddInputs(t *testing.T) {
	clitest.Runner{}.Run(t, slices.Concat(
		clitest.ExampleCases("nbody"),
		clitest.Bounded("n", 1, 1048576),
		clitest.Bounded("steps", 0, 1000000000),
	))
}
