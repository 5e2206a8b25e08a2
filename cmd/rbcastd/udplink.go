package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/udp"
)

// udpFlags are run's flags of -link udp (link/udp, docs/udp.md).
type udpFlags struct {
	group, peers, seeds, listen string
	ttl, mtu                    int
	loop, gso, gro              bool
}

func (u *udpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.group, "udp-group", "", "with -link udp: the group's IP multicast `ADDR:PORT` (IPv6 as [ADDR]:PORT), joined on -i")
	fs.StringVar(&u.peers, "udp-peers", "", "with -link udp: unicast fan-out to these members, `ADDR:PORT,...` (this member's own address among them; the same list for every member)")
	fs.StringVar(&u.seeds, "udp-seed", "", "with -link udp: unicast fan-out, learning the members from these seed members `ADDR:PORT,...` (give -udp-listen)")
	fs.StringVar(&u.listen, "udp-listen", "", "with -link udp: this member's own `ADDR:PORT`, its identity (default: -udp-group: -i's first address and a free port; -udp-peers: the entry that is this host's)")
	fs.IntVar(&u.ttl, "udp-ttl", 0, "with -udp-group: multicast TTL / hop limit, 1..255 (default 1, the local segment; each router takes one)")
	fs.IntVar(&u.mtu, "udp-mtu", 0, "with -link udp: cap the IP packets at this many `bytes` (default: the interface's or the route's MTU); all members must agree")
	fs.BoolVar(&u.loop, "udp-loop", true, "with -udp-group: deliver the group's datagrams to this host's other members too (IP_MULTICAST_LOOP); false saves a receive per send when each host runs one member")
	fs.BoolVar(&u.gso, "udp-gso", true, "with -link udp: send runs of equal frames with UDP segmentation offload where the kernel has it")
	fs.BoolVar(&u.gro, "udp-gro", true, "with -link udp: receive with UDP receive offload where the kernel has it")
}

// given reports whether any -udp-* flag was set (they need -link udp).
func (u *udpFlags) given(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) {
		set = set || strings.HasPrefix(fl.Name, "udp-")
	})
	return set
}

// config checks the flags and builds the link's configuration.
func (u *udpFlags) config(iface string, etherType uint16) (udp.Config, error) {
	cfg := udp.Config{Interface: iface, TTL: u.ttl, MTU: u.mtu, EtherType: etherType,
		NoLoopback: !u.loop, NoGSO: !u.gso, NoGRO: !u.gro}
	modes := 0
	for _, s := range []string{u.group, u.peers, u.seeds} {
		if s != "" {
			modes++
		}
	}
	if modes != 1 {
		return cfg, errors.New("-link udp needs exactly one of -udp-group ADDR:PORT (multicast), -udp-peers ADDR:PORT,... (unicast fan-out) and -udp-seed ADDR:PORT,... (fan-out learning the members)")
	}
	var err error
	switch {
	case u.group != "":
		if cfg.Group, err = netip.ParseAddrPort(u.group); err != nil {
			return cfg, fmt.Errorf("-udp-group is %q: want a multicast ADDR:PORT like 239.1.1.1:7000 or [ff05::1:7]:7000", u.group)
		}
		if iface == "" {
			return cfg, errors.New("-udp-group needs -i IFACE: the interface the group is joined on")
		}
	case u.peers != "":
		if cfg.Peers, err = udp.ParseAddrPorts(u.peers); err != nil {
			return cfg, fmt.Errorf("-udp-peers: %v", err)
		}
	default:
		if cfg.Peers, err = udp.ParseAddrPorts(u.seeds); err != nil {
			return cfg, fmt.Errorf("-udp-seed: %v", err)
		}
		cfg.Learn = true
		if u.listen == "" && iface == "" {
			return cfg, errors.New("-udp-seed needs -udp-listen ADDR:PORT (or -i IFACE and this member's address among the seeds): a learning member must know its own address")
		}
	}
	if u.listen != "" {
		if cfg.Local, err = netip.ParseAddrPort(u.listen); err != nil {
			return cfg, fmt.Errorf("-udp-listen is %q: want ADDR:PORT", u.listen)
		}
	}
	if u.ttl != 0 && cfg.Group == (netip.AddrPort{}) {
		return cfg, errors.New("-udp-ttl applies to -udp-group (multicast) only")
	}
	if u.ttl < 0 || u.ttl > 255 {
		return cfg, fmt.Errorf("-udp-ttl is %d, want 1..255 (0: 1)", u.ttl)
	}
	return cfg, nil
}

// openUDP opens the UDP link and logs who this member is on it.
func openUDP(cfg udp.Config, log *slog.Logger) (*udp.Link, error) {
	if cfg.EtherType == 0 {
		cfg.EtherType = frame.EtherType
	}
	l, err := udp.Open(cfg)
	if err != nil {
		// link/udp names its Config's fields: name run's flags.
		return nil, errors.New(strings.NewReplacer("of Peers", "of -udp-peers", "with Config.Local", "with -udp-listen ADDR:PORT").Replace(err.Error()))
	}
	c := l.Counters()
	mode := "multicast " + cfg.Group.String()
	if !cfg.Multicast() {
		mode = fmt.Sprintf("unicast fan-out to %d members", c.Peers)
		if cfg.Learn {
			mode = fmt.Sprintf("unicast fan-out learning from %d seeds", len(cfg.Peers))
		}
	}
	log.Info("rbcastd: udp link", "local", l.LocalAddr().String(), "mac", l.HardwareAddr().String(), "mode", mode, "mtu", l.MTU(), "gso", c.GSO, "gro", c.GRO)
	return l, nil
}
