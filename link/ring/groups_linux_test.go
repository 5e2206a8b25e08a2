package ring

import (
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
)

// The socket filter, run on x/net/bpf's interpreter, and accept, its copy
// in Go, pass exactly the frames of our EtherType and groups.
func TestGroupFilterProgram(t *testing.T) {
	frame := func(et uint16, group uint32, size int) []byte {
		b := make([]byte, size)
		binary.BigEndian.PutUint16(b[12:], et)
		if size >= link.GroupOffset+4 {
			binary.BigEndian.PutUint32(b[link.GroupOffset:], group)
		}
		return b
	}
	for _, c := range []struct {
		name   string
		groups []uint32
		frame  []byte
		want   bool
	}{
		{"every group", nil, frame(link.EtherTypeRbcast, 9, 60), true},
		{"every group, header only", nil, frame(link.EtherTypeRbcast, 0, 14), true},
		{"every group, other EtherType", nil, frame(0x0800, 9, 60), false},
		{"one of ours", []uint32{2, 5}, frame(link.EtherTypeRbcast, 5, 60), true},
		{"the other of ours", []uint32{2, 5}, frame(link.EtherTypeRbcast, 2, 1514), true},
		{"another group", []uint32{2, 5}, frame(link.EtherTypeRbcast, 3, 60), false},
		{"group 0", []uint32{2, 5}, frame(link.EtherTypeRbcast, 0, 60), false},
		{"ours, other EtherType", []uint32{2, 5}, frame(0x0800, 5, 60), false},
		{"too short for a group", []uint32{2, 5}, frame(link.EtherTypeRbcast, 0, link.GroupOffset+3), false},
		{"group 0 wanted", []uint32{0}, frame(link.EtherTypeRbcast, 0, 60), true},
	} {
		set := groupSet(c.groups)
		fp, err := socketFilter(link.EtherTypeRbcast, set)
		if err != nil {
			t.Fatal(err)
		}
		insns := make([]bpf.Instruction, fp.Len)
		for i, f := range unsafeFilter(fp) {
			insns[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
		}
		vm, err := bpf.NewVM(insns)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		kept, err := vm.Run(c.frame)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := kept > 0; got != c.want {
			t.Errorf("%s: the socket filter keeps it: %v, want %v", c.name, got, c.want)
		}
		l := &Link{cfg: resolved{Config: Config{EtherType: link.EtherTypeRbcast}}}
		if got := l.accept(c.frame, 0, len(c.frame), len(c.frame), 0, set); got != c.want {
			t.Errorf("%s: accept = %v, want %v", c.name, got, c.want)
		}
	}
	many := make([]uint32, link.MaxGroups)
	for i := range many {
		many[i] = uint32(i * 3)
	}
	fp, err := socketFilter(link.EtherTypeRbcast, groupSet(many))
	if err != nil || fp.Len > 4096 {
		t.Fatalf("filter of link.MaxGroups groups: %d instructions, %v; the kernel takes at most 4096", fp.Len, err)
	}
}

// Three groups on one segment: a link filtering for one receives exactly
// its frames, and the kernel counts only those (the filter drops the rest
// before they are queued); SetGroups changes the set on the open link.
func TestGroups(t *testing.T) {
	topo := up(t, "g", 2, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			tx := openOn(t, topo.Hosts[0], Config{Version: v})
			two := openOn(t, topo.Hosts[1], Config{Version: v, Groups: []uint32{2}})
			all := openOn(t, topo.Hosts[1], Config{Version: v})
			src := tx.HardwareAddr()
			send := func(seq0 uint64) {
				t.Helper()
				var batch [][]byte
				for i := range 90 {
					f := buildFrame(make([]byte, 200), src, link.EtherTypeRbcast, seq0+uint64(i), 200)
					binary.BigEndian.PutUint32(f[link.GroupOffset:], uint32(1+i%3))
					batch = append(batch, f)
				}
				if n, err := tx.Send(batch); n != len(batch) || err != nil {
					t.Fatalf("Send = %d, %v", n, err)
				}
			}
			check := func(l *Link, name string, want map[uint32]int, packets uint64) {
				t.Helper()
				total := 0
				for _, n := range want {
					total += n
				}
				got, err := recvUntil(l, total+1, 200*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				seen := map[uint32]int{}
				for _, f := range got {
					g, _ := link.FrameGroup(f)
					seen[g]++
				}
				for g, n := range want {
					if seen[g] != n {
						t.Errorf("%s received %d frames of group %d, want %d (all: %v)", name, seen[g], g, n, seen)
					}
				}
				if len(got) != total {
					t.Errorf("%s received %d frames, want %d (%v)", name, len(got), total, seen)
				}
				st, _ := l.Stats()
				if st.KernelPackets != packets || st.Filtered != 0 {
					t.Errorf("%s: the kernel queued %d frames (%d filtered in Go), want %d (0)", name, st.KernelPackets, st.Filtered, packets)
				}
			}
			send(0)
			check(two, "the group 2 link", map[uint32]int{2: 30}, 30)
			check(all, "the unfiltered link", map[uint32]int{1: 30, 2: 30, 3: 30}, 90)
			if err := two.SetGroups([]uint32{3, 1}); err != nil {
				t.Fatal(err)
			}
			send(100)
			check(two, "the link set to groups 1 and 3", map[uint32]int{1: 30, 3: 30}, 90)
			if err := two.SetGroups(nil); err != nil {
				t.Fatal(err)
			}
			send(200)
			check(two, "the link set to every group", map[uint32]int{1: 30, 2: 30, 3: 30}, 180)
		})
	}
}

// unsafeFilter is the instructions a SockFprog points at.
func unsafeFilter(fp *unix.SockFprog) []unix.SockFilter {
	return unsafe.Slice(fp.Filter, fp.Len)
}
