//go:build race

package orca_test

// raceEnabled: the race detector allocates on its own account, so the
// allocation counts mean nothing under it.
const raceEnabled = true
