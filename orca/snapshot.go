package orca

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
)

// State transfer: a replica's whole state at a place in the order, for a
// member that joins a running group to start from instead of from the
// objects' initial states (docs/orca.md, "State transfer"). Snapshot
// encodes it where the order stands now; Restore installs it in a node
// that has delivered nothing yet. The layout (integers big-endian):
//
//	"ORCA" version=2 u8, delivered u64
//	objects u32, then per object (by id):
//	  id u32, name, class, writes u64, state (the class's codec),
//	  pending u32, then per queued guarded write:
//	    origin u16, request u32, operation u8, position u64 u32, arguments
//	early u32, then per message for an object not made: id u32, from u16,
//	  position u64, message
//	parts u32, then per member with a message half received: from u16, bytes
//	requests u32, then per member: id u16, its last request number u32
//	waiting u32, then per member that joined and has no state yet: id u16,
//	  incarnation u32
//
// where a name, a class and every byte string is a u32 length and the
// bytes.

const (
	snapshotMagic   = "ORCA"
	snapshotVersion = 2
)

// ErrSnapshot is wrapped by Restore's errors about a snapshot that cannot
// be installed.
var ErrSnapshot = errors.New("orca: bad snapshot")

// Snapshot encodes every replica here, the guarded writes queued at each,
// the messages waiting for objects not made here and half-received
// messages, at the current place in the order (Position). Taken by a
// member when the order reaches a join, it is what the joining member
// restores.
func (n *Node) Snapshot() ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.snapshotLocked()
}

func (n *Node) snapshotLocked() ([]byte, error) {
	b := append([]byte(snapshotMagic), snapshotVersion)
	b = binary.BigEndian.AppendUint64(b, n.delivered)
	ids := n.objectIDs()
	for id := range n.snapObjects {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		if so := n.snapObjects[id]; so != nil {
			// Restored but not made here yet: as it came.
			b = so.append(b, id)
			continue
		}
		o := n.objects[id]
		b = binary.BigEndian.AppendUint32(b, o.id)
		b = appendString(b, o.name)
		b = appendString(b, o.class.name)
		b = binary.BigEndian.AppendUint64(b, o.writes)
		state, err := o.class.appendState(nil, o.state)
		if err != nil {
			return nil, fmt.Errorf("orca: snapshot of %q: encoding its state: %w", o.name, err)
		}
		b = appendBytes(b, state)
		b = binary.BigEndian.AppendUint32(b, uint32(len(o.pending)))
		for _, p := range o.pending {
			b = appendPending(b, snapPending{origin: p.origin, req: p.req, op: p.op.index, pos: p.pos, raw: p.raw})
		}
	}
	early := slices.Sorted(keys(n.early))
	count := 0
	for _, id := range early {
		count += len(n.early[id])
	}
	b = binary.BigEndian.AppendUint32(b, uint32(count))
	for _, id := range early {
		for _, m := range n.early[id] {
			b = binary.BigEndian.AppendUint32(b, id)
			b = binary.BigEndian.AppendUint16(b, uint16(m.from))
			b = binary.BigEndian.AppendUint64(b, m.pos)
			b = appendBytes(b, m.msg)
		}
	}
	from := slices.Sorted(keys(n.parts))
	b = binary.BigEndian.AppendUint32(b, uint32(len(from)))
	for _, f := range from {
		b = binary.BigEndian.AppendUint16(b, uint16(f))
		b = appendBytes(b, n.parts[f])
	}
	from = from[:0]
	for f, req := range n.lastReq {
		if req != 0 {
			from = append(from, frame.MemberID(f))
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(from)))
	for _, f := range from {
		b = binary.BigEndian.AppendUint16(b, uint16(f))
		b = binary.BigEndian.AppendUint32(b, n.lastReq[f])
	}
	need := slices.SortedFunc(keys(n.needState), memberKey.compare)
	b = binary.BigEndian.AppendUint32(b, uint32(len(need)))
	for _, k := range need {
		b = binary.BigEndian.AppendUint16(b, uint16(k.id))
		b = binary.BigEndian.AppendUint32(b, k.incarnation)
	}
	return b, nil
}

func (so *snapObject) append(b []byte, id uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, id)
	b = appendString(b, so.name)
	b = appendString(b, so.class)
	b = binary.BigEndian.AppendUint64(b, so.writes)
	b = appendBytes(b, so.state)
	b = binary.BigEndian.AppendUint32(b, uint32(len(so.pending)))
	for _, p := range so.pending {
		b = appendPending(b, p)
	}
	return b
}

func appendPending(b []byte, p snapPending) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(p.origin))
	b = binary.BigEndian.AppendUint32(b, p.req)
	b = append(b, p.op)
	b = binary.BigEndian.AppendUint64(b, p.pos.Delivery)
	b = binary.BigEndian.AppendUint32(b, p.pos.Sub)
	return appendBytes(b, p.raw)
}

// Position is the number of messages delivered here: the place in the
// order a Snapshot taken now stands at.
func (n *Node) Position() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delivered
}

// Restore installs a snapshot (Snapshot) in this node, which must have
// made its objects already and delivered nothing: every object of the
// snapshot must be made here, with the same class; objects made here that
// the snapshot lacks keep their initial state and get the snapshot's
// early messages for them. Messages delivered after Restore continue from
// the snapshot's place. A snapshot that does not decode, or does not fit
// the objects here, is an error wrapping ErrSnapshot, and changes nothing.
func (n *Node) Restore(snapshot []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.usable(); err != nil {
		return err
	}
	defer n.unlockObject() // the early messages applied
	return n.restoreLocked(snapshot, true)
}

// snapObject is an object of a snapshot as encoded: kept so until the
// object is made here (a member that joined restores before its program
// makes its objects: New installs it then).
type snapObject struct {
	name, class string
	writes      uint64
	state       []byte
	pending     []snapPending
}

type snapPending struct {
	origin frame.MemberID
	req    uint32
	op     uint8
	pos    Pos
	raw    []byte
}

// snapshotData is a decoded snapshot.
type snapshotData struct {
	delivered uint64
	objects   map[uint32]*snapObject
	early     []earlyMsg
	earlyIDs  []uint32
	parts     map[frame.MemberID][]byte
	lastReq   map[frame.MemberID]uint32
	needState []memberKey
}

func decodeSnapshot(snapshot []byte) (*snapshotData, error) {
	r := &snapReader{b: snapshot}
	if string(r.next(len(snapshotMagic))) != snapshotMagic || r.err != nil {
		return nil, fmt.Errorf("%w: it does not start with %q", ErrSnapshot, snapshotMagic)
	}
	if v := r.u8(); v != snapshotVersion {
		return nil, fmt.Errorf("%w: version %d, this node reads %d", ErrSnapshot, v, snapshotVersion)
	}
	d := &snapshotData{delivered: r.u64(), objects: map[uint32]*snapObject{}, parts: map[frame.MemberID][]byte{},
		lastReq: map[frame.MemberID]uint32{}}
	objectAt := map[uint32]int{}
	for i := range r.count("objects") {
		at := r.off // apart: in "at, id := r.off, r.u32()" Go may load r.off after the call
		id := r.u32()
		so := &snapObject{name: r.str(), class: r.str(), writes: r.u64(), state: slices.Clone(r.bytes())}
		for range r.count("queued writes") {
			p := snapPending{origin: frame.MemberID(r.u16()), req: r.u32(), op: r.u8()}
			p.pos = Pos{Delivery: r.u64(), Sub: r.u32()}
			p.raw = slices.Clone(r.bytes())
			so.pending = append(so.pending, p)
		}
		if r.err != nil {
			break
		}
		if again(r, "object", i, at, objectAt, id, fmt.Sprintf("id %#x", id)) {
			break
		}
		d.objects[id] = so
	}
	for range r.count("early messages") {
		id := r.u32()
		m := earlyMsg{from: frame.MemberID(r.u16()), pos: r.u64(), msg: slices.Clone(r.bytes())}
		d.early, d.earlyIDs = append(d.early, m), append(d.earlyIDs, id)
	}
	partAt := map[frame.MemberID]int{}
	for i := range r.count("half-received messages") {
		at := r.off
		f := frame.MemberID(r.u16())
		if again(r, "half-received message", i, at, partAt, f, fmt.Sprintf("member %d", f)) {
			break
		}
		d.parts[f] = slices.Clone(r.bytes())
	}
	reqAt := map[frame.MemberID]int{}
	for i := range r.count("request numbers") {
		at := r.off
		f := frame.MemberID(r.u16())
		if again(r, "request number", i, at, reqAt, f, fmt.Sprintf("member %d", f)) {
			break
		}
		d.lastReq[f] = r.u32()
	}
	needAt := map[memberKey]int{}
	for i := range r.count("members waiting for the state") {
		at := r.off
		k := memberKey{id: frame.MemberID(r.u16()), incarnation: r.u32()}
		if again(r, "member waiting for the state", i, at, needAt, k, fmt.Sprintf("member %d incarnation %d", k.id, k.incarnation)) {
			break
		}
		d.needState = append(d.needState, k)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshot, r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after its end", ErrSnapshot, len(r.b))
	}
	return d, nil
}

// objectOf decodes a snapshot's object for o, made here.
func (so *snapObject) objectOf(o *object) (state any, pending []*pendingOp, err error) {
	if o.name != so.name {
		return nil, nil, fmt.Errorf("%w: object %q (id %#x) is %q here", ErrSnapshot, so.name, o.id, o.name)
	}
	if o.class.name != so.class {
		return nil, nil, fmt.Errorf("%w: object %q is of class %s in the snapshot, %s here", ErrSnapshot, so.name, so.class, o.class.name)
	}
	s := o.class.newState()
	if err := o.class.decodeState(so.state, s); err != nil {
		return nil, nil, fmt.Errorf("%w: the state of %q does not decode: %w", ErrSnapshot, so.name, err)
	}
	for _, sp := range so.pending {
		if int(sp.op) >= len(o.class.ops) || !o.class.ops[sp.op].write || o.class.ops[sp.op].guard == nil {
			return nil, nil, fmt.Errorf("%w: a queued write of %q names operation %d, not a guarded write of class %s", ErrSnapshot, so.name, sp.op, so.class)
		}
		p := &pendingOp{origin: sp.origin, req: sp.req, op: o.class.ops[sp.op], raw: sp.raw, pos: sp.pos}
		args, err := p.op.decodeArgs(p.raw)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: a queued %v on %q: the arguments do not decode: %w", ErrSnapshot, p.op, so.name, err)
		}
		p.args = args
		pending = append(pending, p)
	}
	return s, pending, nil
}

// install puts a snapshot's object into o (n.mu held).
func (o *object) install(so *snapObject, state any, pending []*pendingOp) {
	o.mu.Lock()
	o.class.assignState(o.state, state) // typed handles (Object) keep their pointer
	o.mu.Unlock()
	o.writes, o.pending, o.digests = so.writes, pending, [digestRing]digestEntry{}
	o.changedLocked()
}

// restoreLocked installs a snapshot (n.mu held). strict (Restore) wants
// every object of the snapshot made here; otherwise (a state transfer)
// objects not made yet are kept encoded for New.
func (n *Node) restoreLocked(snapshot []byte, strict bool) error {
	if n.delivered != 0 {
		return fmt.Errorf("%w: this node has delivered %d messages already; restore before the first", ErrSnapshot, n.delivered)
	}
	d, err := decodeSnapshot(snapshot)
	if err != nil {
		return err
	}
	// Decode everything first, so that a bad snapshot changes nothing.
	type objState struct {
		o       *object
		so      *snapObject
		state   any
		pending []*pendingOp
	}
	var objs []objState
	later := map[uint32]*snapObject{}
	for _, id := range slices.Sorted(keys(d.objects)) {
		so := d.objects[id]
		o := n.objects[id]
		if o == nil {
			if strict {
				return fmt.Errorf("%w: object %q (id %#x) is not made here: make every object before Restore", ErrSnapshot, so.name, id)
			}
			later[id] = so
			continue
		}
		state, pending, err := so.objectOf(o)
		if err != nil {
			return err
		}
		objs = append(objs, objState{o, so, state, pending})
	}
	n.unlockObject() // install takes the objects' locks
	for _, os := range objs {
		os.o.install(os.so, os.state, os.pending)
	}
	n.snapObjects = later
	n.delivered, n.parts = d.delivered, d.parts
	n.lastReq = nil
	for f, req := range d.lastReq {
		n.noteRequest(f, req)
	}
	for last := uint64(d.lastReq[n.self]); ; {
		next := n.nextReq.Load()
		if next >= last {
			break
		}
		if n.nextReq.CompareAndSwap(next, last) {
			n.reqSkipped += last - next
			break
		}
	}
	n.needState = map[memberKey]bool{}
	for _, k := range d.needState {
		n.needState[k] = true
	}
	for i, m := range d.early {
		if n.objects[d.earlyIDs[i]] != nil {
			n.handle(m.from, m.msg, m.pos)
		} else {
			n.early[d.earlyIDs[i]] = append(n.early[d.earlyIDs[i]], m)
		}
	}
	if n.trace != nil {
		n.trace(TraceEvent{Kind: TraceRestore, Member: n.self, Pos: Pos{Delivery: n.delivered}})
	}
	return nil
}

func (n *Node) objectIDs() []uint32 { return slices.Sorted(keys(n.objects)) }

func keys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// snapReader reads a snapshot; the first error sticks, and reads after it
// return zeros.
type snapReader struct {
	b   []byte
	off int
	err error
}

func (r *snapReader) next(k int) []byte {
	if r.err != nil {
		return nil
	}
	if k < 0 || len(r.b) < k {
		r.err = fmt.Errorf("it ends at byte %d, inside a field of %d bytes", r.off+len(r.b), k)
		return nil
	}
	v := r.b[:k]
	r.b, r.off = r.b[k:], r.off+k
	return v
}

func (r *snapReader) u8() uint8 {
	if v := r.next(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *snapReader) u16() uint16 {
	if v := r.next(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *snapReader) u32() uint32 {
	if v := r.next(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *snapReader) u64() uint64 {
	if v := r.next(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *snapReader) bytes() []byte {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		if r.err == nil {
			r.err = fmt.Errorf("a field at byte %d says %d bytes, but %d are left", r.off-4, n, len(r.b))
		}
		return nil
	}
	return r.next(int(n))
}

// again reports, failing the read, whether key, read at byte at as entry
// i of a list of what, is in seen already (Snapshot writes each once: a
// key twice is damage); otherwise it notes it in seen.
func again[K comparable](r *snapReader, what string, i, at int, seen map[K]int, key K, name string) bool {
	if r.err != nil {
		return true
	}
	if j, dup := seen[key]; dup {
		r.err = fmt.Errorf("%s %d at byte %d: %s again, first in entry %d", what, i, at, name, j)
		return true
	}
	seen[key] = i
	return false
}

func (r *snapReader) str() string { return string(r.bytes()) }

// count reads a count of items of what, bounded by the bytes left (each
// item takes at least one), so that a corrupt count cannot make the
// reader loop for long.
func (r *snapReader) count(what string) int {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		if r.err == nil {
			r.err = fmt.Errorf("%d %s, but only %d bytes are left", n, what, len(r.b))
		}
		return 0
	}
	return int(n)
}
