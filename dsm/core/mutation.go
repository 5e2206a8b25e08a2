package core

// mutation turns off a part of the channel protocol, so that the
// mutation tests (dsm/mutation_test.go, built with -tags dsmmutate) can
// show that the axiom checks fail without it. It is zero in every core
// but theirs: Config's field is unexported and only the tagged build has
// Mutate, which sets it, so no program can turn WC or BC off.
type mutation uint8

const (
	// mutationNoWC drops the wait condition (def. 7.3) on the segment
	// channels: a peer's messages there after its marker for the barrier
	// this member waits at are handled at once, never held (receiveOn).
	// The global channel still holds: its barrier bookkeeping (the
	// alternating bit) relies on a peer's arrivals never running more
	// than one barrier ahead, and without that the run fails on a
	// mismatch instead of reaching the axiom check.
	mutationNoWC mutation = 1 << iota
	// mutationNoMarkers drops the markers from the barrier condition
	// (def. 7.2): a barrier waits for the barrier messages on the global
	// channel only, not for the markers on the segment channels
	// (markerMissing). The markers are still sent, so WC still holds
	// what follows them.
	mutationNoMarkers
)
