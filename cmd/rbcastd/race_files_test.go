//go:build race

package main

// raceOn: the test binary (and so every rbcastd a netns test runs) has
// the race detector, several times slower.
const raceOn = true
