package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/internal/privs"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/link/udp"
	"github.com/rbcast/rbcast/reliable"
)

const runText = `Joins group G on interface IFACE and serves local programs on a Unix
SOCK_SEQPACKET socket (docs/local-api.md).

Under -order fifo the membership changes (docs/membership.md): a daemon
joins the running group, or, when none runs, founds it together with
the daemons it hears, once -members N of them (itself included) are
there. A daemon that crashed and is started again rejoins with a new
incarnation; members that fail or leave are removed; every change is an
agreed view, shown by 'rbcastd status'. A daemon the group went on
without while it ran (a member stopped hearing it, its side of a
partition lost, or under -order total it was in a minority) joins again
by itself, as a new incarnation with the same -node; its clients'
connections end with an error that says so (docs/local-api.md,
"Rejoining"). -node ID asks for that member id (the lowest free one
otherwise; if ID is taken, the daemon exits with an error). -max-members
bounds the group.

-order total orders every message the same at every member. With
-membership views it is the Agreed level over the changing membership
(in each view the lowest id orders; members that move to the next view
together deliver the same sequence); by default, and with -membership
registered, the group is fixed when it starts: it starts once N members have registered with the registration
server; exactly one daemon runs with -node 0 and is that server (member
0); the others omit -node and are given the lowest free id, or ask for
one with -node ID.

Needs CAP_NET_RAW to open the link (grant it with
'setcap cap_net_raw+ep rbcastd', or run from the systemd unit in dist/);
every capability is dropped once the link is open (run as root, it keeps
CAP_SETPCAP alone until it has joined, then empties the bounding set and
drops that too). -link udp carries the same frames in UDP datagrams,
across routers, and needs no capability:
-udp-group ADDR:PORT (IP multicast, joined on -i) or -udp-peers
ADDR:PORT,... (unicast fan-out; -i not needed); see docs/udp.md.

SIGTERM or SIGINT leaves the group cleanly: new messages are refused,
everything already accepted is acknowledged by (-order total: held by)
the live members, local readers get the last deliveries, then the daemon
exits.

Flags may also come from -config FILE: one 'name value' per line (flag
names without the dash, '#' comments); the command line wins.
`

type runFlags struct {
	iface, order, socket, capture, metrics, config, linkKind, mode, logLevel, logFormat string
	group                                                                               uint64
	members, window, maxMembers, procs                                                  int
	membership                                                                          string
	node                                                                                string
	socketMode                                                                          string
	failure, heartbeat, joinTimeout, leaveTimeout, bundle, spin                         time.Duration
	etherType                                                                           string
	flightMB                                                                            int
	flightDir                                                                           string
	spinSet                                                                             bool // -spin was given (on the command line or in -config)
	spinAdapt                                                                           bool // -spin-adapt
	resilience                                                                          string
	level                                                                               string
	kernelFilter                                                                        bool // -kernel-filter
	keyFile                                                                             string
	encrypt                                                                             bool
	udp                                                                                 udpFlags
	udpSet                                                                              bool // a -udp-* flag was given
	udpCfg                                                                              udp.Config
	files                                                                               fileFlags
}

func runFlagSet(f *runFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlags("run", "-i IFACE -group G [-members N] [-node ID] [-order fifo|total] [-socket PATH] [-capture FILE] [-flight-recorder MiB] [-metrics ADDR] [-config FILE]", runText, stderr)
	fs.StringVar(&f.iface, "i", "", "network `interface` to join the group on (required; with -link udp, by -udp-group only: -udp-peers and -udp-seed with -udp-listen need none)")
	fs.Uint64Var(&f.group, "group", 0, "group `id`, 1..4294967295 (required)")
	fs.IntVar(&f.members, "members", 0, "`N`: with changing membership, how many daemons (this one included) to wait for before founding the group when none runs (0: 1); registered: the group's fixed size (required)")
	fs.StringVar(&f.node, "node", "", "member `id` to ask for (absent: the lowest free one); registered: 0 makes this daemon the registration server")
	fs.StringVar(&f.membership, "membership", "", "views (members join, fail, leave and rejoin; the default under -order fifo; under -order total the Agreed level) or registered (fixed at start; the default under -order total)")
	fs.IntVar(&f.maxMembers, "max-members", 0, "most members of a changing group (0: 16); every data frame has room for their acknowledgements, so messages shrink by 4 bytes per member")
	fs.StringVar(&f.order, "order", "fifo", "delivery order: fifo (per sender) or total (one order at every member)")
	fs.StringVar(&f.socket, "socket", "", "local API socket `path` (default "+localapi.SocketDir+"/group-G.sock)")
	fs.StringVar(&f.socketMode, "socket-mode", "0660", "permissions of the socket file (octal)")
	fs.StringVar(&f.capture, "capture", "", "record every frame sent and received to this pcapng `file`")
	fs.IntVar(&f.flightMB, "flight-recorder", 0, "keep the last `MiB` of frames in memory; dump them as pcapng to -flight-dir on SIGUSR1 and when a protocol invariant check fails (0: off)")
	fs.StringVar(&f.flightDir, "flight-dir", os.TempDir(), "`directory` of flight recorder dumps")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics on this `address` (host:port), path /metrics")
	fs.StringVar(&f.config, "config", "", "read flags from this `file` (name value per line)")
	fs.StringVar(&f.linkKind, "link", "ring", "link implementation: ring (mmap rings, set up while a plain socket carries the join), afpacket (plain socket) or udp (UDP/IP, -udp-group or -udp-peers)")
	f.udp.register(fs)
	fs.DurationVar(&f.spin, "spin", ring.DefaultRxSpin, "with -link ring: poll the receive ring this long, yielding the CPU, before sleeping (0: never; up to 1s); trades CPU while traffic flows for fewer wake-ups (docs/benchmarks-history.md, runs 15-17); the clients' sockets are polled as long")
	fs.BoolVar(&f.spinAdapt, "spin-adapt", false, "with -link ring: the group ring's spin adapts, up to -spin, to how often it finds a frame, and stops while most waits outlast it (docs/local-api-history.md, \"An adaptive ring spin\": off by default, as it cost goodput on a 2-vCPU guest)")
	fs.IntVar(&f.procs, "procs", defaultProcs, "Go `Ps` (GOMAXPROCS) the daemon runs on: 1 has its protocol loop, fan-out and client connections take turns on one thread, with no thread woken for a hand-off (docs/local-api.md, \"The data path\"); 0: one per CPU, Go's default; GOMAXPROCS in the environment wins")
	fs.StringVar(&f.level, "level", "agreed", "-order total -membership views: agreed (one order, the same at every member that completes a view) or safe (also: a message is delivered only once every member of the view holds it, so what any member delivered every survivor delivers); all members must agree. It is the default of each message: rbcastd send -level agreed|safe chooses per message")
	fs.StringVar(&f.resilience, "resilience", "majority", "total order: deliver once a majority of members hold a message (majority: never lost while a majority survives) or as soon as the sequencer numbers it (sequencer: lower latency); all members must agree")
	fs.StringVar(&f.mode, "mode", "pbp2", "repair protocol: pbp2 (negative acks) or pbp1 (positive acks); all members must agree")
	fs.IntVar(&f.window, "window", 0, "send window in frames (0: the protocol's default); all members must agree")
	fs.DurationVar(&f.failure, "failure-timeout", 0, "remove a member silent this long (0: the protocol's default, 2s); all members must agree")
	fs.DurationVar(&f.heartbeat, "heartbeat", 0, "heartbeat interval (0: the protocol's default); all members must agree")
	fs.DurationVar(&f.bundle, "bundle-delay", 0, "let a lone small message wait this long for others to share its frame (FIFO; trades latency for message rate)")
	fs.StringVar(&f.etherType, "ethertype", "", "EtherType of the group's frames (default 0x88b5); all members must agree")
	fs.DurationVar(&f.joinTimeout, "join-timeout", 0, "give up if the group has not started after this long (0: wait forever)")
	fs.DurationVar(&f.leaveTimeout, "leave-timeout", daemon.DefaultLeaveTimeout, "bound on the clean leave at SIGTERM")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json (log/slog)")
	fs.StringVar(&f.keyFile, "key-file", "", "authenticate every frame, the group's and its files', with the group key in this `file` (rbcastd keygen; docs/auth.md); all members must have it")
	fs.BoolVar(&f.encrypt, "encrypt", false, "with -key-file, also encrypt every payload, messages and files (AES-256-GCM); all members must agree")
	f.files.register(fs)
	fs.BoolVar(&f.kernelFilter, "kernel-filter", true, "have the kernel drop other groups' frames before they reach the daemon (BPF on the group id; ring and afpacket links, docs/groups.md); false: the daemon drops them, as before, for comparison")
	return fs
}

// applyConfig sets, from a config file, every flag not given on the
// command line.
func applyConfig(fs *flag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	sc := bufio.NewScanner(f)
	n := 1
	for ; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimSpace(name), "-")
		value = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(value), "="))
		if name == "config" {
			return fmt.Errorf("config %s:%d: config files do not nest", path, n)
		}
		if fs.Lookup(name) == nil {
			return fmt.Errorf("config %s:%d: unknown setting %q (settings are run's flag names)", path, n, name)
		}
		if set[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("config %s:%d: %s: %v", path, n, name, err)
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("config %s:%d: line longer than %d bytes", path, n, bufio.MaxScanTokenSize)
	} else if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// groupConfig checks the flags and builds the daemon's configuration.
func (f *runFlags) groupConfig() (daemon.Config, string, error) {
	var dc daemon.Config
	if f.iface == "" && f.linkKind != "udp" {
		return dc, "", errors.New("-i IFACE is required")
	}
	if f.group == 0 || f.group > 0xffffffff {
		return dc, "", fmt.Errorf("-group is %d, want 1..4294967295", f.group)
	}
	if f.procs < 0 || f.procs > maxProcs {
		return dc, "", fmt.Errorf("-procs is %d, want 1..%d (0: one per CPU)", f.procs, maxProcs)
	}
	if f.flightMB < 0 || f.flightMB > maxFlightMB {
		return dc, "", fmt.Errorf("-flight-recorder is %d MiB, want 0 (off) or 1..%d", f.flightMB, maxFlightMB)
	}
	views := f.order == "fifo"
	switch f.membership {
	case "":
	case "views":
		views = true
	case "registered":
		views = false
	default:
		return dc, "", fmt.Errorf("-membership is %q, want views or registered", f.membership)
	}
	c := reliable.Config{Group: uint32(f.group), Size: f.members, Window: f.window,
		FailureTimeout: f.failure, HeartbeatInterval: f.heartbeat, BundleDelay: f.bundle}
	if views {
		most := f.maxMembers
		if most == 0 {
			most = reliable.DefaultMaxMembers
		}
		switch {
		case f.maxMembers < 0 || f.maxMembers > reliable.MaxViewMembers:
			return dc, "", fmt.Errorf("-max-members is %d, want 1..%d (0: %d)", f.maxMembers, reliable.MaxViewMembers, reliable.DefaultMaxMembers)
		case f.members < 0 || f.members > most:
			return dc, "", fmt.Errorf("-members is %d, want 0..%d (-max-members)", f.members, most)
		}
		// Without -node the daemon has no wish: a -node 0 elsewhere
		// gets 0 before it.
		c.Views, c.MaxMembers, c.RequestID = true, f.maxMembers, frame.NoMember
		if f.node != "" {
			id, err := strconv.ParseUint(f.node, 10, 16)
			if err != nil || id >= uint64(most) {
				return dc, "", fmt.Errorf("-node is %q, want a member id 0..%d (-max-members %d)", f.node, most-1, most)
			}
			c.RequestID = frame.MemberID(id)
		}
	} else {
		if f.maxMembers != 0 {
			return dc, "", fmt.Errorf("-max-members applies to -membership views only")
		}
		if f.members < 1 || f.members > 40 {
			return dc, "", fmt.Errorf("-members is %d, want 1..40 (registration admits at most 40)", f.members)
		}
		if f.node != "" {
			id, err := strconv.ParseUint(f.node, 10, 16)
			if err != nil || id >= uint64(frame.NoMember) {
				return dc, "", fmt.Errorf("-node is %q, want a member id 0..%d", f.node, frame.NoMember-1)
			}
			if id == 0 {
				c.Server = true
			} else if id >= uint64(f.members) {
				return dc, "", fmt.Errorf("-node is %d, but a group of %d members has ids 0..%d", id, f.members, f.members-1)
			}
			c.RequestID = frame.MemberID(id)
		}
	}
	switch f.order {
	case "fifo":
		c.Order = reliable.FIFO
	case "total":
		c.Order = reliable.Total
	default:
		return dc, "", fmt.Errorf("-order is %q, want fifo or total", f.order)
	}
	switch f.mode {
	case "pbp2":
		c.Mode = reliable.PBP2
	case "pbp1":
		c.Mode = reliable.PBP1
	default:
		return dc, "", fmt.Errorf("-mode is %q, want pbp2 or pbp1", f.mode)
	}
	if c.Order == reliable.Total && c.Mode != reliable.PBP2 && !views {
		return dc, "", errors.New("-mode pbp1 applies to -order fifo only (the sequencer repairs by its own protocol)")
	}
	switch f.level {
	case "agreed":
	case "safe":
		if c.Order != reliable.Total || !views {
			return dc, "", errors.New("-level safe applies to -order total -membership views")
		}
		c.Safe = true
	default:
		return dc, "", fmt.Errorf("-level is %q, want agreed or safe", f.level)
	}
	switch f.resilience {
	case "majority":
		c.Resilience = reliable.SafeMajority
	case "sequencer":
		if c.Order != reliable.Total {
			return dc, "", errors.New("-resilience sequencer applies to -order total only")
		}
		if views {
			return dc, "", errors.New("-resilience sequencer applies to -membership registered (with views, -order total is Agreed)")
		}
		c.Resilience = reliable.SafeSequencer
	default:
		return dc, "", fmt.Errorf("-resilience is %q, want majority or sequencer", f.resilience)
	}
	if c.Order == reliable.Total && f.bundle != 0 && !views {
		return dc, "", errors.New("-bundle-delay applies to -order fifo only (total order bundles what waits at each transmission)")
	}
	if f.window < 0 {
		return dc, "", fmt.Errorf("-window is %d, want >= 0", f.window)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"failure-timeout", f.failure}, {"heartbeat", f.heartbeat}, {"bundle-delay", f.bundle}, {"join-timeout", f.joinTimeout}, {"leave-timeout", f.leaveTimeout}} {
		if d.d < 0 {
			return dc, "", fmt.Errorf("-%s is %v: durations must not be negative", d.name, d.d)
		}
	}
	if f.etherType != "" {
		et, err := strconv.ParseUint(f.etherType, 0, 16)
		if err != nil || et < 0x600 {
			return dc, "", fmt.Errorf("-ethertype is %q, want an EtherType 0x0600..0xffff", f.etherType)
		}
		c.EtherType = uint16(et)
	}
	switch f.linkKind {
	case "ring", "afpacket":
		if f.udpSet {
			return dc, "", errors.New("the -udp-* flags need -link udp")
		}
	case "udp":
		uc, err := f.udp.config(f.iface, c.EtherType)
		if err == nil {
			if err = uc.Check(); err != nil {
				// link/udp names its Config's fields: name the flags.
				err = errors.New(strings.NewReplacer("Config.MTU", "-udp-mtu", "Config.TTL", "-udp-ttl").Replace(err.Error()))
			}
		}
		if err != nil {
			return dc, "", err
		}
		f.udpCfg = uc
	default:
		return dc, "", fmt.Errorf("-link is %q, want ring, afpacket or udp", f.linkKind)
	}
	switch {
	case f.spin < 0 || f.spin > time.Second:
		return dc, "", fmt.Errorf("-spin is %v, want 0 (never) up to 1s", f.spin)
	case f.spinSet && f.linkKind != "ring":
		return dc, "", errors.New("-spin polls the mmap ring: it needs -link ring")
	case f.spinAdapt && f.linkKind != "ring":
		return dc, "", errors.New("-spin-adapt adapts the mmap ring's spin: it needs -link ring")
	}
	if m, err := strconv.ParseUint(f.socketMode, 8, 32); err != nil || m > 0o777 {
		return dc, "", fmt.Errorf("-socket-mode is %q, want octal permissions like 0660", f.socketMode)
	}
	socket := f.socket
	if socket == "" {
		socket = localapi.DefaultSocket(uint32(f.group))
	}
	if f.encrypt && f.keyFile == "" {
		return dc, "", errors.New("-encrypt needs -key-file")
	}
	if f.keyFile != "" {
		k, err := auth.Load(f.keyFile)
		if err != nil {
			return dc, "", fmt.Errorf("-key-file: %w", err)
		}
		c.Auth = &auth.Config{Key: k, Encrypt: f.encrypt}
	}
	var clientSpin time.Duration // the clients' sockets are polled as the ring is
	if f.linkKind == "ring" {
		clientSpin = f.spin
	}
	// What Join would refuse, refused now, named by the flags, before
	// the link is opened.
	if err := c.Check(); err != nil {
		return dc, "", fmt.Errorf("%s", protocolFlagNames(err.Error()))
	}
	dc = daemon.Config{Group: c, LeaveTimeout: f.leaveTimeout, ClientSpin: clientSpin}
	if err := f.files.check(f, &dc); err != nil {
		return dc, "", err
	}
	return dc, socket, nil
}

// maxProcs bounds -procs: Go takes any GOMAXPROCS, but a daemon with
// 100000 Ps did not reach its first line in 20 s (each stop of the
// world visits every P); 256 is more than any host it runs on has CPUs.
const maxProcs = 256

// maxFlightMB bounds -flight-recorder: the recorder is allocated whole at
// the start.
const maxFlightMB = 16384

// protocolNames turns the reliable package's names of settings into
// run's flags, and its durations in ns into Go's notation, so that a
// setting reliable.Config.Check refuses is named as the operator gave it.
// Whole words only: "Window" inside another name stays as it is.
var protocolNames = map[string]string{
	"FailureTimeout": "-failure-timeout", "HeartbeatInterval": "-heartbeat",
	"BundleDelay": "-bundle-delay", "Window": "-window", "MaxMembers": "-max-members",
	"RequestID": "-node", "Size": "-members", "Mode": "-mode", "Resilience": "-resilience"}

var protocolWord = regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)

var nanoseconds = regexp.MustCompile(`\((\d+) ns\)`)

func protocolFlagNames(msg string) string {
	msg = nanoseconds.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.ParseInt(nanoseconds.FindStringSubmatch(m)[1], 10, 64)
		return "(" + time.Duration(n).String() + ")"
	})
	return protocolWord.ReplaceAllStringFunc(msg, func(w string) string {
		if f, ok := protocolNames[w]; ok {
			return f
		}
		return w
	})
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level is %q, want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format is %q, want text or json", format)
}

// openLink opens the link with the EtherType the group uses, and with
// groups set, a kernel filter that passes only their frames; rxSpin is a
// ring link's Config.RxSpin (ringSpin).
func openLink(kind, iface string, etherType uint16, rxSpin time.Duration, groups []uint32) (link.Link, error) {
	if etherType == 0 {
		etherType = frame.EtherType
	}
	if kind == "afpacket" {
		return afpacket.Open(iface, afpacket.Config{EtherType: etherType, Groups: groups})
	}
	return ring.Open(iface, ring.Config{EtherType: etherType, RxSpin: rxSpin, Groups: groups})
}

// openGroupLink opens the group's link as openLink does, but a ring
// link's rings are set up late (lateLink): on a goroutine of their own
// from the join's first frame on, while a plain socket carries the
// join (the kernel's ring setup waits for an RCU grace period per ring,
// some 25 ms, and the view protocol takes a few ms).
func openGroupLink(kind, iface string, etherType uint16, rxSpin time.Duration, adapt bool, groups []uint32, log *slog.Logger) (link.Link, error) {
	if kind == "afpacket" {
		return openLink(kind, iface, etherType, rxSpin, groups)
	}
	if etherType == 0 {
		etherType = frame.EtherType
	}
	l, err := openLateRing(iface, ring.Config{EtherType: etherType, RxSpin: rxSpin, AdaptiveSpin: adapt, Groups: groups}, "group", log)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// openFilesLink opens the files' link: as openLink, but a ring link's
// receive ring is TPACKET_V3 (docs/protocols.md, "Files (IBRMP)"): a
// bulk stream is better woken once per ring block than once per frame,
// and the file core's round trips are worth the block timeout.
//
// The rings are set up late (lateLink): when the file core first uses
// the link, after the join, on a goroutine of their own. Until they are,
// a plain socket open since the start receives and sends the files'
// frames, so none is lost.
func openFilesLink(kind, iface string, etherType uint16, groups []uint32, ringMB int, log *slog.Logger) (link.Link, error) {
	if kind == "afpacket" {
		return openLink(kind, iface, etherType, -1, groups)
	}
	if etherType == 0 {
		etherType = frame.EtherType
	}
	l, err := openLateRing(iface, filesRingConfig(etherType, groups, ringMB), "files", log)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// filesRingConfig is the files' ring link's configuration: a V3 receive
// ring of ringMB MiB (-files-ring-mb), no spin, raw kicks.
func filesRingConfig(etherType uint16, groups []uint32, ringMB int) ring.Config {
	return ring.Config{EtherType: etherType, RxSpin: -1, Groups: groups, Version: ring.V3, RawKicks: true, RingBytes: ringMB << 20}
}

// settleDelay is the longest run waits for its group to start before it
// does what it keeps off a join's path anyway (afterJoin).
const settleDelay = 5 * time.Second

// afterJoin waits until every channel of quiet is closed or at most wait
// has passed, unless run is exiting first, and then does what a join's
// first view should not wait for: the process's first garbage collection
// (firstGC) and emptying the capability bounding set (dropBound). quiet
// holds the daemon's start and the late links' Settled.
func afterJoin(dropped privs.Dropped, quiet []<-chan struct{}, exiting <-chan struct{}, wait time.Duration, log *slog.Logger) {
	t := time.NewTimer(wait)
	defer t.Stop()
wait:
	for _, c := range quiet {
		select {
		case <-c:
		case <-t.C:
			break wait
		case <-exiting:
			return
		}
	}
	firstGC()
	dropBound(dropped, log)
}

// dropBound empties the capability bounding set and drops the
// CAP_SETPCAP privs.Drop kept for it (when it did). afterJoin calls it
// once the group has started and the links have settled, so that a
// join's first view does not wait for its 41 all-thread calls
// (docs/membership.md, "Joining fast"): each psx call holds every thread
// in its signal handler until all have run it, so one thread in a socket
// call that waits for an RCU grace period (a ring's setup, a packet
// socket's close) stops the whole process that long, 41 times over. With
// no_new_privs set and no other capability held, no execve can gain a
// capability meanwhile. A failure is logged: the process holds at most
// CAP_SETPCAP then.
func dropBound(dropped privs.Dropped, log *slog.Logger) {
	if !dropped.Kept {
		return
	}
	t0 := time.Now()
	bound, err := dropped.DropBound()
	if err != nil {
		log.Error("rbcastd: emptying the capability bounding set", "err", err, "now", privs.Current())
		return
	}
	log.Info("rbcastd: capability bounding set emptied", "emptied", bound, "now", privs.Current(), "took", time.Since(t0).Round(time.Microsecond))
}

// memberAddress checks that the link has what registration names a
// member by, a unicast Ethernet address: loopback (which the links open)
// has none.
func memberAddress(iface string, l link.Link) error {
	hw := l.HardwareAddr()
	if len(hw) != 6 {
		return fmt.Errorf("interface %q has no Ethernet address (loopback has none), and members register by their unicast MAC: run rbcastd on an Ethernet interface (a NIC, a veth, a bridge)", iface)
	}
	if hw[0]&1 != 0 || string(hw) == "\x00\x00\x00\x00\x00\x00" {
		return fmt.Errorf("interface %q has the address %v, not a unicast Ethernet address, and members register by their unicast MAC", iface, hw)
	}
	return nil
}

// defaultProcs is -procs's default. One P measured best on every row
// of the benchmark report's rbcastd section (docs/benchmarks.md), with
// the polls yielding to the network poller (link/netyield).
const defaultProcs = 1

// setProcs applies -procs unless the environment has GOMAXPROCS (env
// true: the runtime took it at start), and returns the Ps in use.
func setProcs(procs int, env string) (n int, fromEnv bool) {
	if env != "" {
		return runtime.GOMAXPROCS(0), true
	}
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
	return runtime.GOMAXPROCS(0), false
}

// firstGC runs the process's first garbage collection once the daemon
// has joined its group (afterJoin), so that neither the join nor the
// files and messages that follow pay for it. The first collection reads
// every global that holds pointers for the first time, and rbcastd links
// gopacket/layers (pcapgo, for -capture), whose two 2.5 MB tables
// (EthernetTypeMetadata, PPPTypeMetadata) are such globals: about 1300
// page faults, 1 to 5 k with the collector's own first use of its
// structures, 40 µs each on machine D, a PVM guest (docs/protocols.md,
// "Files (IBRMP)", "Where a file's CPU goes"). In a fresh daemon they
// came during the first file it moved, when its heap first reached the
// collector's goal; before the join they would be the join's.
func firstGC() { runtime.GC() }

// ringSpin is ring.Config.RxSpin for -spin: without it (set false) the
// ring's default, ring.DefaultRxSpin; -spin 0 is never, where the ring's
// 0 is its default.
func ringSpin(spin time.Duration, set bool) time.Duration {
	switch {
	case !set:
		return 0
	case spin == 0:
		return -1
	}
	return spin
}

// filesLinkHook, when set, wraps the files' link as soon as it is open
// (before a capture does), given the frames' EtherType. rbcastd leaves it
// nil; the test binary, run as rbcastd, sets it to receive files as an
// rbcastd from before offers without a hash did (oldreceiver_test.go).
var filesLinkHook func(l link.Link, etherType uint16) link.Link

func runCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var f runFlags
	fs := runFlagSet(&f, stderr)
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "run", "unexpected argument %q", fs.Arg(0))
	}
	if f.config != "" {
		if err := applyConfig(fs, f.config); err != nil {
			return usageErr(stderr, "run", "%v", err)
		}
	}
	fs.Visit(func(fl *flag.Flag) { f.spinSet = f.spinSet || fl.Name == "spin" })
	f.udpSet = f.udp.given(fs)
	dc, socket, err := f.groupConfig()
	if err != nil {
		return usageErr(stderr, "run", "%v", err)
	}
	log, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		return usageErr(stderr, "run", "%v", err)
	}
	dc.Logger = log
	procs, procsEnv := setProcs(f.procs, os.Getenv("GOMAXPROCS"))
	log.Debug("Go Ps", "GOMAXPROCS", procs, "from the environment", procsEnv)
	mode, _ := strconv.ParseUint(f.socketMode, 8, 32)

	// Order: the link (needs CAP_NET_RAW), the capture file, the socket
	// and the metrics listener, then drop every privilege, then serve.
	var l link.Link
	if f.linkKind == "udp" {
		// The UDP link has no kernel group filter: the daemon drops
		// other groups' datagrams (-kernel-filter does not apply).
		l, err = openUDP(f.udpCfg, log)
	} else {
		var groups []uint32
		if f.kernelFilter {
			groups = []uint32{dc.Group.Group}
		}
		l, err = openGroupLink(f.linkKind, f.iface, dc.Group.EtherType, ringSpin(f.spin, f.spinSet), f.spinAdapt, groups, log)
	}
	if err != nil {
		return fail(stderr, "run", err)
	}
	defer func() { l.Close() }()
	var lates []*lateLink // whose switch dropBound waits for
	if ll, ok := l.(*lateLink); ok {
		lates = append(lates, ll)
	}
	if err := memberAddress(f.iface, l); err != nil {
		return fail(stderr, "run", err)
	}
	if dc.Files != nil {
		// The files' link: the same interface, the files' group
		// (internal/daemon, files.go); over UDP, the ports + 1
		// (udpFilesConfig).
		var groups []uint32
		if f.kernelFilter {
			groups = []uint32{dc.Files.Group}
		}
		var fl link.Link
		if f.files.udp != nil {
			fl, err = openUDP(*f.files.udp, log.With("link", "files"))
		} else {
			fl, err = openFilesLink(f.linkKind, f.iface, dc.Group.EtherType, groups, f.files.ringMB, log)
		}
		if err != nil {
			return fail(stderr, "run", fmt.Errorf("the files' link (-files=false turns files off): %w", err))
		}
		if ll, ok := fl.(*lateLink); ok {
			lates = append(lates, ll)
		}
		if filesLinkHook != nil {
			fl = filesLinkHook(fl, cmp.Or(dc.Group.EtherType, frame.EtherType))
		}
		dc.Files.Link = fl
		defer func() { dc.Files.Link.Close() }() // the capture's wrapper, once wrapped
	}
	var cw *capture.Writer
	var rec *capture.Recorder
	if f.flightMB > 0 {
		if rec, err = capture.NewRecorder(f.flightMB << 20); err != nil {
			return usageErr(stderr, "run", "-flight-recorder: %v", err)
		}
	}
	if f.capture != "" || rec != nil {
		if f.capture != "" {
			cw, err = capture.CreateFile(f.capture, capture.WriterOptions{Application: "rbcastd"})
			if err != nil {
				return fail(stderr, "run", fmt.Errorf("-capture: %w", err))
			}
		}
		opts := capture.Options{Node: f.node, Interface: cmp.Or(f.iface, "udp"), StatsInterval: time.Second, Recorder: rec, EtherType: dc.Group.EtherType}
		if rec != nil {
			// docs/capture.md, "Flight recorder".
			opts.Invariants = capture.NewInvariants(0, rec.DumpOnViolation(f.flightDir, 0, func(v capture.Violation, path string, err error) {
				log.Error("rbcastd: protocol invariant violated; flight recorder dumped", "violation", v.String(), "file", path, "err", err)
			}))
			if dc.Group.Auth != nil {
				// The checks read what the members read: each frame
				// verified, decrypted under -encrypt (docs/auth.md).
				if err := opts.Invariants.SetKeys(dc.Group.Auth.Key); err != nil {
					return fail(stderr, "run", fmt.Errorf("-flight-recorder: %w", err))
				}
				// And those of every rotation step (rbcastd rekey).
				dc.KeysChanged = opts.Invariants.SetKeys
			}
			stopDump := rec.DumpOnSignal(syscall.SIGUSR1, f.flightDir, func(path string, err error) {
				log.Info("rbcastd: flight recorder dumped (SIGUSR1)", "file", path, "err", err)
			})
			defer stopDump()
		}
		cl, err := capture.Wrap(l, cw, opts)
		if err != nil {
			if cw != nil {
				cw.Close()
			}
			return fail(stderr, "run", fmt.Errorf("-capture: %w", err))
		}
		l = cl
		if dc.Files != nil {
			// The files' link goes into the same file (and flight
			// recorder) as an interface of its own, "IFACE/files":
			// one capture holds both groups (docs/capture.md).
			fopts := opts
			fopts.Interface = opts.Interface + "/files"
			fcl, err := capture.Wrap(dc.Files.Link, cw, fopts)
			if err != nil {
				if cw != nil {
					cw.Close()
				}
				return fail(stderr, "run", fmt.Errorf("-capture: the files' link: %w", err))
			}
			dc.Files.Link = fcl
		}
		if cw != nil {
			defer func() {
				if err := cw.Close(); err != nil {
					log.Error("rbcastd: capture file incomplete", "file", f.capture, "err", err)
				}
				if st := cw.Stats(); st.Dropped > 0 {
					// The file marks where (epb_dropcount); pcap-replay
					// check does not judge frames missing there.
					log.Warn("rbcastd: the capture could not keep up and lost frames", "file", f.capture, "lost", st.Dropped, "written", st.Frames)
				}
			}()
		}
	}
	if f.socket == "" {
		// The default directory (systemd's RuntimeDirectory makes it
		// too); Listen says what is wrong if this fails.
		os.MkdirAll(localapi.SocketDir, 0o755)
	}
	ln, err := daemon.Listen(socket, os.FileMode(mode))
	if err != nil {
		return fail(stderr, "run", err)
	}
	var metricsLn net.Listener
	if f.metrics != "" {
		metricsLn, err = net.Listen("tcp", f.metrics)
		if err != nil {
			ln.Close()
			return fail(stderr, "run", fmt.Errorf("-metrics: %w", err))
		}
	}
	dropped, err := privs.Drop()
	if err != nil {
		ln.Close()
		return fail(stderr, "run", fmt.Errorf("dropping privileges: %w", err))
	}
	// Logged here, not first: a flag or interface error must be the
	// first thing run prints (TestOddInputs).
	log.Info("rbcastd: started", "main", mainAt, "before_main_ms", float64(sinceStart(mainAt))/1e6)
	log.Info("rbcastd: privileges dropped", "before", dropped.Before, "now", privs.Current(), "bounding_set_later", dropped.Kept,
		"uid", os.Getuid())

	want := -1
	if f.node != "" {
		n, _ := strconv.Atoi(f.node)
		want = n
	}
	dc.CheckSelf = func(self frame.MemberID) error {
		if want >= 0 && int(self) != want {
			return fmt.Errorf("the group assigned member id %d, but -node asked for %d (another member holds it)", self, want)
		}
		return nil
	}
	d := daemon.New(dc)
	quiet := []<-chan struct{}{d.Started()}
	for _, ll := range lates {
		quiet = append(quiet, ll.Settled())
	}
	exiting, boundDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(boundDone)
		afterJoin(dropped, quiet, exiting, settleDelay, log)
	}()
	defer func() {
		close(exiting)
		<-boundDone
	}()
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", d.MetricsHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(metricsLn)
		defer srv.Close()
		log.Info("rbcastd: metrics", "addr", metricsLn.Addr().String())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var timedOut atomic.Bool
	if f.joinTimeout > 0 {
		go func() {
			select {
			case <-time.After(f.joinTimeout):
				if st := d.Status(); !st.Ready {
					log.Error("rbcastd: the group did not start in time", "join_timeout", f.joinTimeout)
					timedOut.Store(true)
					stop()
				}
			case <-ctx.Done():
			}
		}()
	}
	if err := d.Run(ctx, l, ln); err != nil {
		return fail(stderr, "run", err)
	}
	if timedOut.Load() {
		err := fmt.Errorf("the group did not start within -join-timeout %v", f.joinTimeout)
		if why := d.Status().JoinErr; why != "" {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return fail(stderr, "run", err)
	}
	return exitOK
}
