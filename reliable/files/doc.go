// Package files is rbcast's file dissemination: one file to every member
// of a segment, after Liu & Russell's IBRMP (../shared/seeds/003, §III):
// each file's identity (id, name, size, SHA-256, block size) is offered
// before its data, its blocks are multicast once at the pacer's rate,
// what a receiver lost is repaired point-to-point to it (or once to the
// group when several lost it), and the end of the pass names the
// receivers of the snapshot still awaited, so that a receiver joining
// later (a ghost) never delays the sender's verdict. The pass runs a
// window ahead of the median receiver, counted over all the files sent,
// not per file: a run of files each shorter than the window is paced by
// the receivers too, not by the pacer alone (issue 20's fig. 5b). The
// design, and where it departs from IBRMP, is docs/protocols.md, "Files
// (IBRMP)"; the frames (0x40–0x44) are docs/wire-format.md's.
//
// Core is a deterministic state machine on the one core contract
// (reliable/core): no goroutines, sockets, clock or randomness. It never
// holds a file: its driver gives it a Source per file sent and a Sink for
// the files received (over files live, over memory in the simulator).
//
// This package imports frame, reliable/clock, reliable/core and pure
// parts of the standard library only.
package files
