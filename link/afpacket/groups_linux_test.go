package afpacket

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// The group filter on real sockets, with the other checks of the socket
// filter around it: a link filtering groups receives only their frames,
// broadcast, to a multicast address it joined or (KeepOutgoing) its own
// host's, and the kernel queues nothing else; SetGroups changes the set.
func TestGroups(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpgr"})
	h0 := open(t, topo.Hosts[0], Config{})
	tap := open(t, topo.Hosts[0], Config{KeepOutgoing: true, Groups: []uint32{2}})
	two := open(t, topo.Hosts[1], Config{Groups: []uint32{2}})
	joined := open(t, topo.Hosts[1], Config{Groups: []uint32{7, 2}, MulticastGroups: []net.HardwareAddr{testGroup}})
	src := h0.HardwareAddr()
	seq := uint32(0)
	frame := func(dst net.HardwareAddr, group uint32) []byte {
		seq++
		f := makeFrame(dst, src, link.EtherTypeRbcast, seq, 100)
		binary.BigEndian.PutUint32(f[link.GroupOffset:], group)
		return f
	}
	b1, b2, b3 := frame(broadcast, 1), frame(broadcast, 2), frame(broadcast, 3)
	m7, m1 := frame(testGroup, 7), frame(testGroup, 1)
	runt := makeFrame(broadcast, src, link.EtherTypeRbcast, 99, link.GroupOffset+3)
	if _, err := h0.Send([][]byte{b1, b2, b3, m7, m1, runt}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		who  string
		l    *Link
		want [][]byte
	}{
		{"group 2", two, [][]byte{b2}},
		{"groups 2 and 7, joined to the multicast address", joined, [][]byte{b2, m7}},
		{"group 2, keeping outgoing frames", tap, [][]byte{b2}},
	} {
		sameFrames(t, r.who, recvN(t, r.l, len(r.want)), r.want)
		quiet(t, r.who, r.l)
		if s, _ := r.l.Stats(); s.Filtered != 0 || s.KernelPackets != uint64(len(r.want)) {
			t.Errorf("%s: stats %+v; want %d frames queued by the kernel and none left for the Go-side check", r.who, s, len(r.want))
		}
	}

	if err := two.SetGroups([]uint32{3, 1}); err != nil {
		t.Fatal(err)
	}
	c1, c2, c3 := frame(broadcast, 1), frame(broadcast, 2), frame(broadcast, 3)
	if _, err := h0.Send([][]byte{c1, c2, c3}); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "groups 1 and 3", recvN(t, two, 2), [][]byte{c1, c3})
	quiet(t, "groups 1 and 3", two)
	if err := two.SetGroups(nil); err != nil {
		t.Fatal(err)
	}
	d1, d2 := frame(broadcast, 1), frame(broadcast, 2)
	if _, err := h0.Send([][]byte{d1, d2}); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "every group", recvN(t, two, 2), [][]byte{d1, d2})
	if s, _ := two.Stats(); s.Filtered != 0 || s.KernelPackets != 5 {
		t.Errorf("after SetGroups: stats %+v; want 5 frames queued by the kernel, none filtered in Go", s)
	}
}
