package link_test

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// link.GroupOffset is where the frame package's encoder puts the group
// (frame imports nothing of ours, so the check lives here).
func TestGroupOffsetAgreesWithFrame(t *testing.T) {
	const group = 0xdeadbeef
	b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, 1}, frame.EtherType)
	b, err := frame.Append(b, &frame.Header{Group: group, Sender: 3, Incarnation: 0x01020304, Seq: 0x05060708}, &frame.Empty{T: frame.Ack})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := link.FrameGroup(b)
	if !ok || got != group {
		t.Fatalf("FrameGroup of an encoded frame of group %#x = %#x, %v", group, got, ok)
	}
	if _, ok := link.FrameGroup(b[:link.GroupOffset+3]); ok {
		t.Fatal("FrameGroup of a frame cut inside the group field reported a group")
	}
}
