//go:build !race

package files_test

const raceOn = false
