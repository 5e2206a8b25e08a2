//go:build !race

package orca_test

const raceEnabled = false
