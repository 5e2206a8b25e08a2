// Package archtest checks the rules of DESIGN.md as tests. With `go list
// -deps`: imports point downward only, frame imports nothing of ours, the
// protocol cores touch no I/O (so the same core runs live, in the
// simulator and in pcap-replay) and the core contract imports only frame
// and the clock; outside reliable/ only named core drivers
// (internal/replay) import a core rather than reliable's API; only named
// packages import link; no program links package testing, nor the
// simulated segment unless it is a simulator; every package has a doc
// comment. With go/ast: cores start no goroutine, use no channel and keep
// no package state. With go/types: no core ranges over a map (whose order
// Go randomises), and dsm and orca use a link only as Join's parameter.
// Each rule has a test that plants a violation and sees it reported.
package archtest
