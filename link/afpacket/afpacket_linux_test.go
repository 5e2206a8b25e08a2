//go:build linux

package afpacket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// testGroup is a locally administered multicast address. (01:80:c2:00:00:0x
// would not do: bridges never forward those.)
var testGroup = net.HardwareAddr{0x03, 0x72, 0x62, 0x63, 0x00, 0x01}

// recvTimeout bounds every wait for frames that were sent, so a lost frame
// fails the test instead of hanging it.
const recvTimeout = 10 * time.Second

// open opens a Link on eth0 inside host h and closes it when the test ends.
func open(t testing.TB, h *netns.Host, cfg Config) *Link {
	t.Helper()
	var l *Link
	if err := h.Do(func() (err error) {
		l, err = Open("eth0", cfg)
		return err
	}); err != nil {
		t.Fatalf("Open(eth0) in %s: %v", h.Namespace, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// run runs a command inside host h and fails the test if it fails.
func run(t testing.TB, h *netns.Host, name string, args ...string) {
	t.Helper()
	out, err := h.Command(t.Context(), name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v: %s", name, strings.Join(args, " "), h.Namespace, err, out)
	}
}

// makeFrame builds a frame of size bytes: Ethernet header, a 4-byte
// sequence number, then a pattern derived from seq so that any corruption
// or mix-up shows.
func makeFrame(dst, src net.HardwareAddr, etherType uint16, seq uint32, size int) []byte {
	f := make([]byte, size)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:14], etherType)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := 18; i < size; i++ {
		f[i] = byte(uint32(i)*31 + seq*7)
	}
	return f
}

// makeFrames builds n frames of assorted sizes between 60 and 14+mtu.
func makeFrames(src net.HardwareAddr, n, mtu int) [][]byte {
	frames := make([][]byte, n)
	for i := range frames {
		size := 60 + (i*397)%(link.EthernetHeaderLen+mtu-60+1)
		frames[i] = makeFrame(broadcast, src, link.EtherTypeRbcast, uint32(i), size)
	}
	return frames
}

// recvN receives exactly n frames (copies) or fails the test.
func recvN(t testing.TB, l *Link, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(recvTimeout)
	slots := make([]link.Frame, 64)
	var got [][]byte
	for len(got) < n {
		k, err := l.Recv(deadline, slots)
		if err != nil {
			t.Fatalf("Recv after %d of %d frames: %v", len(got), n, err)
		}
		for _, f := range slots[:k] {
			got = append(got, bytes.Clone(f.Data))
		}
	}
	if len(got) > n {
		t.Fatalf("received %d frames, want %d", len(got), n)
	}
	return got
}

// sameFrames fails the test unless got holds exactly the frames of want,
// each once and byte for byte. Order is not checked: the veth path queues
// each frame on the backlog of the CPU that transmits it (netif_rx), so
// frames sent from a thread that moves between CPUs can overtake each other
// before any socket sees them. The protocol above tolerates reordering;
// the link cannot prevent it.
func sameFrames(t testing.TB, who string, got, want [][]byte) {
	t.Helper()
	if missing := sameSet(t, who, got, want); missing > 0 {
		t.Fatalf("%s received %d frames, want %d", who, len(got), len(want))
	}
}

// sameSet checks that every frame in got is one of want (matched by the
// sequence number at bytes 14-17, which makeFrame writes) and arrives only
// once, and returns how many of want are missing.
func sameSet(t testing.TB, who string, got, want [][]byte) int {
	t.Helper()
	bySeq := make(map[uint32]int, len(want))
	for i, f := range want {
		bySeq[binary.BigEndian.Uint32(f[14:18])] = i
	}
	seen := make([]bool, len(want))
	reordered, last := 0, -1
	for k, f := range got {
		i, ok := -1, false
		if len(f) >= 18 {
			i, ok = bySeq[binary.BigEndian.Uint32(f[14:18])]
		}
		if !ok || !bytes.Equal(f, want[i]) {
			t.Fatalf("%s: frame %d (%d bytes, % x...) is not one that was sent", who, k, len(f), f[:min(32, len(f))])
		}
		if seen[i] {
			t.Fatalf("%s: frame %d (sent as %d) arrived twice", who, k, i)
		}
		seen[i] = true
		if i < last {
			reordered++
		}
		last = i
	}
	if reordered > 0 {
		t.Logf("%s: %d of %d frames overtaken on the way (veth backlog per CPU)", who, reordered, len(got))
	}
	return len(want) - len(got)
}

func TestBroadcastBatch(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 3, MTU: 1500, Prefix: "rbpbc"})
	h0 := open(t, topo.Hosts[0], Config{})
	h1 := open(t, topo.Hosts[1], Config{})
	h2 := open(t, topo.Hosts[2], Config{})
	if !bytes.Equal(h0.HardwareAddr(), topo.Hosts[0].MAC) || h0.MTU() != 1500 {
		t.Fatalf("h0 link: MAC %s MTU %d, want %s 1500", h0.HardwareAddr(), h0.MTU(), topo.Hosts[0].MAC)
	}
	// 300 frames: more than one batch of DefaultBatchSize per syscall.
	frames := makeFrames(h0.HardwareAddr(), 300, h0.MTU())
	n, err := h0.Send(frames)
	if err != nil || n != len(frames) {
		t.Fatalf("Send = %d, %v; want %d, nil", n, err, len(frames))
	}
	var total uint64
	for _, f := range frames {
		total += uint64(len(f))
	}
	for _, r := range []struct {
		name string
		l    *Link
	}{{"h1", h1}, {"h2", h2}} {
		sameFrames(t, r.name, recvN(t, r.l, len(frames)), frames)
		s, err := r.l.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if s.FramesReceived != uint64(len(frames)) || s.BytesReceived != total || s.Filtered != 0 ||
			s.KernelPackets != uint64(len(frames)) || s.KernelDrops != 0 {
			t.Errorf("%s stats = %+v, want %d frames, %d bytes, none filtered or dropped", r.name, s, len(frames), total)
		}
	}
	s, err := h0.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.FramesSent != uint64(len(frames)) || s.BytesSent != total {
		t.Errorf("h0 stats = %+v, want %d frames and %d bytes sent", s, len(frames), total)
	}
}

func TestTimestamps(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpts"})
	h0 := open(t, topo.Hosts[0], Config{})
	h1 := open(t, topo.Hosts[1], Config{})
	before := time.Now()
	if _, err := h0.Send(makeFrames(h0.HardwareAddr(), 1, h0.MTU())); err != nil {
		t.Fatal(err)
	}
	slots := make([]link.Frame, 1)
	if _, err := h1.Recv(time.Now().Add(recvTimeout), slots); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// The kernel stamps frames with CLOCK_REALTIME, so compare wall times.
	if ts := slots[0].Time; ts.Before(before.Round(0)) || ts.After(after.Round(0)) {
		t.Errorf("frame time %v is not between send %v and receipt %v", ts, before, after)
	}
}

func TestFilterRejectsOtherEtherType(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpft"})
	const otherType = 0x88B6 // local experimental EtherType 2
	h0 := open(t, topo.Hosts[0], Config{})
	ours := open(t, topo.Hosts[1], Config{})
	theirs := open(t, topo.Hosts[1], Config{EtherType: otherType})

	// The link sends whatever frames it is given, so one socket can emit
	// both types: ten foreign frames first, then one of ours.
	var foreign [][]byte
	for i := range 10 {
		foreign = append(foreign, makeFrame(broadcast, h0.HardwareAddr(), otherType, uint32(i), 100))
	}
	marker := makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, 99, 100)
	if _, err := h0.Send(append(foreign, marker)); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "EtherType 0x88b5 link", recvN(t, ours, 1), [][]byte{marker})
	sameFrames(t, "EtherType 0x88b6 link", recvN(t, theirs, len(foreign)), foreign)
	quiet(t, "EtherType 0x88b5 link", ours)
	// The kernel filter dropped them: nothing reached our own check.
	if s, _ := ours.Stats(); s.Filtered != 0 || s.KernelPackets != 1 {
		t.Errorf("0x88b5 link stats = %+v, want 1 kernel packet and 0 filtered", s)
	}
}

func TestMTU(t *testing.T) {
	netnstest.RequireRoot(t)
	for _, mtu := range []int{1500, 9000, 65535} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			topo := netnstest.Up(t, netns.Options{Hosts: 2, MTU: mtu, Prefix: fmt.Sprintf("rbpm%d", mtu)})
			h0 := open(t, topo.Hosts[0], Config{})
			h1 := open(t, topo.Hosts[1], Config{})
			if h0.MTU() != mtu {
				t.Fatalf("MTU() = %d, want %d", h0.MTU(), mtu)
			}
			biggest := link.EthernetHeaderLen + mtu
			frames := [][]byte{
				makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, 0, biggest),
				makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, 1, 60),
				makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, 2, biggest),
			}
			if n, err := h0.Send(frames); err != nil || n != len(frames) {
				t.Fatalf("Send = %d, %v", n, err)
			}
			sameFrames(t, "h1", recvN(t, h1, len(frames)), frames)

			tooBig := append(frames[:1:1], makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, 3, biggest+1))
			n, err := h0.Send(tooBig)
			if n != 0 || !errors.Is(err, link.ErrFrameTooLarge) {
				t.Fatalf("Send(oversize) = %d, %v; want 0 and ErrFrameTooLarge", n, err)
			}
			want := fmt.Sprintf("frame 1 is %d bytes, more than the %d a %d-byte MTU allows", biggest+1, biggest, mtu)
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "eth0") {
				t.Errorf("error %q does not say %q on eth0", err, want)
			}
			if s, _ := h0.Stats(); s.FramesSent != uint64(len(frames)) {
				t.Errorf("FramesSent = %d after a refused batch, want %d", s.FramesSent, len(frames))
			}
		})
	}
}

func TestSendRejectsRunt(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rbprn"})
	h0 := open(t, topo.Hosts[0], Config{})
	n, err := h0.Send([][]byte{make([]byte, 60), make([]byte, 13)})
	if n != 0 || err == nil || !strings.Contains(err.Error(), "frame 1 is 13 bytes, shorter than the 14-byte Ethernet header") {
		t.Fatalf("Send(runt) = %d, %v", n, err)
	}
}

func TestRecvDeadline(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpdl"})
	h0 := open(t, topo.Hosts[0], Config{})
	h1 := open(t, topo.Hosts[1], Config{})
	slots := make([]link.Frame, 8)
	n, err := h1.Recv(time.Now().Add(20*time.Millisecond), slots)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv on an idle link = %d, %v; want 0, os.ErrDeadlineExceeded", n, err)
	}
	// A deadline in the past fails at once, and a later one works again.
	if _, err := h1.Recv(time.Now().Add(-time.Second), slots); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv with a past deadline: %v", err)
	}
	frames := makeFrames(h0.HardwareAddr(), 3, h0.MTU())
	if _, err := h0.Send(frames); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "h1", recvN(t, h1, 3), frames)
	if _, err := h1.Recv(time.Now().Add(time.Second), nil); err == nil || !strings.Contains(err.Error(), "empty frames slice") {
		t.Errorf("Recv(nil slots) error = %v", err)
	}
}

// TestWake: Wake ends a waiting Recv, or the next one if none waits;
// wakes do not add up; frames come before a wake; after a wake Recv waits
// for its own deadline again; Wake after Close does nothing.
func TestWake(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpwk"})
	h0 := open(t, topo.Hosts[0], Config{})
	h1 := open(t, topo.Hosts[1], Config{})
	slots := make([]link.Frame, 8)
	woken := func(what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		n, err := h1.Recv(deadline, slots)
		if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: Recv = %d, %v; want 0 and a deadline error", what, n, err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(20 * time.Millisecond)
		h1.Wake()
	}()
	woken("a Wake 20 ms into a 1-minute Recv")
	// Under load the Recv may start after the Wake's flag and return
	// before its past deadline is set: that deadline must not land on a
	// later Recv of this test.
	<-done
	h1.Wake()
	h1.Wake()
	woken("a Recv after 2 Wakes")
	frames := makeFrames(h0.HardwareAddr(), 3, h0.MTU())
	if _, err := h0.Send(frames); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "h1 after the Wakes", recvN(t, h1, 3), frames)
	before, err := h1.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h0.Send(frames[:1]); err != nil {
		t.Fatal(err)
	}
	// Frames cross the bridge asynchronously: wait until the socket has
	// it (the kernel counts a frame as it queues it).
	for end := time.Now().Add(recvTimeout); ; time.Sleep(time.Millisecond) {
		s, err := h1.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if s.KernelPackets > before.KernelPackets {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the frame sent did not reach h1's socket in %v", recvTimeout)
		}
	}
	h1.Wake()
	sameFrames(t, "h1 past a Wake", recvN(t, h1, 1), frames[:1])
	woken("the Recv after one that read frames past a Wake")
	deadline := time.Now().Add(30 * time.Millisecond)
	for i := range 2 {
		if n, err := h1.Recv(deadline, slots); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Recv %d with a 30 ms deadline = %d, %v", i, n, err)
		}
		if time.Now().Before(deadline) {
			t.Fatalf("Recv %d returned before its deadline, with no Wake", i)
		}
	}
	h1.Close()
	h1.Wake()
}

func TestCloseUnblocksRecv(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rbpcl"})
	l := open(t, topo.Hosts[0], Config{})
	errc := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		_, err := l.Recv(time.Time{}, make([]link.Frame, 4))
		errc <- err
	}()
	<-started
	// Give Recv time to park in the poller; the result is the same if it
	// has not yet, since Recv checks for a closed link first.
	time.Sleep(20 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Recv after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(recvTimeout):
		t.Fatal("Recv still blocked after Close")
	}
	if _, err := l.Send(makeFrames(l.HardwareAddr(), 1, l.MTU())); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v, want net.ErrClosed", err)
	}
	if _, err := l.Stats(); err != nil {
		t.Errorf("Stats after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenInterfaceErrors(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rbpoe"})
	h := topo.Hosts[0]
	// Created inside the host namespace, so they go with it.
	run(t, h, "ip", "link", "add", "rbpdown0", "type", "veth", "peer", "name", "rbpdown1")
	run(t, h, "ip", "link", "add", "rbpsmall0", "type", "veth", "peer", "name", "rbpsmall1")
	run(t, h, "ip", "link", "set", "rbpsmall0", "mtu", "500", "up")
	run(t, h, "ip", "tuntap", "add", "dev", "rbptun0", "mode", "tun")
	run(t, h, "ip", "link", "set", "rbptun0", "up")
	for _, tc := range []struct {
		ifname string
		want   error
		text   string
	}{
		{"rbpnothere", link.ErrNoInterface, `interface "rbpnothere": no such network interface`},
		{"rbpdown0", link.ErrInterfaceDown, `interface "rbpdown0" is down (bring it up with ` + "`ip link set rbpdown0 up`)"},
		{"rbpsmall0", link.ErrMTUTooSmall, `interface "rbpsmall0": MTU 500 is too small for rbcast frames (need at least 576)`},
		{"rbptun0", link.ErrNotEthernet, `interface "rbptun0" has no Ethernet address (a tun device or an IP tunnel carries no Ethernet frames); use an Ethernet interface: a NIC, a veth, a bridge or a tap`},
	} {
		err := h.Do(func() error {
			l, err := Open(tc.ifname, Config{})
			if err == nil {
				l.Close()
			}
			return err
		})
		var ie *link.InterfaceError
		if !errors.Is(err, tc.want) || !errors.As(err, &ie) || err.Error() != tc.text {
			t.Errorf("Open(%s) = %v; want %q (%v)", tc.ifname, err, tc.text, tc.want)
		}
	}
}

// TestOpenWithoutCapNetRaw checks the error Open gives a process without
// CAP_NET_RAW. As root it re-runs this test binary without the capability
// (setpriv drops it from the bounding set, so the exec'd child never has
// it); otherwise this process lacks it already and tries directly.
func TestOpenWithoutCapNetRaw(t *testing.T) {
	if os.Getenv("RBCAST_AFPACKET_NOCAP") == "1" || (os.Geteuid() != 0 && !hasCapNetRaw(t)) {
		_, err := Open("lo", Config{})
		switch {
		case err == nil:
			t.Fatal("Open succeeded without CAP_NET_RAW")
		case !errors.Is(err, link.ErrPermission):
			t.Fatalf("Open without CAP_NET_RAW: %v, want link.ErrPermission", err)
		}
		checkPermissionText(t, err.Error())
		return
	}
	netnstest.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to drop CAP_NET_RAW in a child process")
	}
	cmd := exec.CommandContext(t.Context(), setpriv, "--inh-caps=-net_raw", "--bounding-set=-net_raw", "--",
		os.Args[0], "-test.run=^TestOpenWithoutCapNetRaw$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "RBCAST_AFPACKET_NOCAP=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOpenWithoutCapNetRaw") {
		t.Fatalf("child without CAP_NET_RAW: %v\n%s", err, out)
	}
}

// checkPermissionText checks the permission error says what failed where,
// and how to fix it.
func checkPermissionText(t *testing.T, text string) {
	t.Helper()
	for _, want := range []string{"listen", "lo", "CAP_NET_RAW", "setcap cap_net_raw+ep", "operation not permitted"} {
		if !strings.Contains(text, want) {
			t.Errorf("error %q does not mention %q", text, want)
		}
	}
}

// hasCapNetRaw reports whether CAP_NET_RAW (bit 13) is in this process's
// effective capability set.
func hasCapNetRaw(t *testing.T) bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("cannot tell whether this process has CAP_NET_RAW: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var eff uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(hex), "%x", &eff); err != nil {
				t.Skipf("cannot parse CapEff %q: %v", hex, err)
			}
			return eff&(1<<13) != 0
		}
	}
	t.Skip("cannot tell whether this process has CAP_NET_RAW: no CapEff in /proc/self/status")
	return false
}

func TestMulticastMembership(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbpmc"})
	for _, h := range topo.Hosts {
		// The default, said out loud: membership, not promiscuity, must
		// be what lets the group frame in.
		run(t, h, "ip", "link", "set", "eth0", "promisc", "off")
	}
	h0 := open(t, topo.Hosts[0], Config{})
	member := open(t, topo.Hosts[1], Config{MulticastGroups: []net.HardwareAddr{testGroup}})
	outsider := open(t, topo.Hosts[2], Config{})

	toGroup := makeFrame(testGroup, h0.HardwareAddr(), link.EtherTypeRbcast, 1, 200)
	toOtherGroup := makeFrame(net.HardwareAddr{0x03, 0x72, 0x62, 0x63, 0, 2}, h0.HardwareAddr(), link.EtherTypeRbcast, 2, 200)
	toH2Only := makeFrame(topo.Hosts[2].MAC, h0.HardwareAddr(), link.EtherTypeRbcast, 3, 200)
	marker := makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, 4, 200)
	if _, err := h0.Send([][]byte{toGroup, toOtherGroup, toH2Only, marker}); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "member", recvN(t, member, 2), [][]byte{toGroup, marker})
	sameFrames(t, "outsider", recvN(t, outsider, 2), [][]byte{toH2Only, marker})
	for _, r := range []struct {
		who string
		l   *Link
	}{{"member", member}, {"outsider", outsider}} {
		quiet(t, r.who, r.l)
		if s, _ := r.l.Stats(); s.Filtered != 0 || s.KernelPackets != 2 {
			t.Errorf("%s: stats %+v; want 2 frames queued by the kernel and none left for the Go-side check", r.who, s)
		}
	}
}

// quiet checks that nothing more arrives on l. Frames can overtake each
// other on the veth path (see sameFrames), so having received the later
// frames proves nothing about an earlier one; only waiting a while does.
func quiet(t testing.TB, who string, l *Link) {
	t.Helper()
	slots := make([]link.Frame, 4)
	n, err := l.Recv(time.Now().Add(100*time.Millisecond), slots)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: an unexpected frame arrived: Recv = %d, %v (% x...)", who, n, err, slots[0].Data[:min(18, len(slots[0].Data))])
	}
}

func TestKeepOutgoing(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpko"})
	h0 := open(t, topo.Hosts[0], Config{})
	tap := open(t, topo.Hosts[0], Config{KeepOutgoing: true})
	h1 := open(t, topo.Hosts[1], Config{})

	sent := makeFrames(h0.HardwareAddr(), 5, h0.MTU())
	if _, err := h0.Send(sent); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "h1", recvN(t, h1, len(sent)), sent)
	slots := make([]link.Frame, 8)
	var got [][]byte
	for len(got) < len(sent) {
		n, err := tap.Recv(time.Now().Add(recvTimeout), slots)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range slots[:n] {
			if !f.Outgoing {
				t.Fatalf("frame % x... not marked Outgoing", f.Data[:18])
			}
			got = append(got, bytes.Clone(f.Data))
		}
	}
	sameFrames(t, "KeepOutgoing link", got, sent)

	// The sender's own link does not see its frames: a reply from h1 is
	// the first thing it receives.
	reply := makeFrame(broadcast, h1.HardwareAddr(), link.EtherTypeRbcast, 7, 64)
	if _, err := h1.Send([][]byte{reply}); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, "h0", recvN(t, h0, 1), [][]byte{reply})
	n, err := tap.Recv(time.Now().Add(recvTimeout), slots)
	if err != nil || n != 1 || slots[0].Outgoing || !bytes.Equal(slots[0].Data, reply) {
		t.Fatalf("KeepOutgoing link: Recv = %d, %v, outgoing %v; want the incoming reply", n, err, slots[0].Outgoing)
	}
}

// TestBackPressure puts a token bucket on h0's eth0 so that the sender
// outruns the device for certain, then checks that nothing is lost: Send
// returns no error, every frame arrives in order, and the waits were
// counted. With the default 4 MiB send buffer the 64 KiB queue fills first
// and the kernel answers ENOBUFS; with a small send buffer, the frames
// held in the queue use up the buffer first and the kernel answers EAGAIN.
func TestBackPressure(t *testing.T) {
	netnstest.RequireRoot(t)
	for _, tc := range []struct {
		name      string
		sendBuf   int
		limit     string
		wantWhich string
	}{
		{"ENOBUFS", 0, "64kb", "device queue full"},
		{"EAGAIN", 32 << 10, "4mb", "send buffer full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpbp" + strings.ToLower(tc.name[:2])})
			run(t, topo.Hosts[0], "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
				"rate", "100mbit", "burst", "16kb", "limit", tc.limit)
			h0 := open(t, topo.Hosts[0], Config{SendBuffer: tc.sendBuf})
			h1 := open(t, topo.Hosts[1], Config{RecvBuffer: 64 << 20})

			// 3 MB: 240 ms at 100 Mbit/s, while the sender alone manages
			// several Gbit/s, so the queue is sure to fill.
			const count, size = 3000, 1000
			frames := make([][]byte, count)
			for i := range frames {
				frames[i] = makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, uint32(i), size)
			}
			got := make(chan [][]byte, 1)
			go func() {
				// recvN would call t.Fatal off the test goroutine.
				slots := make([]link.Frame, 64)
				var out [][]byte
				deadline := time.Now().Add(recvTimeout)
				for len(out) < count {
					n, err := h1.Recv(deadline, slots)
					if err != nil {
						break
					}
					for _, f := range slots[:n] {
						out = append(out, bytes.Clone(f.Data))
					}
				}
				got <- out
			}()
			n, err := h0.Send(frames)
			if err != nil || n != count {
				t.Fatalf("Send = %d, %v; want %d, nil", n, err, count)
			}
			received := <-got
			if missing := sameSet(t, "h1", received, frames); missing > 0 {
				s1, _ := h1.Stats()
				t.Errorf("%d of %d frames lost after Send accepted them (receiver stats %+v)\n%s",
					missing, count, s1, dropCounters(t, topo))
			}
			s, err := h0.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.SendRetries == 0 {
				t.Errorf("SendRetries = 0: the %s never pushed back", tc.wantWhich)
			}
			t.Logf("%s: %d frames, %d send retries", tc.wantWhich, count, s.SendRetries)
		})
	}
}

// TestKernelDrops lets frames pile up on a receiver that does not read and
// checks PACKET_STATISTICS: every frame was offered to the socket, the ones
// that did not fit were counted as drops, and the rest can still be read.
func TestKernelDrops(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpkd"})
	h0 := open(t, topo.Hosts[0], Config{})
	// The kernel rounds tiny buffers up to its minimum (a few KiB), which
	// holds only a handful of 1 KiB frames.
	h1 := open(t, topo.Hosts[1], Config{RecvBuffer: 1})
	const count = 500
	frames := make([][]byte, count)
	for i := range frames {
		frames[i] = makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, uint32(i), 1000)
	}
	if _, err := h0.Send(frames); err != nil {
		t.Fatal(err)
	}
	// Frames cross the bridge asynchronously: poll the counters until all
	// of them have reached the socket.
	var s link.Stats
	for end := time.Now().Add(recvTimeout); ; {
		var err error
		if s, err = h1.Stats(); err != nil {
			t.Fatal(err)
		}
		if s.KernelPackets >= count || time.Now().After(end) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if s.KernelPackets != count || s.KernelDrops == 0 || s.KernelDrops >= count {
		t.Fatalf("stats = %+v; want KernelPackets %d and some, not all, drops", s, count)
	}
	queued := int(s.KernelPackets - s.KernelDrops)
	recvN(t, h1, queued)
	slots := make([]link.Frame, 4)
	if n, err := h1.Recv(time.Now().Add(10*time.Millisecond), slots); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after reading the %d queued frames Recv = %d, %v; want a timeout", queued, n, err)
	}
	// PACKET_STATISTICS resets on every read; Stats must keep the totals.
	again, err := h1.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if again.KernelPackets != s.KernelPackets || again.KernelDrops != s.KernelDrops || again.FramesReceived != uint64(queued) {
		t.Errorf("second Stats = %+v, want the first's kernel counters %d/%d and %d received", again, s.KernelPackets, s.KernelDrops, queued)
	}
}

// TestZeroAllocs checks the steady state of Send and Recv allocates
// nothing per frame (DESIGN.md decision 4), both with one deadline for
// every Recv and with a new deadline each time, as a runtime waiting for
// its next timer passes.
func TestZeroAllocs(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbpza"})
	h0 := open(t, topo.Hosts[0], Config{})
	h1 := open(t, topo.Hosts[1], Config{RecvBuffer: 16 << 20})
	frames := makeFrames(h0.HardwareAddr(), 32, h0.MTU())
	slots := make([]link.Frame, 64)
	fixed := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name     string
		deadline func() time.Time
	}{
		{"fixed deadline", func() time.Time { return fixed }},
		{"moving deadline", func() time.Time { return time.Now().Add(recvTimeout) }},
	} {
		var failed error
		exchange := func() {
			if _, err := h0.Send(frames); err != nil {
				failed = err
				return
			}
			for got := 0; got < len(frames); {
				n, err := h1.Recv(tc.deadline(), slots)
				if err != nil {
					failed = err
					return
				}
				got += n
			}
		}
		exchange() // warm up: the first Recv arms the poller's deadline timer
		allocs := testing.AllocsPerRun(200, exchange)
		if failed != nil {
			t.Fatalf("%s: %v", tc.name, failed)
		}
		if allocs != 0 {
			t.Errorf("%s: Send+Recv of %d frames: %v allocations per run, want 0", tc.name, len(frames), allocs)
		}
	}
}

// dropCounters shows every place on the segment where the kernel counts
// dropped frames: interface statistics and qdiscs in each namespace, and
// the per-CPU backlog drops in /proc/net/softnet_stat (second column).
func dropCounters(t testing.TB, topo *netns.Topology) string {
	var b strings.Builder
	show := func(ns string) {
		out, _ := exec.CommandContext(t.Context(), "ip", "netns", "exec", ns, "sh", "-c",
			"ip -s link; tc -s qdisc; cat /proc/net/softnet_stat").CombinedOutput()
		fmt.Fprintf(&b, "== %s\n%s", ns, out)
	}
	for _, h := range topo.Hosts {
		show(h.Namespace)
	}
	show(topo.BridgeNamespace)
	return b.String()
}
