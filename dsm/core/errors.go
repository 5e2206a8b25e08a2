package core

import (
	"errors"
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// Errors of the thesis's API (§2.3), returned wrapped or as the types
// below so that callers can test them with errors.Is and errors.As.
var (
	// ErrSecondLock: acquiring a lock while holding (or requesting) one
	// (§2.3.3: "an error to acquire a second lock without releasing the
	// first").
	ErrSecondLock = errors.New("dsm: a lock is already held")
	// ErrNotHeld: releasing a lock this member does not hold.
	ErrNotHeld = errors.New("dsm: lock not held")
	// ErrRemoved: the segment was removed (§2.3.4: the descriptor is
	// invalid afterwards).
	ErrRemoved = errors.New("dsm: segment removed")
	// ErrExists: creating a segment under a key that is already in use.
	ErrExists = errors.New("dsm: segment key already in use")
	// ErrBarrierMismatch: members entered different barriers as their
	// n-th barrier (the program is not correctly written, thesis §5.2.1).
	ErrBarrierMismatch = errors.New("dsm: barrier ids differ between members")
	// ErrNotFixed: writing to a segment whose membership is not fixed yet
	// (selective join: the first barrier after its creation fixes it).
	ErrNotFixed = errors.New("dsm: segment membership not fixed yet")
	// ErrReadOnly: writing to a segment this member joined read-only
	// (JoinReadOnly).
	ErrReadOnly = errors.New("dsm: segment joined read-only")
	// ErrJoinClosed: joining a segment whose membership is fixed.
	ErrJoinClosed = errors.New("dsm: segment membership is fixed")
	// ErrLocksChannels: locks are not offered with per-segment channels
	// (docs/dsm.md, "Channels").
	ErrLocksChannels = errors.New("dsm: locks are not supported with per-segment channels")
	// ErrLateJoin: this process was admitted into the running group
	// (Views) after the computation began; it is not one of its members
	// (*LateJoinError says how far the computation was).
	ErrLateJoin = errors.New("dsm: joined the running computation too late")
)

// LateJoinError: a member of the running computation refused this
// process, which the reliable layer admitted into the group after the
// computation's members were fixed (the group's first view).
type LateJoinError struct {
	Self    frame.MemberID // the process refused
	By      frame.MemberID // the member that refused it
	Crossed uint32         // the barriers By had crossed when it saw Self join
}

func (e *LateJoinError) Error() string {
	passed := "has not crossed its first barrier yet"
	if e.Crossed > 0 {
		passed = fmt.Sprintf("has passed barrier %d", e.Crossed)
	}
	return fmt.Sprintf("dsm: member %d joined the running group after the computation began: the computation "+
		"(member %d) %s and its members are the group's first view; joining later needs a snapshot of the "+
		"segments, which is not supported (docs/dsm.md, issue 21)", e.Self, e.By, passed)
}

func (e *LateJoinError) Unwrap() error { return ErrLateJoin }

// Geometry is a segment's shape: how many locations, of how many bytes.
type Geometry struct {
	Locations    int
	LocationSize int
}

func (g Geometry) String() string {
	return fmt.Sprintf("%d locations of %d bytes", g.Locations, g.LocationSize)
}

// Bytes is the size of the segment's memory.
func (g Geometry) Bytes() int { return g.Locations * g.LocationSize }

// GeometryError: a join (or a peer's announcement) whose geometry differs
// from the segment's creator's.
type GeometryError struct {
	Key     uint32
	Creator frame.MemberID // who announced Have (0 when unknown)
	Have    Geometry       // the segment as it exists
	Want    Geometry       // the geometry asked for
}

func (e *GeometryError) Error() string {
	return fmt.Sprintf("dsm: segment %d: geometry %v differs from its creator's (member %d): %v", e.Key, e.Want, e.Creator, e.Have)
}

// RangeError: an access to locations outside a segment.
type RangeError struct {
	Key       uint32
	Location  int // first location accessed
	Count     int // number of locations accessed
	Locations int // the segment's number of locations
}

func (e *RangeError) Error() string {
	if e.Count == 1 {
		return fmt.Sprintf("dsm: segment %d: location %d is outside the segment's %d locations", e.Key, e.Location, e.Locations)
	}
	return fmt.Sprintf("dsm: segment %d: locations %d..%d are outside the segment's %d locations", e.Key, e.Location, e.Location+e.Count-1, e.Locations)
}

// SizeError: a size that does not fit — a location larger than a frame
// can carry, or a value whose length is not the location size.
type SizeError struct {
	What string // what was measured, e.g. "location size", "value"
	Size int
	Want string // the limit, e.g. "at most 1452 bytes (one frame)"
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("dsm: %s is %d bytes, want %s", e.What, e.Size, e.Want)
}
