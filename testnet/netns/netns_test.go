package netns_test

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

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

const etherType = 0x88B5

// rawSocket is an AF_PACKET SOCK_RAW socket bound to one host's eth0 for
// etherType, opened inside the host's namespace through Do.
type rawSocket struct {
	fd      int
	ifindex int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openRaw(t testing.TB, h *netns.Host) *rawSocket {
	t.Helper()
	var s rawSocket
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(h.Iface)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(etherType)))
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		sa := &unix.SockaddrLinklayer{Protocol: htons(etherType), Ifindex: ifi.Index}
		if err := unix.Bind(fd, sa); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind: %w", err)
		}
		// Large receive buffer so the loss tests measure the injected loss,
		// not socket overflow.
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
		s = rawSocket{fd: fd, ifindex: ifi.Index}
		return nil
	})
	if err != nil {
		t.Fatalf("opening AF_PACKET socket on %s in %s: %v", h.Iface, h.Namespace, err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return &s
}

// send writes one frame, waiting out ENOBUFS (veth back-pressure) for at
// most a second: injected loss must never surface as a send error.
func (s *rawSocket) send(t testing.TB, frame []byte) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		_, err := unix.Write(s.fd, frame)
		if err == nil {
			return
		}
		if (errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN)) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		t.Fatalf("send: %v", err)
	}
}

// recv reads one incoming frame, or returns nil after timeout. Our own
// outgoing copies are skipped.
func (s *rawSocket) recv(t *testing.T, buf []byte, timeout time.Duration) []byte {
	t.Helper()
	f, err := s.recvFrame(buf, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// recvFrame is recv for goroutines other than the test's.
func (s *rawSocket) recvFrame(buf []byte, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, fmt.Errorf("SO_RCVTIMEO: %w", err)
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("recv: %w", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return buf[:n], nil
	}
}

// broadcastFrame is an Ethernet II broadcast frame from src with etherType
// and a payload of n bytes: a 4-byte sequence number then a pattern.
func broadcastFrame(src net.HardwareAddr, seq uint32, n int) []byte {
	f := make([]byte, 14+n)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:14], etherType)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := 18; i < len(f); i++ {
		f[i] = byte(i*7 + int(seq))
	}
	return f
}

func TestBroadcastDelivered(t *testing.T) {
	for _, mtu := range []int{1500, 9000, 65535} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			topo := netnstest.Up(t, netns.Options{Hosts: 3, MTU: mtu, Prefix: fmt.Sprintf("rbnd%d", mtu)})
			if topo.MTU != mtu || len(topo.Hosts) != 3 {
				t.Fatalf("topology MTU %d with %d hosts, want %d with 3", topo.MTU, len(topo.Hosts), mtu)
			}
			socks := make([]*rawSocket, 3)
			for i, h := range topo.Hosts {
				if len(h.MAC) != 6 {
					t.Fatalf("host %d MAC = %v", i, h.MAC)
				}
				socks[i] = openRaw(t, h)
			}
			frame := broadcastFrame(topo.Hosts[0].MAC, 1, mtu)
			socks[0].send(t, frame)
			buf := make([]byte, 70000)
			for i := 1; i < 3; i++ {
				got := socks[i].recv(t, buf, 2*time.Second)
				if got == nil {
					t.Fatalf("host %d received nothing", i)
				}
				if !bytes.Equal(got, frame) {
					t.Fatalf("host %d received %d bytes, differing from the %d sent", i, len(got), len(frame))
				}
			}
		})
	}
}

func TestDoStaysInNamespace(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbndo"})
	ino := func() uint64 {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	var inside [2]uint64
	for i, h := range topo.Hosts {
		if err := h.Do(func() error { inside[i] = ino(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var root unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &root); err != nil {
		t.Fatal(err)
	}
	if inside[0] == inside[1] || inside[0] == root.Ino || inside[1] == root.Ino {
		t.Fatalf("Do ran in namespaces %d and %d, process is in %d: want three different", inside[0], inside[1], root.Ino)
	}

	wantErr := errors.New("boom")
	if err := topo.Hosts[0].Do(func() error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}

	func() {
		defer func() {
			v := recover()
			pe, ok := v.(*netns.PanicError)
			if !ok || pe.Value != "fn panicked" {
				t.Fatalf("recovered %v, want *PanicError with fn's value", v)
			}
		}()
		topo.Hosts[0].Do(func() error { panic("fn panicked") })
	}()

	// After many Do calls, including the panic, no thread the scheduler can
	// reuse is left in a host namespace.
	for i := 0; i < 50; i++ {
		done := make(chan uint64)
		go func() { done <- ino() }()
		if got := <-done; got != root.Ino {
			t.Fatalf("a goroutine ran in namespace %d, want the process's %d", got, root.Ino)
		}
	}
}

func TestCommand(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rbncmd", Addresses: true})
	out, err := topo.Hosts[0].Command(t.Context(), "ip", "-br", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "10.77.0.1/24") {
		t.Fatalf("eth0 in %s: %q, want address 10.77.0.1/24", topo.Hosts[0].Namespace, out)
	}
	if !topo.Hosts[0].IP.Equal(net.IPv4(10, 77, 0, 1)) {
		t.Fatalf("Host.IP = %v, want 10.77.0.1", topo.Hosts[0].IP)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	netnstest.RequireRoot(t)
	const prefix = "rbnclose"
	topo, err := netns.New(netns.Options{Hosts: 2, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := netns.Leftovers(prefix); len(left) != 3 {
		t.Fatalf("after New: namespaces %v, want 3", left)
	}
	if err := topo.Close(); err != nil {
		t.Fatal(err)
	}
	if err := topo.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	assertGone(t, prefix)
	// down with nothing to remove succeeds.
	if out, err := exec.Command(scriptPath(t, "down"), "-p", prefix).CombinedOutput(); err != nil {
		t.Fatalf("down: %v: %s", err, out)
	}
}

func TestNewRefusesExistingNames(t *testing.T) {
	netnstest.RequireRoot(t)
	const prefix = "rbnfail"
	// Occupy host 1's name: New must refuse and must not delete it.
	if out, err := exec.Command("ip", "netns", "add", prefix+"h1").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", prefix+"h1").Run() })

	_, err := netns.New(netns.Options{Hosts: 3, Prefix: prefix})
	if err == nil || !strings.Contains(err.Error(), "already exist") || !strings.Contains(err.Error(), prefix+"h1") {
		t.Fatalf("New with a name taken: %v, want an error naming %sh1 as existing", err, prefix)
	}
	if left, _ := netns.Leftovers(prefix); len(left) != 1 || left[0] != prefix+"h1" {
		t.Fatalf("after the refusal namespaces are %v, want only the blocker %sh1", left, prefix)
	}
}

func assertGone(t *testing.T, prefix string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, prefix) {
			t.Fatalf("ip netns list still shows %q", line)
		}
	}
}

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

// TestKillAll: a process started in a host's namespace in a session of its
// own (as OpenMPI's orted daemonizes, out of every process group of the
// runner's) is ended by KillAll, and a second KillAll finds nothing.
func TestKillAll(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1, Prefix: "rbnkill"})
	h := topo.Hosts[0]
	cmd := h.Command(t.Context(), "setsid", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Start returns once ip(8) runs; it enters the namespace and execs
	// setsid after that (CI once found nobody there yet).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		out, err := exec.Command("ip", "netns", "pids", h.Namespace).Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.Fields(string(out))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process in %s 10 s after the start", h.Namespace)
		}
	}
	n, err := h.KillAll()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("KillAll signalled %d processes in %s, want 1 (sleep)", n, h.Namespace)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("sleep ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sleep still runs 10 s after KillAll")
	}
	if n, err := h.KillAll(); err != nil || n != 0 {
		t.Fatalf("second KillAll: %d, %v; want 0, nil", n, err)
	}
}
