package link

import "encoding/binary"

// GroupOffset is where an rbcast frame's group id, 4 bytes big-endian,
// sits in an untagged Ethernet frame: the Ethernet header, then offset 8
// of the rbcast header (docs/wire-format.md). Every wire version keeps
// the group there, so that a kernel filter, a demultiplexer and a capture
// can tell groups apart without decoding; a test holds it to the frame
// package's encoder.
const GroupOffset = EthernetHeaderLen + 8

// MaxGroups bounds a kernel group filter (ring.Config.Groups,
// afpacket.Config.Groups, SetGroups): the classic BPF program spends two
// instructions per group, and the kernel caps programs at 4096.
const MaxGroups = 1024

// FrameGroup returns the group id of the rbcast frame in the Ethernet
// frame b; ok is false if b is too short to hold one. It does not check
// the EtherType.
func FrameGroup(b []byte) (group uint32, ok bool) {
	if len(b) < GroupOffset+4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[GroupOffset:]), true
}

// A GroupFilter is a Link whose kernel filter can be told which rbcast
// groups to pass (link/ring, link/afpacket): a frame of any other group
// is dropped by the kernel, before it takes room in the socket's queue or
// wakes a reader, and costs this process nothing. SetGroups replaces the
// set atomically (SO_ATTACH_FILTER swaps the program); nil or empty passes
// every group. Frames of other groups that were queued before the change
// are dropped by Recv and counted in Stats.Filtered. It is a
// receive-side capability: GroupFilterOf finds it through decorators.
type GroupFilter interface {
	Link
	SetGroups(groups []uint32) error
}

// GroupFilterOf returns the GroupFilter that filters what l receives: l
// itself, or the first link on the way down that decorators (Wrappers)
// receive through, as WakerOf does.
func GroupFilterOf(l Link) (GroupFilter, bool) {
	for l != nil {
		if f, ok := l.(GroupFilter); ok {
			return f, true
		}
		u, ok := l.(Wrapper)
		if !ok {
			return nil, false
		}
		l = u.Unwrap()
	}
	return nil, false
}
