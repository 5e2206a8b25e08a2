// Package seq is the sequencer protocol for totally-ordered reliable
// broadcast as a deterministic state machine, after Tanenbaum, Kaashoek &
// Bal (seed 004), section "Reliable Broadcasting": one member, the
// sequencer, numbers every message; everyone delivers in number order and
// asks the sequencer for what it missed. Method 1 (request point to point,
// SeqData broadcast), method 2 (request broadcast, short Accept) and the
// hybrid of the two by payload size; the history buffer with piggybacked
// acknowledgements and status; duplicate requests recognised by unique id;
// and sequencer failure: the survivors elect the lowest live id and agree
// on the last numbered message before anything new is numbered.
//
// The core does no I/O, reads no clock and starts no goroutine (DESIGN.md,
// decision 1): the runtime feeds it received frames (Step), application
// messages (Propose) and the time (Tick), carries out what Ready returns
// (frames, deliveries in total order, events) and calls Advance, then waits
// until Deadline or the next frame. docs/protocols.md ("Sequencer")
// describes the protocol, its guarantee and what lies outside it.
package seq
