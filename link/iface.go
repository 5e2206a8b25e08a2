package link

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// MinMTU is the smallest interface MTU rbcast accepts: the fixed frame
// header plus room for a useful payload. frame.MinMTU is the authority on
// the header size; this is kept equal to it by a test in frame.
const MinMTU = 576

// InterfaceError says what was wrong with an interface and which one.
type InterfaceError struct {
	Name string // interface name as given
	Err  error  // ErrNoInterface, ErrInterfaceDown, ErrMTUTooSmall, ErrNotEthernet
	MTU  int    // the interface's MTU, for ErrMTUTooSmall
}

func (e *InterfaceError) Error() string {
	switch {
	case errors.Is(e.Err, ErrMTUTooSmall):
		return fmt.Sprintf("interface %q: MTU %d is too small for rbcast frames (need at least %d)", e.Name, e.MTU, MinMTU)
	case errors.Is(e.Err, ErrInterfaceDown):
		return fmt.Sprintf("interface %q is down (bring it up with `ip link set %s up`)", e.Name, e.Name)
	case errors.Is(e.Err, ErrNoInterface):
		return fmt.Sprintf("interface %q: %v", e.Name, e.Err)
	case errors.Is(e.Err, ErrNotEthernet):
		return fmt.Sprintf("interface %q has no Ethernet address (a tun device or an IP tunnel carries no Ethernet frames); use an Ethernet interface: a NIC, a veth, a bridge or a tap", e.Name)
	}
	return fmt.Sprintf("interface %q: %v", e.Name, e.Err)
}

func (e *InterfaceError) Unwrap() error { return e.Err }

// LookupInterface finds the named interface and checks that rbcast can use
// it: it exists, carries Ethernet frames (a 6-byte hardware address, or
// loopback), is up, and has an MTU of at least MinMTU.
func LookupInterface(name string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, &InterfaceError{Name: name, Err: ErrNoInterface}
	}
	if len(ifi.HardwareAddr) != 6 && ifi.Flags&net.FlagLoopback == 0 {
		return nil, &InterfaceError{Name: name, Err: ErrNotEthernet}
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, &InterfaceError{Name: name, Err: ErrInterfaceDown}
	}
	if ifi.MTU < MinMTU {
		return nil, &InterfaceError{Name: name, Err: ErrMTUTooSmall, MTU: ifi.MTU}
	}
	return ifi, nil
}

// SocketError converts an error from socket(2)/bind(2) into one that names
// the interface, and maps EPERM/EACCES to ErrPermission.
func SocketError(op, ifname string, err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		err = fmt.Errorf("%w (%v)", ErrPermission, err)
	}
	return &net.OpError{Op: op, Net: "packet", Addr: ifaceAddr(ifname), Err: err}
}

type ifaceAddr string

func (a ifaceAddr) Network() string { return "packet" }
func (a ifaceAddr) String() string  { return string(a) }
