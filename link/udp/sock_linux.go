package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// newSocket opens a non-blocking UDP socket of family fam with the options
// every socket of the link has: buffers, receive timestamps, the drop
// counter, and no use of the kernel's path MTU cache (the link's MTU is
// fixed at Open). IPv4 datagrams leave without Don't Fragment
// (IP_PMTUDISC_DONT): Linux's multicast forwarding (ipmr) compares a GSO
// send's whole length with the MTU before segmenting it and drops it if
// DF is set, so with DF no GSO send would cross a multicast router; and a
// hop with a smaller MTU then fragments rather than drops. IPv6 routers
// never fragment (IPV6_PMTUDISC_PROBE: no local fragmentation either).
func newSocket(fam int, cfg *Config) (int, error) {
	domain := unix.AF_INET
	if fam == 6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	opts := []sockOpt{
		{name: "SO_RCVBUF", level: unix.SOL_SOCKET, force: unix.SO_RCVBUFFORCE, opt: unix.SO_RCVBUF, value: cfg.RecvBuffer},
		{name: "SO_SNDBUF", level: unix.SOL_SOCKET, force: unix.SO_SNDBUFFORCE, opt: unix.SO_SNDBUF, value: cfg.SendBuffer},
		{name: "SO_TIMESTAMPNS", level: unix.SOL_SOCKET, opt: unix.SO_TIMESTAMPNS, value: 1},
		{name: "SO_RXQ_OVFL", level: unix.SOL_SOCKET, opt: unix.SO_RXQ_OVFL, value: 1},
	}
	if fam == 6 {
		opts = append(opts,
			sockOpt{name: "IPV6_V6ONLY", level: unix.IPPROTO_IPV6, opt: unix.IPV6_V6ONLY, value: 1},
			sockOpt{name: "IPV6_MTU_DISCOVER", level: unix.IPPROTO_IPV6, opt: unix.IPV6_MTU_DISCOVER, value: unix.IPV6_PMTUDISC_PROBE})
	} else {
		opts = append(opts, sockOpt{name: "IP_MTU_DISCOVER", level: unix.IPPROTO_IP, opt: unix.IP_MTU_DISCOVER, value: unix.IP_PMTUDISC_DONT})
	}
	for _, o := range opts {
		var err error
		if o.force != 0 {
			if err = unix.SetsockoptInt(fd, o.level, o.force, o.value); err != nil {
				err = unix.SetsockoptInt(fd, o.level, o.opt, o.value)
			}
		} else {
			err = unix.SetsockoptInt(fd, o.level, o.opt, o.value)
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("setting %s: %w", o.name, os.NewSyscallError("setsockopt", err))
		}
	}
	return fd, nil
}

// sockOpt is one integer socket option; force, if set, is the option that
// sets a buffer size past the sysctl limit (CAP_NET_ADMIN), tried first.
type sockOpt struct {
	name              string
	level, opt, force int
	value             int
}

// enableGRO asks for UDP receive offload; it reports whether the kernel
// has it.
func enableGRO(fd int) bool {
	return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
}

// hasGSO reports whether the kernel has UDP segmentation offload.
func hasGSO(fd int) bool {
	_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err == nil
}

// setMulticastSend points fd's multicast at the interface, with the TTL
// and loopback asked for.
func setMulticastSend(fd, fam int, ifi *net.Interface, cfg *Config) error {
	loop := 1
	if cfg.NoLoopback {
		loop = 0
	}
	if fam == 6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi.Index); err != nil {
			return fmt.Errorf("setting IPV6_MULTICAST_IF: %w", os.NewSyscallError("setsockopt", err))
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, cfg.TTL); err != nil {
			return fmt.Errorf("setting IPV6_MULTICAST_HOPS: %w", os.NewSyscallError("setsockopt", err))
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, loop); err != nil {
			return fmt.Errorf("setting IPV6_MULTICAST_LOOP: %w", os.NewSyscallError("setsockopt", err))
		}
		return nil
	}
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(ifi.Index)}); err != nil {
		return fmt.Errorf("setting IP_MULTICAST_IF: %w", os.NewSyscallError("setsockopt", err))
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, cfg.TTL); err != nil {
		return fmt.Errorf("setting IP_MULTICAST_TTL: %w", os.NewSyscallError("setsockopt", err))
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, loop); err != nil {
		return fmt.Errorf("setting IP_MULTICAST_LOOP: %w", os.NewSyscallError("setsockopt", err))
	}
	return nil
}

// joinGroup binds fd to the group's address and port (several sockets
// of one host may: SO_REUSEADDR) and joins the group on the interface.
// Bound to the group's address, the socket receives that group's
// datagrams only, not the host's unicast on the same port.
func joinGroup(fd, fam int, group netip.AddrPort, ifi *net.Interface) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("setting SO_REUSEADDR: %w", os.NewSyscallError("setsockopt", err))
	}
	scope := uint32(0)
	if fam == 6 && (group.Addr().IsLinkLocalMulticast() || group.Addr().IsInterfaceLocalMulticast()) {
		scope = uint32(ifi.Index)
	}
	if err := unix.Bind(fd, toUnix(group, scope)); err != nil {
		return fmt.Errorf("binding %s: %w", group, os.NewSyscallError("bind", err))
	}
	if fam == 6 {
		// Only the groups this socket joined, not every group the host has.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
		mreq := &unix.IPv6Mreq{Multiaddr: group.Addr().As16(), Interface: uint32(ifi.Index)}
		if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq); err != nil {
			return fmt.Errorf("joining %s on %s: %w", group.Addr(), ifi.Name, os.NewSyscallError("setsockopt", err))
		}
		return nil
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
	mreq := &unix.IPMreqn{Multiaddr: group.Addr().As4(), Ifindex: int32(ifi.Index)}
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
		return fmt.Errorf("joining %s on %s: %w", group.Addr(), ifi.Name, os.NewSyscallError("setsockopt", err))
	}
	return nil
}

// interfaceAddr is ifi's address of family fam that a member there is
// known by: IPv4's first; IPv6's first global one, else its link-local
// one (with its scope, the interface).
func interfaceAddr(ifi *net.Interface, fam int) (netip.Addr, uint32, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("listing the addresses of %s: %w", ifi.Name, err)
	}
	var linkLocal netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case fam == 4 && ip.Is4():
			return ip, 0, nil
		case fam == 6 && ip.Is6() && ip.IsLinkLocalUnicast():
			if !linkLocal.IsValid() {
				linkLocal = ip
			}
		case fam == 6 && ip.Is6():
			return ip, 0, nil
		}
	}
	if linkLocal.IsValid() {
		return linkLocal, uint32(ifi.Index), nil
	}
	return netip.Addr{}, 0, fmt.Errorf("interface %s has no IPv%d address (give the link one with Config.Local)", ifi.Name, fam)
}

// bindLocal binds fd to local (port 0: a free one) and returns the address
// bound.
func bindLocal(fd int, local netip.AddrPort, scope uint32) (netip.AddrPort, uint32, error) {
	if err := unix.Bind(fd, toUnix(local, scope)); err != nil {
		return netip.AddrPort{}, 0, os.NewSyscallError("bind", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, 0, os.NewSyscallError("getsockname", err)
	}
	a, s := fromUnix(sa)
	return a, s, nil
}

// bindPeer binds fd to the first of peers that is an address of this
// host and free: a member given the group's list finds itself in it.
func bindPeer(fd int, peers []netip.AddrPort) (netip.AddrPort, error) {
	var inUse []string
	for _, p := range peers {
		err := unix.Bind(fd, toUnix(p, 0))
		switch {
		case err == nil:
			return p, nil
		case errors.Is(err, unix.EADDRINUSE):
			inUse = append(inUse, p.String())
		case errors.Is(err, unix.EADDRNOTAVAIL):
		default:
			return netip.AddrPort{}, fmt.Errorf("binding %s: %w", p, os.NewSyscallError("bind", err))
		}
	}
	if len(inUse) > 0 {
		return netip.AddrPort{}, fmt.Errorf("every address of Peers on this host is in use (%v): is the group already running here? Give this member's address with Config.Local", inUse)
	}
	return netip.AddrPort{}, fmt.Errorf("no address of Peers is one of this host's: give this member's address with Config.Local")
}

// routeMTU is the MTU of the route to dst: a UDP socket connected to it
// (which sends nothing) and IP_MTU.
func routeMTU(fam int, dst netip.AddrPort, scope uint32) (int, error) {
	domain, level, opt := unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU
	if fam == 6 {
		domain, level, opt = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, toUnix(dst, scope)); err != nil {
		return 0, fmt.Errorf("no route to %s: %w", dst, os.NewSyscallError("connect", err))
	}
	mtu, err := unix.GetsockoptInt(fd, level, opt)
	if err != nil {
		return 0, os.NewSyscallError("getsockopt", err)
	}
	return mtu, nil
}

// localMTU is the MTU of the interface that has address a.
func localMTU(a netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, fmt.Errorf("listing interfaces: %w", err)
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.WithZone("") {
					return ifi.MTU, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no interface has address %s, and no peer has a route: cannot tell the MTU (give Config.MTU)", a)
}
