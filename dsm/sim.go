package dsm

import (
	"time"

	"github.com/rbcast/rbcast/testnet"
)

// SimConfig describes a simulated run: Members nodes on one simulated
// segment (testnet) in virtual time.
type SimConfig struct {
	// Members is the number of nodes (ranks 0..Members-1).
	Members int
	// Seed drives every random choice of the network; a run is a
	// function of its SimConfig and program.
	Seed uint64
	// In impairs every frame arriving at every node (loss, duplication,
	// reordering...).
	In testnet.Impairment
	// MTU of the simulated links; 0 means testnet.DefaultMTU.
	MTU int
	// Node configures every node. Node.Group's protocol fields (Mode,
	// Window, timers, MaxPayload) are used; its membership fields are set
	// by Simulate.
	Node Config
	// UnreliableLoss is the probability that an unreliable write's message
	// is dropped at its sender (the reliable layer has no unreliable
	// datagram, so Simulate models DSM_WRT_UNREL's loss here).
	UnreliableLoss float64
	// Timeout bounds the run in virtual time; 0 means 10 minutes.
	Timeout time.Duration
}

// SimResult is what a simulated run measured.
type SimResult struct {
	// Elapsed is the virtual time from start until every program returned
	// and every node exited.
	Elapsed time.Duration
	// Stats are each rank's counters at the end.
	Stats []Stats
}

// Simulate runs program once per member, each on its own node, on a
// simulated segment in virtual time, and returns when every program has
// returned (the node is exited for it if the program did not). The error
// joins every program's error with its rank, or says which members were
// blocked where if the run deadlocked or timed out.
//
// Programs are ordinary blocking code (Write, Barrier, Lock...), each on a
// goroutine of its own, but only one goroutine runs at a time: a program
// runs until it blocks in the node, then hands control back to the
// scheduler, which resumes the next runnable program in rank order, and
// advances virtual time by one network event only when every program is
// blocked. So a run is deterministic: the same SimConfig and program give
// the same result. Computation between two calls on the node takes no
// virtual time. A program must not block on anything but its node (no
// channels between programs, no sleeps).
func Simulate(cfg SimConfig, program func(n *Node) error) (SimResult, error) {
	return SimResult{}, errNotImplemented
}
