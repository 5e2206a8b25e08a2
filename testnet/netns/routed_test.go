package netns_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// udpListen opens a UDP socket on h: bound to group:port and joined to
// the group on eth0 for a multicast group, else to h's address.
func udpListen(t *testing.T, h *netns.Host, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() error {
		var err error
		if !addr.Addr().IsMulticast() {
			c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
			return err
		}
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err = net.ListenMulticastUDP("udp", ifi, net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// udpSender opens a UDP socket on h whose multicast leaves by eth0 with
// the given TTL.
func udpSender(t *testing.T, h *netns.Host, v6 bool, ttl int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() error {
		network := "udp4"
		if v6 {
			network = "udp6"
		}
		var err error
		if c, err = net.ListenUDP(network, nil); err != nil {
			return err
		}
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		if v6 {
			p := ipv6.NewPacketConn(c)
			if err := p.SetMulticastInterface(ifi); err != nil {
				return err
			}
			return p.SetMulticastHopLimit(ttl)
		}
		p := ipv4.NewPacketConn(c)
		if err := p.SetMulticastInterface(ifi); err != nil {
			return err
		}
		return p.SetMulticastTTL(ttl)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// count sends n datagrams from tx to dst, 200 µs apart, and counts those
// rx receives until it has been quiet for 300 ms.
func count(t *testing.T, tx, rx *net.UDPConn, dst netip.AddrPort, n int) int {
	t.Helper()
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 1500)
		c := 0
		for {
			rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := rx.ReadFromUDPAddrPort(buf); err != nil {
				got <- c
				return
			}
			c++
		}
	}()
	for range n {
		if _, err := tx.WriteToUDPAddrPort([]byte("rbcast routed test"), dst); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return <-got
}

func requireSmcroute(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("smcrouted"); err != nil {
		t.Skip("needs smcrouted (Debian package smcroute; scripts/ensure-deps.sh installs it)")
	}
}

// A routed topology with smcroute forwards multicast of TTL 2 or more
// between its segments, IPv4 and IPv6, and unicast; TTL 1 stays on its
// segment; loss on the router drops about what it was told to; down
// stops the router's smcrouted.
func TestRoutedMulticast(t *testing.T) {
	requireSmcroute(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Routed: "smcroute", IPv6: true})
	if topo.RouterNamespace != topo.Prefix+"rt" || topo.Hosts[1].Segment != 0 || topo.Hosts[2].Segment != 1 {
		t.Fatalf("router %q, segments %d %d %d", topo.RouterNamespace, topo.Hosts[0].Segment, topo.Hosts[1].Segment, topo.Hosts[2].Segment)
	}
	if got := topo.Hosts[2].IP.String(); got != "10.77.1.3" {
		t.Fatalf("host 2's address is %s, want 10.77.1.3", got)
	}
	for _, g := range []string{"239.1.2.3:5000", "[ff05::1:2]:5000"} {
		group := netip.MustParseAddrPort(g)
		v6 := group.Addr().Is6()
		near := udpListen(t, topo.Hosts[1], group)
		far := udpListen(t, topo.Hosts[2], group)
		tx := udpSender(t, topo.Hosts[0], v6, 1)
		if got := count(t, tx, near, group, 20); got != 20 {
			t.Errorf("%s TTL 1: the host on the sender's segment got %d of 20", group, got)
		}
		if got := count(t, tx, far, group, 20); got != 0 {
			t.Errorf("%s TTL 1: the host across the router got %d of 20, want none", group, got)
		}
		tx2 := udpSender(t, topo.Hosts[0], v6, 2)
		if got := count(t, tx2, far, group, 20); got != 20 {
			t.Errorf("%s TTL 2: the host across the router got %d of 20", group, got)
		}
	}
	// Unicast across, and loss on the router (UDP only).
	dst := netip.AddrPortFrom(netip.MustParseAddr(topo.Hosts[2].IP.String()), 6000)
	rx := udpListen(t, topo.Hosts[2], dst)
	tx := udpSender(t, topo.Hosts[0], false, 1)
	if got := count(t, tx, rx, dst, 50); got != 50 {
		t.Errorf("unicast across the router: %d of 50 arrived", got)
	}
	if err := topo.SetRouterLoss(netns.From0, netns.Loss{Percent: 30, UDP: true}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, tx, rx, dst, 1000); got < 600 || got > 800 {
		t.Errorf("30%% loss on the router: %d of 1000 arrived, want 600..800", got)
	}
	back := udpListen(t, topo.Hosts[0], netip.AddrPortFrom(netip.MustParseAddr(topo.Hosts[0].IP.String()), 6000))
	if got := count(t, udpSender(t, topo.Hosts[2], false, 1), back, netip.AddrPortFrom(netip.MustParseAddr(topo.Hosts[0].IP.String()), 6000), 100); got != 100 {
		t.Errorf("loss 0to1 only: %d of 100 arrived the other way", got)
	}
	if err := topo.SetRouterLoss(netns.BothWays, netns.Loss{}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, tx, rx, dst, 100); got != 100 {
		t.Errorf("after removing the loss: %d of 100 arrived", got)
	}
	pidFile := "/run/rbcast-netns/" + topo.Prefix + "/smcroute.pid"
	if _, err := os.Stat(pidFile); err != nil {
		t.Fatalf("smcrouted's pid file: %v", err)
	}
	if err := topo.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close, smcrouted's pid file: %v; want it removed", err)
	}
}

// The no-multicast variant routes unicast and no multicast.
func TestRoutedNoMulticast(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Routed: "none"})
	group := netip.MustParseAddrPort("239.1.2.3:5000")
	far := udpListen(t, topo.Hosts[1], group)
	if got := count(t, udpSender(t, topo.Hosts[0], false, 8), far, group, 20); got != 0 {
		t.Errorf("multicast with TTL 8 crossed a router without multicast routing: %d of 20", got)
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr(topo.Hosts[1].IP.String()), 6000)
	if got := count(t, udpSender(t, topo.Hosts[0], false, 1), udpListen(t, topo.Hosts[1], dst), dst, 20); got != 20 {
		t.Errorf("unicast across the router: %d of 20", got)
	}
}
