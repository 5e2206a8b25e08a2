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
//	"ORCA" version=1 u8, delivered u64
//	objects u32, then per object (by id):
//	  id u32, name, class, writes u64, state (the class's codec),
//	  pending u32, then per queued guarded write:
//	    origin u16, request u32, operation u8, position u64 u32, arguments
//	early u32, then per message for an object not made: id u32, from u16,
//	  position u64, message
//	parts u32, then per member with a message half received: from u16, bytes
//
// where a name, a class and every byte string is a u32 length and the
// bytes.

const (
	snapshotMagic   = "ORCA"
	snapshotVersion = 1
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
	b := append([]byte(snapshotMagic), snapshotVersion)
	b = binary.BigEndian.AppendUint64(b, n.delivered)
	ids := n.objectIDs()
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
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
			b = binary.BigEndian.AppendUint16(b, uint16(p.origin))
			b = binary.BigEndian.AppendUint32(b, p.req)
			b = append(b, p.op.index)
			b = binary.BigEndian.AppendUint64(b, p.pos.Delivery)
			b = binary.BigEndian.AppendUint32(b, p.pos.Sub)
			b = appendBytes(b, p.raw)
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
	return b, nil
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
	if n.delivered != 0 {
		return fmt.Errorf("%w: this node has delivered %d messages already; restore before the first", ErrSnapshot, n.delivered)
	}
	r := &snapReader{b: snapshot}
	if string(r.next(len(snapshotMagic))) != snapshotMagic || r.err != nil {
		return fmt.Errorf("%w: it does not start with %q", ErrSnapshot, snapshotMagic)
	}
	if v := r.u8(); v != snapshotVersion {
		return fmt.Errorf("%w: version %d, this node reads %d", ErrSnapshot, v, snapshotVersion)
	}
	delivered := r.u64()
	// Decode everything first, so that a bad snapshot changes nothing.
	type objState struct {
		o       *object
		writes  uint64
		state   any
		pending []*pendingOp
	}
	var objs []objState
	for range r.count("objects") {
		id, name, class := r.u32(), r.str(), r.str()
		writes, state := r.u64(), r.bytes()
		if r.err != nil {
			break
		}
		o := n.objects[id]
		if o == nil || o.name != name {
			return fmt.Errorf("%w: object %q (id %#x) is not made here: make every object before Restore", ErrSnapshot, name, id)
		}
		if o.class.name != class {
			return fmt.Errorf("%w: object %q is of class %s in the snapshot, %s here", ErrSnapshot, name, class, o.class.name)
		}
		s := o.class.newState()
		if err := o.class.decodeState(state, s); err != nil {
			return fmt.Errorf("%w: the state of %q does not decode: %w", ErrSnapshot, name, err)
		}
		os := objState{o: o, writes: writes, state: s}
		for range r.count("queued writes") {
			p := &pendingOp{origin: frame.MemberID(r.u16()), req: r.u32()}
			opIndex := r.u8()
			p.pos = Pos{Delivery: r.u64(), Sub: r.u32()}
			p.raw = slices.Clone(r.bytes())
			if r.err != nil {
				break
			}
			if int(opIndex) >= len(o.class.ops) || !o.class.ops[opIndex].write || o.class.ops[opIndex].guard == nil {
				return fmt.Errorf("%w: a queued write of %q names operation %d, not a guarded write of class %s", ErrSnapshot, name, opIndex, class)
			}
			p.op = o.class.ops[opIndex]
			args, err := p.op.decodeArgs(p.raw)
			if err != nil {
				return fmt.Errorf("%w: a queued %v on %q: the arguments do not decode: %w", ErrSnapshot, p.op, name, err)
			}
			p.args = args
			os.pending = append(os.pending, p)
		}
		objs = append(objs, os)
	}
	var early []earlyMsg
	var earlyIDs []uint32
	for range r.count("early messages") {
		id := r.u32()
		m := earlyMsg{from: frame.MemberID(r.u16()), pos: r.u64(), msg: slices.Clone(r.bytes())}
		early, earlyIDs = append(early, m), append(earlyIDs, id)
	}
	parts := map[frame.MemberID][]byte{}
	for range r.count("half-received messages") {
		f := frame.MemberID(r.u16())
		parts[f] = slices.Clone(r.bytes())
	}
	if r.err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, r.err)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes after its end", ErrSnapshot, len(r.b))
	}
	for _, os := range objs {
		os.o.mu.Lock()
		os.o.class.assignState(os.o.state, os.state) // typed handles (Object) keep their pointer
		os.o.mu.Unlock()
		os.o.writes, os.o.pending, os.o.digests = os.writes, os.pending, [digestRing]digestEntry{}
		os.o.changedLocked()
	}
	n.delivered, n.parts = delivered, parts
	for i, m := range early {
		if n.objects[earlyIDs[i]] != nil {
			n.handle(m.from, m.msg, m.pos)
		} else {
			n.early[earlyIDs[i]] = append(n.early[earlyIDs[i]], m)
		}
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
