//go:build !linux

package afpacket

import (
	"errors"
	"net"
	"time"

	"github.com/rbcast/rbcast/link"
)

var (
	_ link.Waker       = (*Link)(nil)
	_ link.GroupFilter = (*Link)(nil)
)

// errUnsupported is what every call returns off Linux: packet sockets are
// a Linux facility.
var errUnsupported = errors.New("afpacket: AF_PACKET sockets exist only on Linux")

// Link is an AF_PACKET link. Off Linux it cannot be opened.
type Link struct{}

// Open reports that AF_PACKET is not available on this operating system.
func Open(ifname string, cfg Config) (*Link, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, &net.OpError{Op: "listen", Net: "packet", Err: errUnsupported}
}

func (*Link) Send([][]byte) (int, error)                { return 0, errUnsupported }
func (*Link) Recv(time.Time, []link.Frame) (int, error) { return 0, errUnsupported }
func (*Link) MTU() int                                  { return 0 }
func (*Link) HardwareAddr() net.HardwareAddr            { return nil }
func (*Link) Stats() (link.Stats, error)                { return link.Stats{}, errUnsupported }
func (*Link) Close() error                              { return errUnsupported }
func (*Link) SetGroups([]uint32) error                  { return errUnsupported }

// Wake does nothing: no Recv waits off Linux.
func (l *Link) Wake() {}
