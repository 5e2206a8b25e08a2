package afpacket

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/link"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.EtherType != link.EtherTypeRbcast || c.RecvBuffer != DefaultBufferSize ||
		c.SendBuffer != DefaultBufferSize || c.BatchSize != DefaultBatchSize {
		t.Errorf("defaults = %+v", c)
	}
}

func TestConfigErrors(t *testing.T) {
	group := net.HardwareAddr{0x03, 0x72, 0x62, 0x63, 0, 1}
	many := make([]net.HardwareAddr, MaxMulticastGroups+1)
	for i := range many {
		many[i] = group
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"length not type", Config{EtherType: 0x05DC}, "Config.EtherType 0x05dc is an IEEE 802.3 length"},
		{"short group", Config{MulticastGroups: []net.HardwareAddr{group, {1, 2, 3}}}, "Config.MulticastGroups[1] \"01:02:03\" is 3 bytes long"},
		{"unicast group", Config{MulticastGroups: []net.HardwareAddr{{0x02, 0, 0, 0, 0, 1}}}, "Config.MulticastGroups[0] 02:00:00:00:00:01 is not a multicast address"},
		{"too many groups", Config{MulticastGroups: many}, "Config.MulticastGroups has 257 addresses, more than 256"},
		{"negative recv buffer", Config{RecvBuffer: -1}, "Config.RecvBuffer -1 is negative"},
		{"negative send buffer", Config{SendBuffer: -5}, "Config.SendBuffer -5 is negative"},
		{"batch too big", Config{BatchSize: MaxBatchSize + 1}, "Config.BatchSize 1025 is outside 0..1024"},
		{"batch negative", Config{BatchSize: -1}, "Config.BatchSize -1 is outside 0..1024"},
		{"too many groups", Config{Groups: make([]uint32, link.MaxGroups+1)}, "Config.Groups has 1025 groups, more than link.MaxGroups (1024)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			// Open checks the configuration before touching the system, so
			// the same error comes back without root or an interface.
			if _, err := Open("rbpnone", tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSocketFilterAssembles(t *testing.T) {
	groups := make([]net.HardwareAddr, MaxMulticastGroups)
	for i := range groups {
		groups[i] = net.HardwareAddr{0x03, 0, 0, 0, byte(i >> 8), byte(i)}
	}
	many := make([]uint32, link.MaxGroups)
	for i := range many {
		many[i] = uint32(i)
	}
	for _, c := range []Config{
		{EtherType: link.EtherTypeRbcast},
		{EtherType: link.EtherTypeRbcast, KeepOutgoing: true},
		{EtherType: link.EtherTypeRbcast, MulticastGroups: groups},
		{EtherType: link.EtherTypeRbcast, MulticastGroups: groups, Groups: many, KeepOutgoing: true},
	} {
		prog, err := socketFilter(c, groupSet(c.Groups))
		if err != nil {
			t.Fatal(err)
		}
		if len(prog) > 4096 { // BPF_MAXINSNS
			t.Errorf("filter with %d groups has %d instructions, more than the kernel's 4096", len(c.MulticastGroups), len(prog))
		}
	}
}

// TestWanted checks the Go copy of the socket filter; the kernel side is
// checked on real sockets in the namespace tests.
func TestWanted(t *testing.T) {
	group := net.HardwareAddr{0x03, 0x72, 0x62, 0x63, 0, 1}
	other := net.HardwareAddr{0x03, 0x72, 0x62, 0x63, 0, 2}
	frame := func(dst net.HardwareAddr, etherType uint16) []byte {
		f := make([]byte, 60)
		copy(f, dst)
		f[12], f[13] = byte(etherType>>8), byte(etherType)
		return f
	}
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	plain := Config{EtherType: link.EtherTypeRbcast, MulticastGroups: []net.HardwareAddr{group}}
	keep := plain
	keep.KeepOutgoing = true
	two := plain
	two.Groups = []uint32{5, 2}
	inGroup := func(f []byte, g uint32) []byte {
		binary.BigEndian.PutUint32(f[link.GroupOffset:], g)
		return f
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		frame   []byte
		pktType uint8
		want    bool
	}{
		{"broadcast", plain, frame(bcast, 0x88B5), packetBroadcast, true},
		{"to us", plain, frame(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 0x88B5), packetHost, true},
		{"other ethertype", plain, frame(bcast, 0x0800), packetBroadcast, false},
		{"runt", plain, frame(bcast, 0x88B5)[:13], packetBroadcast, false},
		{"joined group", plain, frame(group, 0x88B5), packetMulticast, true},
		{"other group", plain, frame(other, 0x88B5), packetMulticast, false},
		{"other host", plain, frame(net.HardwareAddr{2, 0, 0, 0, 0, 9}, 0x88B5), packetOtherHost, false},
		{"outgoing dropped", plain, frame(bcast, 0x88B5), packetOutgoing, false},
		{"outgoing kept", keep, frame(bcast, 0x88B5), packetOutgoing, true},
		{"our group", two, inGroup(frame(bcast, 0x88B5), 2), packetBroadcast, true},
		{"another group", two, inGroup(frame(bcast, 0x88B5), 3), packetBroadcast, false},
		{"our group, other host", two, inGroup(frame(net.HardwareAddr{2, 0, 0, 0, 0, 9}, 0x88B5), 2), packetOtherHost, false},
		{"too short for a group", two, frame(bcast, 0x88B5)[:link.GroupOffset+3], packetBroadcast, false},
	} {
		if got := wanted(&tc.cfg, groupSet(tc.cfg.Groups), tc.frame, tc.pktType); got != tc.want {
			t.Errorf("%s: wanted = %v, want %v", tc.name, got, tc.want)
		}
	}
}
