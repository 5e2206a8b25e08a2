package udp

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockaddr is a socket address in the kernel's layout (sockaddr_in or
// sockaddr_in6), built once per peer so that sendmmsg names it without
// converting or allocating.
type sockaddr struct {
	raw unix.RawSockaddrInet6 // large enough for either; sockaddr_in at its start
	len uint32
}

func makeSockaddr(a netip.AddrPort, scope uint32) sockaddr {
	var s sockaddr
	if a.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], a.Port())
		sa.Addr = a.Addr().As4()
		s.len = unix.SizeofSockaddrInet4
		return s
	}
	s.raw.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&s.raw.Port))[:], a.Port())
	s.raw.Addr = a.Addr().As16()
	s.raw.Scope_id = scope
	s.len = unix.SizeofSockaddrInet6
	return s
}

func (s *sockaddr) ptr() *byte { return (*byte)(unsafe.Pointer(&s.raw)) }

// parseSockaddr reads the address recvmmsg wrote: the address without
// zone, and the scope of an IPv6 one.
func parseSockaddr(raw *unix.RawSockaddrInet6) (netip.AddrPort, uint32, bool) {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&raw.Port))[:])
	switch raw.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), 0, true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(raw.Addr).Unmap(), port), raw.Scope_id, true
	}
	return netip.AddrPort{}, 0, false
}

// toUnix is a for the x/sys/unix calls of setup (bind, connect).
func toUnix(a netip.AddrPort, scope uint32) unix.Sockaddr {
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16(), ZoneId: scope}
}

// fromUnix is the inverse of toUnix (getsockname).
func fromUnix(sa unix.Sockaddr) (netip.AddrPort, uint32) {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)), 0
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port)), sa.ZoneId
	}
	return netip.AddrPort{}, 0
}
