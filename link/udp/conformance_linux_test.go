package udp

import (
	"net/netip"
	"testing"

	"github.com/rbcast/rbcast/link/linktest"
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

// openPair opens two fan-out links on addr with cfg's tuning, each
// listing both.
func openPair(t *testing.T, addr netip.Addr, cfg Config) (a, b *Link) {
	t.Helper()
	ports := freePorts(t, addr, 2)
	open := func(self netip.AddrPort) *Link {
		c := cfg
		c.Peers = ports
		c.Local = self
		l, err := Open(c)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	return open(ports[0]), open(ports[1])
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
		{"fanout4", netip.MustParseAddr("127.0.0.1"), Config{}},
		{"fanout4-nooffload", netip.MustParseAddr("127.0.0.1"), Config{NoGSO: true, NoGRO: true}},
		{"fanout6", netip.MustParseAddr("::1"), Config{}},
		{"fanout4-mtu1500", netip.MustParseAddr("127.0.0.1"), Config{MTU: 1500}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				a, b := openPair(t, c.addr, c.cfg)
				return linktest.Pair{A: a, B: b}
			})
		})
	}
}
