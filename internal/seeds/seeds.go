// Package seeds says how many seeds a seeded simulation test runs: the
// RBCAST_SEEDS environment variable when set (a positive number), else a
// smaller count under go test -short, else the test's default. Every
// package's simulation tests share it, so RBCAST_SEEDS means the same
// everywhere.
package seeds

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Count returns how many seeds to run: RBCAST_SEEDS if set, else short
// under -short, else def. A malformed RBCAST_SEEDS fails the test.
func Count(t testing.TB, def, short int) int {
	t.Helper()
	n, err := count(os.Getenv("RBCAST_SEEDS"), testing.Short(), def, short)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func count(env string, isShort bool, def, short int) (int, error) {
	if env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("RBCAST_SEEDS=%q: want a positive number", env)
		}
		return n, nil
	}
	if isShort {
		return short, nil
	}
	return def, nil
}
