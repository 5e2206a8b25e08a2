package clock

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// A Duration prints as the same time.Duration does.
func TestDurationString(t *testing.T) {
	vals := []int64{0, 1, -1, 999, 1000, 1500, 999_999, 1_000_000, 1_500_000, 2_000_000_000,
		59_999_999_999, 60_000_000_000, 90_000_000_000, 3_600_000_000_000, 3_723_004_005_006,
		math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, r.Int64()>>r.IntN(63), -(r.Int64() >> r.IntN(63)))
	}
	for _, v := range vals {
		if got, want := Duration(v).String(), time.Duration(v).String(); got != want {
			t.Fatalf("Duration(%d).String() = %q, want %q", v, got, want)
		}
	}
	if got := fmt.Sprintf("heard from x for %v", 2*Second); got != "heard from x for 2s" {
		t.Errorf("%%v of 2 s: %q", got)
	}
}
