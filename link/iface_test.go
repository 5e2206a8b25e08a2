package link

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestLookupInterfaceErrors(t *testing.T) {
	_, err := LookupInterface("rbnosuch0")
	if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), `interface "rbnosuch0": no such network interface`) {
		t.Fatalf("missing interface: %v", err)
	}
	// Loopback exists everywhere and is up, with an MTU above MinMTU.
	if ifi, err := LookupInterface("lo"); err != nil || ifi.Name != "lo" {
		t.Fatalf("lo: %v", err)
	}
}

func TestInterfaceErrorTexts(t *testing.T) {
	cases := []struct {
		err  *InterfaceError
		kind error
		text string
	}{
		{&InterfaceError{Name: "eth9", Err: ErrInterfaceDown}, ErrInterfaceDown, "interface \"eth9\" is down (bring it up with `ip link set eth9 up`)"},
		{&InterfaceError{Name: "eth9", Err: ErrMTUTooSmall, MTU: 500}, ErrMTUTooSmall, `interface "eth9": MTU 500 is too small for rbcast frames (need at least 576)`},
		{&InterfaceError{Name: "tun0", Err: ErrNotEthernet}, ErrNotEthernet, `interface "tun0" has no Ethernet address (a tun device or an IP tunnel carries no Ethernet frames); use an Ethernet interface: a NIC, a veth, a bridge or a tap`},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.kind) || c.err.Error() != c.text {
			t.Errorf("got %q, want %q", c.err.Error(), c.text)
		}
	}
}

func TestSocketErrorNamesCapability(t *testing.T) {
	err := SocketError("socket", "eth0", syscall.EPERM)
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("EPERM does not map to ErrPermission: %v", err)
	}
	for _, want := range []string{"CAP_NET_RAW", "setcap cap_net_raw+ep", "eth0", "socket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "socket" {
		t.Fatalf("not a *net.OpError naming the op: %#v", err)
	}
	if err := SocketError("bind", "eth0", syscall.ENODEV); errors.Is(err, ErrPermission) {
		t.Fatalf("ENODEV reported as a permission problem: %v", err)
	}
}
