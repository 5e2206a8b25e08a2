package dsm

import (
	"context"
	"errors"

	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
)

// Errors; see dsm/core for their meaning.
var (
	ErrSecondLock      = core.ErrSecondLock
	ErrNotHeld         = core.ErrNotHeld
	ErrRemoved         = core.ErrRemoved
	ErrExists          = core.ErrExists
	ErrBarrierMismatch = core.ErrBarrierMismatch
	// ErrClosed: the node has exited (or its group stopped).
	ErrClosed = errors.New("dsm: node has exited")
)

// Error types; see dsm/core.
type (
	Geometry      = core.Geometry
	GeometryError = core.GeometryError
	RangeError    = core.RangeError
	SizeError     = core.SizeError
)

var errNotImplemented = errors.New("dsm: not implemented yet")

// DefaultOutboxLimit is how many DSM messages may wait to be sent before
// writes block (back-pressure).
const DefaultOutboxLimit = 64

// Config configures a Node.
type Config struct {
	// Group configures the reliable group under the node (Join only; the
	// simulator builds its own). Deliver and OnEvent must be nil: the node
	// sets them.
	Group reliable.Config
	// Unbuffered sends every write as a message of its own at once instead
	// of collecting a segment's writes into frame-sized messages (the
	// thesis's BUFFERWRITES=0). Buffering is on by default.
	Unbuffered bool
	// MaxMessage lowers the largest DSM message below what the group
	// carries in one frame; 0 means the group's MaxMessage.
	MaxMessage int
	// OutboxLimit is how many messages may wait to be sent before Write
	// blocks; 0 means DefaultOutboxLimit.
	OutboxLimit int
}

// Node is one member's BDSM system: its copy of the shared segments, its
// update buffers, its barrier and lock state. Methods are safe for
// concurrent use, but BDSM's model is one program thread per member: the
// ordering guarantees are about the program order of that thread.
type Node struct{}

// Join joins the reliable group described by cfg.Group over l (the
// thesis's dsm_init; registration when cfg.Group.Members is empty, with
// exactly one member having cfg.Group.Server) and returns the member's
// node once the group has started.
func Join(ctx context.Context, l link.Link, cfg Config) (*Node, error) {
	return nil, errNotImplemented
}

// Rank is this member's index, 0..Size()-1, in the order of member ids
// (dsm_init's return value).
func (n *Node) Rank() int { return 0 }

// Size is the number of members the group started with (dsm_init's
// *numprocs).
func (n *Node) Size() int { return 0 }

// Self is this member's id in the reliable group.
func (n *Node) Self() frame.MemberID { return 0 }

// MaxMessage is the largest DSM message: a location may be at most
// MaxMessage()-core.UpdateOverhead bytes.
func (n *Node) MaxMessage() int { return 0 }

// CreateSegment creates the segment key with the given geometry (dsm_seg_at
// with DSM_CREATE) and announces it to the group; its memory starts zeroed.
// A key already created (here or, as far as this member has seen, by
// another member) is ErrExists; a location larger than one message can
// carry is a *SizeError.
func (n *Node) CreateSegment(key uint32, locations, locationSize int) (*Segment, error) {
	return nil, errNotImplemented
}

// JoinSegment attaches the segment key (dsm_seg_at with DSM_JOIN). It
// waits until the creator's announcement has been seen (or ctx ends), then
// checks the geometry: one that differs from the creator's is a
// *GeometryError showing both. The segment holds every update already
// received for it.
func (n *Node) JoinSegment(ctx context.Context, key uint32, locations, locationSize int) (*Segment, error) {
	return nil, errNotImplemented
}

// Barrier flushes every segment's buffered writes, broadcasts this
// member's arrival at barrier id and waits until every other live member
// has arrived at it too (dsm_barrier, total barrier). Members must call
// their barriers in the same order with the same ids; a member that
// arrived at a different id as its n-th barrier makes this return an
// error wrapping ErrBarrierMismatch. Members that left or failed are not
// waited for.
func (n *Node) Barrier(ctx context.Context, id int) error { return errNotImplemented }

// Lock acquires lock id (dsm_lock_acquire) by Ricart–Agrawala over
// broadcast: it flushes every segment's buffer, broadcasts a request and
// waits for every other live member's reply. On return every update the
// other members wrote before replying has been applied here. Holding (or
// requesting) another lock is ErrSecondLock. If ctx ends first Lock
// returns ctx.Err() and the request is withdrawn when the lock would have
// been granted.
func (n *Node) Lock(ctx context.Context, id int) error { return errNotImplemented }

// Unlock releases lock id (dsm_lock_release), flushing the buffers and
// answering the requests deferred while it was held. Releasing a lock not
// held is ErrNotHeld.
func (n *Node) Unlock(id int) error { return errNotImplemented }

// Exit flushes everything, removes every segment and leaves the group
// (dsm_exit); it returns once what was sent is acknowledged or the group's
// CloseTimeout passed. Every later call on the node returns ErrClosed.
func (n *Node) Exit() error { return errNotImplemented }

// Stats are a node's counters.
type Stats struct {
	// Writes counts locations written (reliably) by this member; Updates
	// counts update messages it sent carrying them, UpdateBytes their size.
	Writes, Updates, UpdateBytes uint64
	// UnreliableWrites counts locations written with WriteUnreliable or
	// WriteBulkUnreliable; UnreliableUpdates the messages carrying them.
	UnreliableWrites, UnreliableUpdates uint64
	// Barriers, LockRequests and LockReplies count messages sent.
	Barriers, LockRequests, LockReplies uint64
	// Applied counts locations updated here from other members' messages,
	// AppliedUpdates the messages.
	Applied, AppliedUpdates uint64
	// Messages and Bytes count every DSM message this member sent.
	Messages, Bytes uint64
	// BadMessages counts received messages that failed to decode or named
	// something that does not exist here (dropped, with no effect).
	BadMessages uint64
	// Group is the reliable layer's counters.
	Group reliable.Stats
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats { return Stats{} }

// Segment is one attached segment (the thesis's dsm_id).
type Segment struct{}

// Key is the segment's key.
func (s *Segment) Key() uint32 { return 0 }

// Geometry is the segment's number of locations and location size.
func (s *Segment) Geometry() Geometry { return Geometry{} }

// Write sets location loc to value, whose length must be the location
// size, and queues the update (dsm_write with DSM_WRT_REL). The local copy
// changes at once; the update goes out when the segment's buffer is full,
// at the next synchronisation, at Remove or Exit — or at once when
// unbuffered. It blocks only while Config.OutboxLimit messages wait to be
// sent. A loc outside the segment is a *RangeError, a wrong value length
// a *SizeError.
func (s *Segment) Write(loc int, value []byte) error { return errNotImplemented }

// WriteBulk writes len(values)/LocationSize consecutive locations from loc
// (dsm_bulk_write): it flushes the segment's buffer, then sends the range
// in as few messages as fit. len(values) must be a multiple of the
// location size. It returns the number of locations written.
func (s *Segment) WriteBulk(loc int, values []byte) (int, error) { return 0, errNotImplemented }

// WriteUnreliable is Write with DSM_WRT_UNREL: the update bypasses the
// segment's buffer and is sent at once in a message of its own, ordered
// with nothing; other members may or may not see it. (The reliable layer
// has no unreliable datagram yet, so over Join it is in fact delivered;
// Simulate can drop them, see SimConfig.UnreliableLoss.)
func (s *Segment) WriteUnreliable(loc int, value []byte) error { return errNotImplemented }

// WriteBulkUnreliable is WriteBulk with DSM_WRT_UNREL.
func (s *Segment) WriteBulkUnreliable(loc int, values []byte) (int, error) {
	return 0, errNotImplemented
}

// Read copies location loc into dst (dsm_read) and returns dst[:size];
// dst must hold at least the location size.
func (s *Segment) Read(loc int, dst []byte) ([]byte, error) { return nil, errNotImplemented }

// View is the segment's memory, read-only (dsm_ptr_read of location 0):
// location i is View()[i*size : (i+1)*size]. Incoming updates change it
// concurrently, so read through it only where the program has no data
// race on the locations read (thesis §2.3): after a barrier or under a
// lock that orders the writes. Writing into it is a bug: such a change is
// never propagated. Nil once the segment is removed.
func (s *Segment) View() []byte { return nil }

// Location is location loc of View, read-only (dsm_ptr_read); nil if loc
// is outside the segment.
func (s *Segment) Location(loc int) []byte { return nil }

// Remove flushes the segment's buffered writes to the group and detaches
// the segment (dsm_remove): incoming updates for it are ignored from then
// on and every later call on s returns ErrRemoved. Other members keep
// their copies.
func (s *Segment) Remove() error { return errNotImplemented }

// Float64 helpers: a location of 8 bytes holds one float64, little-endian
// (the byte order of every host this runs on; Float64s relies on it).

// WriteFloat64 is Write of v into an 8-byte location.
func (s *Segment) WriteFloat64(loc int, v float64) error { return errNotImplemented }

// WriteFloat64s is WriteBulk of vs into consecutive 8-byte locations from
// loc; it returns the number of locations written.
func (s *Segment) WriteFloat64s(loc int, vs []float64) (int, error) { return 0, errNotImplemented }

// ReadFloat64 is Read of an 8-byte location as a float64.
func (s *Segment) ReadFloat64(loc int) (float64, error) { return 0, errNotImplemented }

// Float64s is View as float64s (nil unless the location size is a
// multiple of 8), under View's rules: read-only, and only where the
// program has no data race on what it reads.
func (s *Segment) Float64s() []float64 { return nil }
