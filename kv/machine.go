// Package kv is a replicated key-value service on rbcast's total order
// (issue 23, ordered mode): every replica applies the same requests in
// the same order, at the Safe level, to a deterministic state machine.
// Requests carry a client id and a sequence number; a replicated session
// table answers a retried request with its first result, so a request is
// applied at most once however often a client retries or fails over.
// Reads go through the order too (linearizable); a local read is the
// explicitly weaker alternative. Thesis mode (ThesisNode, ServeThesis)
// is the thesis's own design instead of the total order: request lists
// in BDSM, execution by real-time clocks under stated timing
// assumptions. docs/kv.md has the design.
package kv

// StateMachine is any deterministic state machine that replicas keep
// identical by applying the same commands in the same order.
type StateMachine interface {
	// Apply executes one command and returns its result. It must be a
	// function of the machine's state and the command only: no clocks,
	// no randomness, no map iteration order leaking into the result.
	Apply(cmd []byte) []byte
	// Snapshot encodes the whole state; Restore on another machine of
	// the same kind makes it identical.
	Snapshot() []byte
	// Restore replaces the state with a Snapshot's; an error says what
	// in the snapshot was malformed, and leaves the state as it was.
	Restore(snap []byte) error
}
