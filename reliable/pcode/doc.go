// Package pcode is PCODE (Bruck, Dolev, Ho, Orni & Strong, "PCODE: an
// efficient and reliable collective communication protocol for
// unreliable broadcast domains") as a deterministic state machine on the
// one core contract (reliable/core): reliable collectives for SPMD
// programs, driven by the program's own calls.
//
// A program is a global program (§2.1): at each step i every processor
// calls multicast(m, T), request(q, T) or skip, and a correct program
// matches every multicast of p at step i with a request(p, T) at step i
// at every member of T (A1). PCODE uses that: a request that finds no
// ready message NACKs its source after half a round trip (figs. 2–5), so
// a lost last message of a round costs a short timeout, and nothing else
// pays for reliability. On top of P0 (figs. 2–5) it has P1's bounded
// buffer of sent messages, kept until every member's personal counter
// vector (the ack vector of every PCODE frame) covers them (§4), the
// GlobalCounter and FLOW_WINDOW with PROGRESS (§5.1–5.2), early loss
// detection by personal and global gaps (§5.3), the early-message buffer
// (§5.4), periodic STATUS (§5.5), a point-to-point stream for a single
// target (§5.6) and the three NACK kinds with timers from the measured
// round trip (§5.7). docs/protocols.md ("PCODE") has the design,
// including what the paper leaves open.
//
// Program calls reach the core as ops (AppendOp) through Propose; a
// request's delivery is its matched message, in request order. One
// failure stops the program (the paper's fault model): a member this one
// waits on and silent past FailureTimeout, or a request whose matched
// message carries another step or target set (A1 violated), halts the
// core with SelfRemoved, its Reason the error, and a PcodeAbort frame
// stops the others. The collectives (Bcast, Allgather, Alltoall,
// Barrier) are in package collective.
//
// The core does no I/O, reads no clock and starts no goroutine (DESIGN.md,
// decision 1).
package pcode
