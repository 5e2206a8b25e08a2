//go:build race

package main

// raceEnabled: the race detector allocates on its own account, so the
// allocation counts mean nothing under it.
const raceEnabled = true
