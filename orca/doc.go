// Package orca is shared data-objects replicated on every member of a
// group and kept alike by the group's total order: the object layer of
// Tanenbaum, Kaashoek and Bal's broadcast system and the model of their
// Orca language ("Object Management", "Orca"), on rbcast's
// reliable.Total.
//
// A Class declares a state type and its operations: Read runs on the
// local replica without communication; Write is broadcast in the total
// order and applied by every replica in that order, its result returned
// to the caller; When gives either a guard, on which it blocks (a guarded
// write is queued at every replica and retried in arrival order after
// each write to its object, so every replica decides alike). New makes a
// member's replica of a named object; Op.Call runs an operation, Op.Go
// starts a write without waiting for it. Operations are sequentially
// consistent; they must be deterministic (Config.Check catches a replica
// that diverges). Join runs a node over a link; orca/orcasim runs N nodes
// on the simulated segment. History records runs and checks them
// (Agree, Check); Snapshot and Restore are the state transfer a joining
// member needs.
//
// docs/orca.md has the whole story: the API against the paper, why
// registration rather than code generation, guards and cancellation, the
// consistency guarantee and how it is tested, the determinism rule, the
// messages, state transfer, the programs.
package orca
