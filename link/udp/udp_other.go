//go:build !linux

package udp

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/rbcast/rbcast/link"
)

var _ link.Waker = (*Link)(nil)

// errUnsupported is what every call returns off Linux: the link batches
// with sendmmsg and recvmmsg, which are Linux's.
var errUnsupported = errors.New("udp: the UDP link runs on Linux only")

// Link is a UDP link. Off Linux it cannot be opened.
type Link struct{}

// Counters are the link's own counts (see the Linux build).
type Counters struct{}

// sockaddr has nothing to hold off Linux.
type sockaddr struct{}

func makeSockaddr(netip.AddrPort, uint32) sockaddr { return sockaddr{} }

// Open reports that the link is not available on this operating system.
func Open(cfg Config) (*Link, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, &net.OpError{Op: "listen", Net: "udp", Err: errUnsupported}
}

func (*Link) Send([][]byte) (int, error)                       { return 0, errUnsupported }
func (*Link) Recv(time.Time, []link.Frame) (int, error)        { return 0, errUnsupported }
func (*Link) MTU() int                                         { return 0 }
func (*Link) HardwareAddr() net.HardwareAddr                   { return nil }
func (*Link) LocalAddr() netip.AddrPort                        { return netip.AddrPort{} }
func (*Link) PeerAddr(net.HardwareAddr) (netip.AddrPort, bool) { return netip.AddrPort{}, false }
func (*Link) Stats() (link.Stats, error)                       { return link.Stats{}, errUnsupported }
func (*Link) Counters() Counters                               { return Counters{} }
func (*Link) Close() error                                     { return errUnsupported }

// Wake does nothing: no Recv waits off Linux.
func (*Link) Wake() {}
