// Package udp is the rbcast link over UDP/IP: the same Ethernet frames as
// on a segment, each carried whole in one UDP datagram, so that a group
// crosses routers, and runs where raw sockets and multicast are not to be
// had (clouds, container overlays). It needs no privilege. Cores,
// captures, the dissector and pcap-replay see the frames they see on
// Ethernet; docs/udp.md is the user's guide, docs/wire-format.md has the
// carriage.
//
// # Carriage
//
// A datagram's payload is one complete Ethernet II frame: destination
// MAC, source MAC, EtherType, then the rbcast frame, byte for byte what
// the runtime handed to Send. The 14 header bytes cost 1 % at a 1500-byte
// MTU and keep the link exact: Recv returns what Send was given (the
// conformance suite checks it byte for byte), and the destination MAC is
// what tells the link where a frame goes.
//
// # Members' MACs
//
// A member's identity is the address its datagrams come from, its local
// address (Config.Local: an address of the host and a port). Its MAC,
// HardwareAddr, is derived from it, MACOf: 02 followed by five bytes of
// the SHA-256 of the address and port, a locally administered unicast
// address. Every member computes every other's, so registration's member
// list (which names members by MAC), the cores' check of a frame's source
// MAC against it, and status displays mean what they mean on Ethernet.
// A receiver checks each frame's source MAC against its datagram's
// source address and drops a frame whose MAC is not that address's
// (Counters.Spoofed): a member cannot speak for another without also
// forging its IP address and port. So members must see each other's
// addresses unchanged: no NAT between them.
//
// # Where a frame goes
//
// Send looks at each frame's destination MAC:
//   - multicast or broadcast (the group's frames): in multicast mode one
//     datagram to Config.Group; in unicast fan-out mode one to each other
//     member;
//   - a member's MAC (NACKs, requests to the sequencer, repairs): one
//     datagram to that member, from the table of members the link knows
//     (static peers, members it has heard from, members hellos named);
//   - a MAC the link does not know: as a group frame (a switch floods
//     what it has not learned); receivers drop a unicast frame that is
//     not to them.
//
// The link is a link.Stager and link.NowSender: Stage copies frames into
// a queue in software and Kick sends it, so the runtime stages under its
// lock and a kicker goroutine spends the system calls (a fan-out send is
// one datagram per member); SendNow sends past the queue. It is a
// link.Waker, as link/afpacket.
//
// Runs of frames of equal size to one destination leave in one
// sendmmsg message with UDP_SEGMENT (GSO), up to 64 datagrams; receives
// use recvmmsg and, where the kernel has it, UDP_GRO, which returns up to
// 64 KiB of one sender's datagrams at once. Both are on unless
// Config.NoGSO / NoGRO; Counters says what they did.
//
// # Modes
//
// Multicast: two sockets. One is bound to the group's address and port
// (SO_REUSEADDR, so members on one host share it) and joined to the group
// on Config.Interface; it receives the group's datagrams. The other is
// bound to the member's own address (by default the interface's first
// address of the group's family and a free port); every datagram leaves
// from it, with the multicast TTL, interface and loopback set, and it
// receives unicast. Recv waits on both through an epoll instance that
// Go's netpoller waits on.
//
// Unicast fan-out: one socket, bound to the member's address, which is
// by default the entry of Config.Peers that this host can bind (every
// member can be given the same list). With a static list, datagrams from
// addresses outside it are dropped. With Config.Learn the list holds
// seeds: the link says hello (a frame of ControlEtherType, which Recv
// does not return) to the members it knows every HelloInterval, listing
// the members it has heard from and how long ago; a member that hears of
// one it did not know asks it at once, and one asked by a newcomer
// answers at once, so a new member learns the group from one seed within
// a few round trips. A member nobody has heard from for PeerTimeout is
// forgotten (the age in each hello keeps a dead member from being passed
// around for ever).
//
// # MTU
//
// The link's MTU (the carried Ethernet payload, what cores size frames
// by) is the path MTU less the IP (20 or 40), UDP (8) and Ethernet (14)
// headers: 1458 bytes on IPv4 at 1500, 1438 on IPv6. The path MTU is the
// interface's (multicast) or the smallest route MTU to a static peer,
// capped by Config.MTU. The kernel's path MTU cache is not used. IPv4
// datagrams leave without Don't Fragment, because Linux's multicast
// routing drops a GSO send with DF whose whole length exceeds the MTU
// (it checks before segmenting); a hop with a smaller MTU then fragments
// them. IPv6 routers drop what is too large. Either way, give Config.MTU
// when the path has a hop smaller than the ends. Members must agree on
// the MTU (registration compares it).
package udp
