//go:build !linux

package ring

import (
	"errors"
	"net"
	"time"

	"github.com/rbcast/rbcast/link"
)

// Link is an AF_PACKET ring link; it exists only on Linux.
type Link struct{}

var (
	_ link.Waker       = (*Link)(nil)
	_ link.Stager      = (*Link)(nil)
	_ link.NowSender   = (*Link)(nil)
	_ link.GroupFilter = (*Link)(nil)
)

var errNotLinux = errors.New("ring: AF_PACKET rings need Linux")

// Open fails: AF_PACKET rings exist only on Linux.
func Open(ifname string, cfg Config) (*Link, error) { return nil, errNotLinux }

func (l *Link) Send(frames [][]byte) (int, error)                         { return 0, errNotLinux }
func (l *Link) Recv(deadline time.Time, frames []link.Frame) (int, error) { return 0, errNotLinux }
func (l *Link) MTU() int                                                  { return 0 }
func (l *Link) HardwareAddr() net.HardwareAddr                            { return nil }
func (l *Link) Stats() (link.Stats, error)                                { return link.Stats{}, errNotLinux }
func (l *Link) Close() error                                              { return nil }
func (l *Link) Stage(frames [][]byte) (int, error)                        { return 0, errNotLinux }
func (l *Link) Kick() error                                               { return errNotLinux }
func (l *Link) SendNow(frames [][]byte) (int, error)                      { return 0, errNotLinux }
func (l *Link) SetGroups(groups []uint32) error                           { return errNotLinux }

// Wake does nothing: no Recv waits off Linux.
func (l *Link) Wake() {}

// Sockets is a ring link in two steps; it exists only on Linux.
type Sockets struct{}

// OpenSockets fails: AF_PACKET rings exist only on Linux.
func OpenSockets(ifname string, cfg Config) (*Sockets, error) { return nil, errNotLinux }

func (s *Sockets) MTU() int                       { return 0 }
func (s *Sockets) HardwareAddr() net.HardwareAddr { return nil }
func (s *Sockets) Setup() (*Link, error)          { return nil, errNotLinux }
func (s *Sockets) Close() error                   { return nil }
