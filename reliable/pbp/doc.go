// Package pbp is the PBP reliable broadcast protocol as a deterministic
// state machine: PBP2 (negative acknowledgements, the default) and PBP1
// (positive acknowledgements), after Auld's thesis, chapter 3 (figs.
// 3.1–3.10). A member delivers every message of every other live member
// exactly once, in the order its sender proposed them.
//
// The core does no I/O, reads no clock and starts no goroutine (DESIGN.md,
// decision 1): the runtime feeds it received frames (Step), application
// messages (Propose) and the time (Tick), carries out what Ready returns
// (frames to send, messages to deliver, membership events) and calls
// Advance, then waits until Deadline or the next frame. The same core runs
// live, in the simulator (testnet) and in pcap-replay. docs/protocols.md
// describes the protocol, its timers and where it departs from the thesis.
package pbp
