// Package dsm is BDSM, the broadcast distributed shared memory of Auld's
// thesis (ch. 2 and 5), on top of rbcast's FIFO reliable broadcast.
//
// Every member holds a full copy of every segment it has attached. A
// segment is an array of equally sized locations, created by one member
// under a key and joined by the others with the same geometry. A write
// changes the local copy at once and is broadcast as an update; updates
// are applied by every other member, in the writer's order per segment
// (axiom 2.3), straight from the received frame into segment memory.
// Reads are local. Updates of one segment are buffered into messages no
// larger than one frame (Config.Unbuffered switches that off, the thesis's
// BUFFERWRITES=0); every buffer is flushed before any synchronisation
// message leaves.
//
// Synchronisation is by message passing, not by memory (thesis §5.1.1):
// Barrier waits for every other live member's barrier message, and
// Lock/Unlock are Ricart–Agrawala mutual exclusion with every message
// broadcast. FIFO delivery then gives the ordering the model needs: a
// member that crosses a barrier or acquires a lock has seen every update
// its peers wrote before their barrier or lock message (axioms 2.6, 2.7,
// 2.11), so data-race-free programs see sequentially consistent memory
// (theorem 2.2) — data-race-free in the thesis's sense (definition 2.2):
// writes by different members separated by barriers. BDSM is not causal:
// with three or more members, data handed from one lock holder to the
// next can be read stale (docs/dsm.md); a group in reliable.Total order
// does not have that problem.
//
// The API follows the thesis's §2.3:
//
//	dsm_init          Join (one process per host), or dsmsim.Run (N in one process)
//	dsm_seg_at        Node.CreateSegment (DSM_CREATE), Node.JoinSegment (DSM_JOIN)
//	dsm_write         Segment.Write; DSM_WRT_UNREL: Segment.WriteUnreliable
//	dsm_bulk_write    Segment.WriteBulk, Segment.WriteBulkUnreliable
//	dsm_read          Segment.Read
//	dsm_ptr_read      Segment.View, Segment.Location (read-only views)
//	dsm_barrier       Node.Barrier (total), Node.PartialBarrier (num_procs);
//	                  with Config.Channels also Node.ChannelBarrier (§7.2.3's
//	                  markers alone: waits only for the writers of this
//	                  member's segment channels, not a global synchronisation)
//	dsm_lock_acquire  Node.Lock
//	dsm_lock_release  Node.Unlock
//	dsm_remove        Segment.Remove
//	dsm_exit          Node.Exit
//
// Structure: the protocol logic — segment memory, update buffers and their
// encoding, barrier counting, the Ricart–Agrawala lock state — is the
// deterministic core in dsm/core (no goroutines, no time, no randomness).
// This package is the thin runtime over it: Join drives the core over a
// reliable.Group (updates are applied in Config.Deliver, on the group's
// event loop, from the received frame). Env and Host are the seam for a
// program that drives the reliable layer itself: dsm/dsmsim runs N nodes
// over reliable.Drivers on the simulated segment in virtual time, so that
// a program that only Joins does not link the simulator. The message
// encoding is documented in docs/dsm.md.
package dsm
