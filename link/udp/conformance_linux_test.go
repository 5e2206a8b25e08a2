package udp

import (
	"errors"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
	"golang.org/x/sys/unix"
)

// freePorts returns n UDP ports of addr that were free a moment ago.
func freePorts(t *testing.T, addr netip.Addr, n int) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	var fds []int
	for range n {
		fam := 4
		if addr.Is6() {
			fam = 6
		}
		fd, err := newSocket(fam, &Config{RecvBuffer: 4096, SendBuffer: 4096})
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		a, _, err := bindLocal(fd, netip.AddrPortFrom(addr, 0), 0)
		if err != nil {
			t.Skipf("cannot bind %s: %v", addr, err)
		}
		out = append(out, a)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return out
}

// openFree opens the links cfgs gives for n ports of addr, in order, and
// closes them when the test ends. freePorts' ports were free a moment
// ago, but another package's test (go test runs packages at once) may
// bind one before its link does: on EADDRINUSE every link opened is
// closed and it starts again on new ports, at most 5 times.
func openFree(t *testing.T, addr netip.Addr, n int, cfgs func(ports []netip.AddrPort) []Config) ([]*Link, []netip.AddrPort) {
	t.Helper()
	const tries = 5
	for try := 1; ; try++ {
		ports := freePorts(t, addr, n)
		var ls []*Link
		var err error
		for _, c := range cfgs(ports) {
			var l *Link
			if l, err = Open(c); err != nil {
				break
			}
			ls = append(ls, l)
		}
		if err == nil {
			t.Cleanup(func() {
				for _, l := range ls {
					l.Close()
				}
			})
			return ls, ports
		}
		for _, l := range ls {
			l.Close()
		}
		if !errors.Is(err, unix.EADDRINUSE) || try == tries {
			t.Fatalf("opening links on %v (try %d of %d): %v", ports, try, tries, err)
		}
		t.Logf("a port was taken between freePorts and Open (%v); again on new ports", err)
	}
}

// openPair opens two fan-out links on addr with cfg's tuning, each
// listing both.
func openPair(t *testing.T, addr netip.Addr, cfg Config) (a, b *Link) {
	t.Helper()
	ls, _ := openFree(t, addr, 2, func(ports []netip.AddrPort) []Config {
		ca, cb := cfg, cfg
		ca.Peers, ca.Local = ports, ports[0]
		cb.Peers, cb.Local = ports, ports[1]
		return []Config{ca, cb}
	})
	return ls[0], ls[1]
}

// TestConformance runs the link conformance suite on unicast fan-out over
// the loopback interface, unprivileged, IPv4 and IPv6, with the offloads
// and without.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		addr netip.Addr
		cfg  Config
	}{
		// Loopback's MTU, 65536, makes frames of up to 64 KiB: the
		// staging check queues 640 of them before B reads, 20 MB,
		// which the default 4 MiB receive buffer would drop (forced
		// past net.core.rmem_max as root).
		{"fanout4", netip.MustParseAddr("127.0.0.1"), Config{RecvBuffer: 64 << 20}},
		{"fanout4-nooffload", netip.MustParseAddr("127.0.0.1"), Config{MTU: 9000, NoGSO: true, NoGRO: true}},
		{"fanout6", netip.MustParseAddr("::1"), Config{RecvBuffer: 64 << 20}},
		{"fanout4-mtu1500", netip.MustParseAddr("127.0.0.1"), Config{MTU: 1500}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if n := c.cfg.RecvBuffer; n > 0 && !recvBufferGranted(t, n) {
				t.Skipf("needs a receive buffer of %d MiB: CAP_NET_ADMIN (root), or net.core.rmem_max that large", n>>20)
			}
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				a, b := openPair(t, c.addr, c.cfg)
				return linktest.Pair{A: a, B: b}
			})
		})
	}
}

// recvBufferGranted reports whether a socket of this process gets a
// receive buffer of n bytes, as Open asks for it: forced (CAP_NET_ADMIN),
// or within net.core.rmem_max. Without it the staging check's frames
// overflow the buffer and are dropped, whatever the link does.
func recvBufferGranted(t *testing.T, n int) bool {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) == nil {
		return true
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n); err != nil {
		t.Fatal(err)
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		t.Fatal(err)
	}
	return got/2 >= n // the kernel reports twice what it granted
}

// openOn opens a link inside host h's namespace.
func openOn(t *testing.T, h *netns.Host, cfg Config) *Link {
	t.Helper()
	var l *Link
	if err := h.Do(func() (err error) {
		l, err = Open(cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestConformanceMulticast runs the suite on multicast links between two
// hosts of a netns segment, IPv4 and IPv6, and across a router
// (smcroute) with TTL 2.
func TestConformanceMulticast(t *testing.T) {
	netnstest.RequireRoot(t)
	for _, c := range []struct {
		name  string
		opts  netns.Options
		group string
		ttl   int
	}{
		{"ipv4", netns.Options{Hosts: 2, Addresses: true, Prefix: "rbuc4"}, "239.77.0.1:7001", 0},
		{"ipv6", netns.Options{Hosts: 2, Addresses: true, IPv6: true, Prefix: "rbuc6"}, "[ff05::77:1]:7001", 0},
		{"routed", netns.Options{Hosts: 2, Routed: "smcroute", Prefix: "rbucr"}, "239.77.0.2:7002", 2},
		{"routed6", netns.Options{Hosts: 2, Routed: "smcroute", IPv6: true, Prefix: "rbucs"}, "[ff05::77:2]:7002", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.opts.Routed == "smcroute" {
				if _, err := exec.LookPath("smcrouted"); err != nil {
					t.Skip("needs smcrouted (Debian package smcroute; scripts/ensure-deps.sh installs it)")
				}
			}
			topo := netnstest.Up(t, c.opts)
			cfg := Config{Group: netip.MustParseAddrPort(c.group), Interface: "eth0", TTL: c.ttl}
			if c.opts.Routed != "" {
				// smcrouted installs a sender's (S,G) route when its
				// first datagram reaches the router, and the kernel keeps
				// only a few datagrams meanwhile: have both senders'
				// routes in place before the suite counts frames.
				a, b := openOn(t, topo.Hosts[0], cfg), openOn(t, topo.Hosts[1], cfg)
				warmUp(t, a, b)
				warmUp(t, b, a)
				a.Close()
				b.Close()
			}
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				return linktest.Pair{A: openOn(t, topo.Hosts[0], cfg), B: openOn(t, topo.Hosts[1], cfg)}
			})
		})
	}
}

// warmUp sends from a until b receives.
func warmUp(t *testing.T, a, b *Link) {
	t.Helper()
	f := make([]byte, 64)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:], a.HardwareAddr())
	f[12], f[13] = 0x88, 0xb5
	rx := make([]link.Frame, 8)
	for range 50 {
		if _, err := a.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.Recv(time.Now().Add(100*time.Millisecond), rx); n > 0 {
			return
		}
	}
	t.Fatalf("no frame from %s reached %s in 50 tries", a.LocalAddr(), b.LocalAddr())
}
