package simtest

import (
	"fmt"
	"github.com/rbcast/rbcast/internal/seeds"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/testnet"
)

// ShortSeeds is how many seeds a run under -short has.
const ShortSeeds = 200

// Seeds returns how many seeds to run: RBCAST_SEEDS if set, else
// ShortSeeds under -short, else def (internal/seeds).
func Seeds(t testing.TB, def int) int { return seeds.Count(t, def, ShortSeeds) }

// RunSeeds runs seeds 1 to Seeds(t, def) as parallel subtests named
// seed=N. run plays one seed and returns its scenario (printed on
// failure) and verdict. A failing seed prints the command that runs it
// alone.
func RunSeeds(t *testing.T, def int, run func(t *testing.T, seed uint64) (scenario fmt.Stringer, verdict error)) {
	n := Seeds(t, def)
	pkg := packageDir()
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s, err := run(t, seed)
			if err != nil {
				t.Fatalf("%v\nscenario: %v\nre-run: %s", err, s, Rerun(pkg, t.Name(), seed))
			}
		})
	}
}

// Rerun is the command that runs one seed of test alone (test is the
// subtest's name, TestSim/seed=N), in package pkg.
func Rerun(pkg, test string, seed uint64) string {
	parent := test
	if i := strings.LastIndex(test, "/"); i >= 0 {
		parent = test[:i]
	}
	return fmt.Sprintf("RBCAST_SEEDS=%d go test %s -run '^%s$/^seed=%d$' -v", seed, pkg, parent, seed)
}

// packageDir is the test's package as a go test argument, relative to
// the module root (./reliable/pbp): a test runs in its package's
// directory.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// Deterministic plays seeds 1 to seeds twice each with a hash of the
// segment's trace: the same seed must give the same frames at the same
// virtual instants (DESIGN.md, decision 1), or a failing seed would not
// replay. run plays one seed with trace seeing every event and returns
// its verdict.
func Deterministic(t *testing.T, seeds int, run func(t testing.TB, seed uint64, trace func(testnet.Event)) error) {
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		var sums, events [2]uint64
		for i := range sums {
			h := testnet.NewTraceHash()
			if err := run(t, seed, h.Add); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			sums[i], events[i] = h.Sum(), h.Events()
		}
		if sums[0] != sums[1] || events[0] != events[1] {
			t.Fatalf("seed %d: trace %x (%d events) then %x (%d events)", seed, sums[0], events[0], sums[1], events[1])
		}
	}
}
