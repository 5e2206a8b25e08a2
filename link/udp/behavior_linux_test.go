package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

var lo4 = netip.MustParseAddr("127.0.0.1")

// open opens a link with cfg and closes it at the test's end.
func open(t *testing.T, cfg Config) *Link {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ethFrame is a frame of size bytes from src to dst, of rbcast's
// EtherType, numbered seq at byte 14.
func ethFrame(dst, src net.HardwareAddr, seq uint32, size int) []byte {
	f := make([]byte, size)
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], link.EtherTypeRbcast)
	if size >= 18 {
		binary.BigEndian.PutUint32(f[14:], seq)
	}
	for i := 18; i < size; i++ {
		f[i] = byte(seq) ^ byte(i)
	}
	return f
}

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// receive collects copies of what l receives until it has want frames or
// it has been quiet for quiet.
func receive(t *testing.T, l *Link, want int, quiet time.Duration, slots int) [][]byte {
	t.Helper()
	rx := make([]link.Frame, slots)
	var got [][]byte
	for len(got) < want {
		n, err := l.Recv(time.Now().Add(quiet), rx)
		if n == 0 {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Recv: %v", err)
			}
			break
		}
		for _, f := range rx[:n] {
			got = append(got, bytes.Clone(f.Data))
		}
	}
	return got
}

func sendAll(t *testing.T, l *Link, frames [][]byte) {
	t.Helper()
	if n, err := l.Send(frames); n != len(frames) || err != nil {
		t.Fatalf("Send of %d frames: %d, %v", len(frames), n, err)
	}
}

// A frame to a member's MAC reaches that member only; one to a MAC no
// member has is dropped by all (flooded, then filtered); broadcast
// reaches everyone else.
func TestUnicastGoesToItsMember(t *testing.T) {
	ls, ports := openFree(t, lo4, 3, func(ports []netip.AddrPort) []Config {
		return []Config{{Peers: ports, Local: ports[0]}, {Peers: ports, Local: ports[1]}, {Peers: ports, Local: ports[2]}}
	})
	a, b, c := ls[0], ls[1], ls[2]
	if got, want := b.HardwareAddr().String(), MACOf(ports[1]).String(); got != want {
		t.Fatalf("B's HardwareAddr %s, want MACOf(%s) = %s", got, ports[1], want)
	}
	if addr, ok := a.PeerAddr(c.HardwareAddr()); !ok || addr != ports[2] {
		t.Errorf("A's PeerAddr(C's MAC) = %v, %v; want %v", addr, ok, ports[2])
	}
	toB := ethFrame(b.HardwareAddr(), a.HardwareAddr(), 1, 100)
	toNobody := ethFrame(net.HardwareAddr{0x02, 9, 9, 9, 9, 9}, a.HardwareAddr(), 2, 100)
	all := ethFrame(broadcast, a.HardwareAddr(), 3, 100)
	sendAll(t, a, [][]byte{toB, toNobody, all})
	if got := receive(t, b, 3, 200*time.Millisecond, 8); len(got) != 2 || !bytes.Equal(got[0], toB) || !bytes.Equal(got[1], all) {
		t.Errorf("B received %d frames, want the one to it and the broadcast", len(got))
	}
	if got := receive(t, c, 3, 200*time.Millisecond, 8); len(got) != 1 || !bytes.Equal(got[0], all) {
		t.Errorf("C received %d frames, want the broadcast only", len(got))
	}
	if st, _ := c.Stats(); st.Filtered != 1 {
		t.Errorf("C filtered %d frames, want 1 (the flooded one to no member)", st.Filtered)
	}
	if got := a.Counters().DatagramsSent; got != 1+2+2 {
		t.Errorf("A sent %d datagrams, want 5 (one to B, the unknown one to both, the broadcast to both)", got)
	}
}

// A static list admits its members only; a frame whose source MAC is not
// its address's is dropped.
func TestStaticListAndSpoofing(t *testing.T) {
	// B, opened with the others (its port kept), sends only further on;
	// it is in no list of the outsider's.
	ls, _ := openFree(t, lo4, 3, func(ports []netip.AddrPort) []Config {
		return []Config{{Peers: ports[:2], Local: ports[0]}, {Peers: []netip.AddrPort{ports[0], ports[2]}, Local: ports[2]}, {Peers: ports[:2], Local: ports[1]}}
	})
	a, outsider, b := ls[0], ls[1], ls[2]
	sendAll(t, outsider, [][]byte{ethFrame(broadcast, outsider.HardwareAddr(), 1, 64)})
	if got := receive(t, a, 1, 200*time.Millisecond, 4); len(got) != 0 {
		t.Errorf("A received %d frames from an address outside its list", len(got))
	}
	if c := a.Counters(); c.Foreign != 1 {
		t.Errorf("Foreign = %d, want 1", c.Foreign)
	}
	// A member of the list claiming another's MAC.
	sendAll(t, b, [][]byte{ethFrame(broadcast, outsider.HardwareAddr(), 2, 64), ethFrame(broadcast, b.HardwareAddr(), 3, 64)})
	got := receive(t, a, 2, 200*time.Millisecond, 4)
	if len(got) != 1 || binary.BigEndian.Uint32(got[0][14:]) != 3 {
		t.Errorf("A received %d frames from B, want only B's own", len(got))
	}
	if c := a.Counters(); c.Spoofed != 1 {
		t.Errorf("Spoofed = %d, want 1", c.Spoofed)
	}
}

// Runs of equal-sized frames leave as GSO sends and may arrive as GRO
// receives; either way every frame arrives in order, also when Recv is
// given fewer slots than one GRO receive holds.
func TestOffloadsKeepOrder(t *testing.T) {
	for _, off := range []bool{false, true} {
		a, b := openPair(t, lo4, Config{MTU: 1500, NoGSO: off, NoGRO: off})
		var frames [][]byte
		for i := range 300 {
			size := 14 + b.MTU()
			if i%50 == 49 {
				size = 200 // ends a run
			}
			frames = append(frames, ethFrame(broadcast, a.HardwareAddr(), uint32(i), size))
		}
		sendAll(t, a, frames)
		got := receive(t, b, len(frames), time.Second, 5)
		if len(got) != len(frames) {
			t.Fatalf("offloads off %v: %d of %d frames arrived", off, len(got), len(frames))
		}
		for i := range got {
			if !bytes.Equal(got[i], frames[i]) {
				t.Fatalf("offloads off %v: frame %d differs", off, i)
			}
		}
		ca, cb := a.Counters(), b.Counters()
		t.Logf("offloads off %v: A %d GSO sends of %d datagrams, B %d GRO receives of %d", off, ca.GSOSends, ca.DatagramsSent, cb.GROReceives, cb.DatagramsReceived)
		if off && (ca.GSOSends != 0 || cb.GROReceives != 0) {
			t.Errorf("NoGSO, NoGRO: %d GSO sends, %d GRO receives", ca.GSOSends, cb.GROReceives)
		}
		if !off && ca.GSO && ca.GSOSends == 0 {
			t.Errorf("GSO on: no GSO send for runs of 49 equal frames")
		}
		if ca.DatagramsSent != uint64(len(frames)) || cb.DatagramsReceived != uint64(len(frames)) {
			t.Errorf("datagrams sent %d, received %d; want %d each", ca.DatagramsSent, cb.DatagramsReceived, len(frames))
		}
		a.Close()
		b.Close()
	}
}

// With Learn, members given only a seed learn each other within round
// trips, and forget one that is gone once nobody has heard from it for
// PeerTimeout; hellos do not bring it back.
func TestLearnThroughSeed(t *testing.T) {
	ls, _ := openFree(t, lo4, 3, func(ports []netip.AddrPort) []Config {
		cfg := func(i int) Config {
			return Config{Peers: ports[:1], Local: ports[i], Learn: true, HelloInterval: 20 * time.Millisecond, PeerTimeout: 200 * time.Millisecond}
		}
		return []Config{cfg(0), cfg(1), cfg(2)}
	})
	seed, n1, n2 := ls[0], ls[1], ls[2]
	// Every link learns in its Recv: keep all three receiving.
	stop := make(chan struct{})
	done := make(chan struct{})
	var received [3][][]byte
	go func() {
		defer close(done)
		rx := make([]link.Frame, 8)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, l := range []*Link{seed, n1, n2} {
				n, _ := l.Recv(time.Now().Add(2*time.Millisecond), rx)
				for _, f := range rx[:n] {
					received[i] = append(received[i], bytes.Clone(f.Data))
				}
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for n1.Counters().Peers < 2 || n2.Counters().Peers < 2 || seed.Counters().Peers < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("peers known after 5 s: seed %d, n1 %d, n2 %d; want 2 each", seed.Counters().Peers, n1.Counters().Peers, n2.Counters().Peers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	sendAll(t, n1, [][]byte{ethFrame(broadcast, n1.HardwareAddr(), 7, 80), ethFrame(n2.HardwareAddr(), n1.HardwareAddr(), 8, 80)})
	time.Sleep(50 * time.Millisecond)
	n2.Close()
	gone := time.Now()
	for n1.Counters().Peers != 1 || seed.Counters().Peers != 1 {
		if time.Since(gone) > 5*time.Second {
			t.Fatalf("5 s after n2 closed: n1 knows %d, the seed %d; want 1 each", n1.Counters().Peers, seed.Counters().Peers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	forgotten := time.Since(gone)
	// Several more hello rounds: nobody brings n2 back.
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	if n1.Counters().Peers != 1 || seed.Counters().Peers != 1 {
		t.Errorf("n2 came back: n1 knows %d, the seed %d", n1.Counters().Peers, seed.Counters().Peers)
	}
	t.Logf("n2 forgotten %v after it closed (PeerTimeout 200ms); n1: %+v", forgotten.Round(time.Millisecond), n1.Counters())
	var seq []uint32
	for _, f := range received[2] {
		seq = append(seq, binary.BigEndian.Uint32(f[14:]))
	}
	if len(seq) != 2 || seq[0] != 7 || seq[1] != 8 {
		t.Errorf("n2 received frames %v from n1, want [7 8] (a broadcast and one to it)", seq)
	}
	if len(received[0]) != 1 {
		t.Errorf("the seed received %d frames, want the broadcast only", len(received[0]))
	}
}

// A member with no route gets nothing, and the others still get every
// frame; the refusals are counted with their reason.
func TestUnreachablePeer(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rbuun"})
	var a, b *Link
	err := topo.Hosts[0].Do(func() error {
		ports := freePorts(t, lo4, 2)
		peers := append(ports, netip.MustParseAddrPort("10.99.0.1:9"))
		var err error
		if a, err = Open(Config{Peers: peers, Local: ports[0]}); err != nil {
			return err
		}
		b, err = Open(Config{Peers: peers, Local: ports[1]})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	frames := [][]byte{ethFrame(broadcast, a.HardwareAddr(), 1, 100), ethFrame(broadcast, a.HardwareAddr(), 2, 100)}
	sendAll(t, a, frames)
	if got := receive(t, b, 2, 300*time.Millisecond, 4); len(got) != 2 {
		t.Errorf("B received %d of 2 frames", len(got))
	}
	c := a.Counters()
	if c.SendErrors == 0 || c.LastSendError == nil || !strings.Contains(c.LastSendError.Error(), "10.99.0.1:9") || !strings.Contains(c.LastSendError.Error(), "unreachable") {
		t.Errorf("SendErrors %d, LastSendError %v; want the unreachable peer named", c.SendErrors, c.LastSendError)
	}
}

// Open's errors name what is wrong.
func TestOpenErrors(t *testing.T) {
	ports := freePorts(t, lo4, 2)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Group and Peers are both empty"},
		{Config{Group: netip.MustParseAddrPort("239.1.1.1:5000"), Peers: ports}, "both set"},
		{Config{Group: netip.MustParseAddrPort("10.1.1.1:5000"), Interface: "lo"}, "not a multicast address"},
		{Config{Group: netip.MustParseAddrPort("239.1.1.1:0"), Interface: "lo"}, "has no port"},
		{Config{Group: netip.MustParseAddrPort("239.1.1.1:5000")}, "Interface is empty"},
		{Config{Group: netip.MustParseAddrPort("239.1.1.1:5000"), Interface: "nosuch0"}, `interface "nosuch0": no such network interface`},
		{Config{Peers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}}, "has no port"},
		{Config{Peers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:5"), netip.MustParseAddrPort("[::1]:5")}}, "one link speaks one IP version"},
		{Config{Peers: ports, TTL: 300}, "TTL 300 is outside 1..255"},
		{Config{Peers: ports, MTU: 100}, "MTU 100 is outside 618..65535"},
		{Config{Peers: ports, EtherType: 0x88b6}, "is the link's own"},
		{Config{Peers: ports, Learn: true, HelloInterval: time.Second, PeerTimeout: time.Second}, "shorter than two HelloIntervals"},
		{Config{Peers: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.7:5000")}}, "no address of Peers is one of this host's"},
		{Config{Peers: ports, Local: netip.MustParseAddrPort("192.0.2.7:5000")}, "binding 192.0.2.7:5000"},
	} {
		l, err := Open(c.cfg)
		if err == nil {
			l.Close()
			t.Errorf("Open(%+v) succeeded, want %q", c.cfg, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v): %v; want it to say %q", c.cfg, err, c.want)
		}
	}
	// Two members on one port.
	openFree(t, lo4, 2, func(p []netip.AddrPort) []Config { ports = p; return []Config{{Peers: p, Local: p[0]}} })
	if _, err := Open(Config{Peers: ports[:1]}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second member on a taken port: %v", err)
	}
}

// Stage never waits for a Kick: the runtime kicks only once Stage has
// returned, so a full queue is sent by Stage itself (this deadlocked the
// all-to-all netns test when Stage waited for room).
func TestStageBeyondTheQueue(t *testing.T) {
	a, b := openPair(t, lo4, Config{MTU: 1500, BatchSize: 4})
	defer a.Close()
	defer b.Close()
	var frames [][]byte
	for i := range 100 {
		frames = append(frames, ethFrame(broadcast, a.HardwareAddr(), uint32(i), 100+i))
	}
	done := make(chan error, 1)
	go func() {
		n, err := a.Stage(frames)
		if err == nil && n != len(frames) {
			err = fmt.Errorf("staged %d of %d", n, len(frames))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stage of 100 frames with a queue of 16 and no Kick still waits after 5 s")
	}
	if err := a.Kick(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, b, len(frames), time.Second, 16)
	if len(got) != len(frames) {
		t.Fatalf("%d of %d frames arrived", len(got), len(frames))
	}
	for i := range got {
		if !bytes.Equal(got[i], frames[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

// The hot path allocates nothing per frame: Send (planning, GSO and
// sendmmsg) and Recv (recvmmsg, GRO split, admission) in steady state.
func TestNoAllocations(t *testing.T) {
	a, b := openPair(t, lo4, Config{MTU: 1500, RecvBuffer: 16 << 20})
	defer a.Close()
	defer b.Close()
	var frames [][]byte
	for i := range 32 {
		frames = append(frames, ethFrame(broadcast, a.HardwareAddr(), uint32(i), 14+a.MTU()))
	}
	frames = append(frames, ethFrame(b.HardwareAddr(), a.HardwareAddr(), 99, 80))
	rx := make([]link.Frame, 64)
	round := func() {
		if n, err := a.Send(frames); n != len(frames) || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
		for got := 0; got < len(frames); {
			n, err := b.Recv(time.Now().Add(time.Second), rx)
			if err != nil {
				t.Fatalf("Recv after %d: %v", got, err)
			}
			got += n
		}
	}
	round() // warm: peers learned, buffers grown
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("a round of Send of %d frames and the Recvs that take them allocates %.1f times, want 0", len(frames), allocs)
	}
}
