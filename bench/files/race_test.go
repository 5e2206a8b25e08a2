//go:build race

package files_test

// raceOn: the test binary has the race detector, whose checks a CPU
// profile puts outside the functions that call them.
const raceOn = true
