// Package archtest checks the rules of DESIGN.md: with `go list -deps`,
// that imports point downward only, frame imports nothing of ours and the
// protocol cores touch no I/O, so the same core runs live, in the
// simulator and in pcap-replay; with go/ast, that cores start no
// goroutine, use no channel and keep no package state; with go/types, that
// no core ranges over a map (whose order Go randomises).
package archtest
