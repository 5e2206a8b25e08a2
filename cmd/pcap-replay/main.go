// Command pcap-replay decodes, checks and re-runs rbcast captures: pcap or
// pcapng files written by capture.Wrap (rbcastd -capture) or by tcpdump.
//
//	pcap-replay timeline [-key-file K] FILE...
//	pcap-replay summary [-key-file K] FILE...
//	pcap-replay check [-group G] [-files-group G] [-storm-count K] [-storm-window T] FILE...
//	pcap-replay simulate -node ID [-members LIST | -incarnation N] [-iface N] ... FILE...
//	pcap-replay inject -i IFACE [-speed X | -asap] FILE...
//
// The logic lives in internal/replay; see docs/debugging.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/cliflag"
	"github.com/rbcast/rbcast/internal/replay"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: pcap-replay <command> [flags] FILE...

Decodes, checks and re-runs rbcast captures (pcap or pcapng, from
capture.Wrap or tcpdump; gzip-compressed too). 802.1Q/802.1ad tags are
skipped. With -udp, a tcpdump capture of rbcast over UDP (rbcastd -link
udp) is read: each datagram's payload is the frame. Frame numbers are the file's, from 1, as Wireshark counts them.
Several files (one per node, as each rbcastd -capture writes) are merged
in time order, each file's own frames kept in its order, interfaces and
statistics kept; frames are then numbered in the merged order.

commands:
  timeline   one decoded line per frame
  summary    per sender: sequence range, gaps and repairs, NACKs,
             retransmissions, repair latency, estimated loss per receiver;
             for the sequencer: epochs, globals, requests, global gaps
  check      protocol invariants; exit 1 if any is violated
  simulate   re-run one member's core (PBP, sequencer, or a group with
             views: the membership core) on what it received
  inject     send the captured frames onto an interface (CAP_NET_RAW)

Run 'pcap-replay <command> -h' (or 'pcap-replay help <command>') for a
command's flags.
Exit status: 0 success, 1 check found violations, 2 usage or input error.
`

// Exit statuses.
const (
	exitOK        = 0
	exitViolation = 1
	exitError     = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "timeline":
		return timeline(rest, stdout, stderr)
	case "summary":
		return summary(rest, stdout, stderr)
	case "check":
		return check(rest, stdout, stderr)
	case "simulate":
		return simulate(rest, stdout, stderr)
	case "inject":
		return inject(rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		if cmd == "help" && len(rest) > 0 {
			// help COMMAND: COMMAND's own help, as 'pcap-replay COMMAND -h'.
			switch rest[0] {
			case "timeline", "summary", "check", "simulate", "inject":
				return run([]string{rest[0], "-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "pcap-replay: unknown command %q\n\n%s", rest[0], usage)
			return exitError
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "pcap-replay: unknown command %q\n\n%s", cmd, usage)
	return exitError
}

// common holds the flags every command reading a capture has.
type common struct {
	etherType string
	partial   bool
	udp       string
	keys      keyFiles // -key-file, for the commands that have it (keyFlag)
}

// keyFlag gives the command -key-file.
func (c *common) keyFlag(fs *flag.FlagSet) { fs.Var(&c.keys, "key-file", keyFileUsage) }

// readKeyed reads the capture files and applies -key-file to them
// (authenticate; what it dropped goes to authOut); ok is false when the
// command should exit with exitError, the reason printed.
func (c *common) readKeyed(name string, files []string, authOut, stderr io.Writer) (*replay.Capture, bool) {
	capt, ok := c.read(name, files, stderr)
	if !ok || !authenticate(name, c.keys, c.etherTypeValue(), capt, authOut, stderr) {
		return nil, false
	}
	return capt, true
}

func newFlags(name, synopsis, about string, stderr io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pcap-replay %s %s\n\n%s\n\nflags:\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	c := &common{}
	fs.StringVar(&c.etherType, "ethertype", "0x88b5", "EtherType of rbcast frames")
	fs.BoolVar(&c.partial, "partial", false, "analyse the frames before a truncated or corrupt block instead of failing (the error is still printed)")
	fs.StringVar(&c.udp, "udp", "", "read a capture of rbcast over UDP (link/udp, rbcastd -link udp): strip the IP and UDP headers of datagrams to or from these `PORTS` (comma-separated; \"any\": every UDP datagram) and decode the Ethernet frame each carries")
	return fs, c
}

// parse parses flags and returns the capture files named by the remaining
// arguments (one, or one per node to merge); ok is false when the command
// should exit with code.
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (files []string, code int, ok bool) {
	if cliflag.HelpAsked(args) {
		fs.SetOutput(stdout) // asked for, the usage is the output
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK, false
		}
		return nil, exitError, false
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "pcap-replay %s: want a capture FILE (or several, one per node, to merge)\n", fs.Name())
		fs.Usage()
		return nil, exitError, false
	}
	return fs.Args(), 0, true
}

// keyFiles is -key-file, given once, or twice across a rotation.
type keyFiles []string

func (k *keyFiles) String() string { return strings.Join(*k, ",") }
func (k *keyFiles) Set(v string) error {
	if len(*k) == 2 {
		return errors.New("at most two key files (the keys of a rotation)")
	}
	*k = append(*k, v)
	return nil
}

const keyFileUsage = "verify every frame with the group key in `FILE` (rbcastd keygen; twice: both keys of a rotation) as a member's link does, decrypt encrypted bodies, and leave out what does not verify or verified before (replays), per capture interface (docs/auth.md)"

// authenticate applies -key-file to capt: it prints what was dropped
// (to w) and reports false if a key file does not load.
func authenticate(name string, files keyFiles, etherType uint16, capt *replay.Capture, w, stderr io.Writer) bool {
	if len(files) == 0 {
		return true
	}
	var keys []*auth.Key
	for _, f := range files {
		k, err := auth.Load(f)
		if err != nil {
			fmt.Fprintf(stderr, "pcap-replay %s: -key-file: %v\n", name, err)
			return false
		}
		keys = append(keys, k)
	}
	res, err := replay.Authenticate(capt, replay.AuthOptions{Keys: keys, EtherType: etherType})
	if err != nil {
		fmt.Fprintf(stderr, "pcap-replay %s: -key-file: %v\n", name, err)
		return false
	}
	res.Write(w)
	if res.Verified == 0 && len(res.Dropped) > 0 {
		// Nothing left to judge: "all invariants hold" would say
		// nothing. The lines above say which frames and why.
		fmt.Fprintf(stderr, "pcap-replay %s: -key-file: none of the capture's %d rbcast frames verified: %s\n", name, len(res.Dropped), res.Mismatch())
		return false
	}
	return true
}

func (c *common) etherTypeValue() uint16 {
	et, _ := strconv.ParseUint(c.etherType, 0, 16)
	return uint16(et)
}

func (c *common) read(name string, files []string, stderr io.Writer) (*replay.Capture, bool) {
	et, err := strconv.ParseUint(c.etherType, 0, 16)
	if err != nil || et < 0x0600 {
		fmt.Fprintf(stderr, "pcap-replay %s: -ethertype %q: want a 16-bit EtherType of at least 0x0600, like 0x88b5\n", name, c.etherType)
		return nil, false
	}
	opts := replay.ReadOptions{EtherType: uint16(et), Partial: c.partial}
	if c.udp != "" {
		opts.UDP = true
		if c.udp != "any" {
			for _, f := range strings.Split(c.udp, ",") {
				p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
				if err != nil || p == 0 {
					fmt.Fprintf(stderr, "pcap-replay %s: -udp %q: want UDP ports like 7000,7001, or any\n", name, c.udp)
					return nil, false
				}
				opts.UDPPorts = append(opts.UDPPorts, uint16(p))
			}
		}
	}
	capt, err := replay.ReadFiles(files, opts)
	if err != nil {
		fmt.Fprintf(stderr, "pcap-replay %s: %v\n", name, err)
		if capt == nil {
			return nil, false
		}
		fmt.Fprintf(stderr, "pcap-replay %s: -partial: going on with the %d frames before it\n", name, len(capt.Records))
	}
	return capt, true
}

func timeline(args []string, stdout, stderr io.Writer) int {
	return report("timeline", `Prints one line per frame: frame number, seconds since the first frame,
direction (in/out from pcapng flags, "-" without them), interface (nN for
rbcast node N, else the interface name), sender as id.incarnation, type,
sequence number, then the ack vector (acks@BASE=[...], first 8 entries),
group, payload size, type-specific fields and flags (RETX, ACKREQ, BUNDLE,
AUTH). Frames that fail to decode show ERROR and the decoder's error
(kind, field and byte offset within the rbcast frame).`, replay.WriteTimeline, args, stdout, stderr)
}

func summary(args []string, stdout, stderr io.Writer) int {
	return report("summary", `Prints per sender (id.incarnation): its Data sequence range, first
transmissions and retransmissions, acks, heartbeats, Nacks addressed to it
and, per requesting member, the distinct seqs it Nacked (a loss estimate).
Then per receiver - each interface's inbound frames when the capture has
direction flags, else the whole capture - the gaps (a seq seen only after
a later one, or announced by an Ack/Heartbeat/Nack/Leave, or first seen as a
retransmission), when each was repaired, repair latency percentiles, and
the estimated loss (first transmissions the receiver never got).
For sequencer frames (a total-order group): each epoch's sequencer and the
globals it numbered (by SeqData, by Accept, and member removals or
readmissions by SeqMember), elections and their agreed last global, each member's requests, resends, retransmit requests and
delivered cursor, and per receiver the globals it missed and when each came.`, replay.WriteSummary, args, stdout, stderr)
}

// report is a command (timeline, summary) that reads a capture and
// writes what write makes of it, with the common flags and -key-file.
func report(name, about string, write func(io.Writer, *replay.Capture) error, args []string, stdout, stderr io.Writer) int {
	fs, c := newFlags(name, "[flags] FILE...", about, stderr)
	c.keyFlag(fs)
	files, code, ok := parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	capt, ok := c.readKeyed(name, files, stdout, stderr)
	if !ok {
		return exitError
	}
	if err := write(stdout, capt); err != nil {
		fmt.Fprintf(stderr, "pcap-replay %s: %v\n", name, err)
		return exitError
	}
	return exitOK
}

func check(args []string, stdout, stderr io.Writer) int {
	fs, c := newFlags("check", "[flags] FILE...", `Checks protocol invariants and prints each violation with the frame
numbers involved; exits 1 if there is any, 0 if none. The checks are the
ones rbcastd -flight-recorder runs on its live link (package invariant),
plus what only a whole capture shows (unrepaired-gap, seq-jump, the
sequencer's delivered cursor). Where the capture itself lost frames (its
writer's queue overflowed: pcapng epb_dropcount; a foreign capturer's
isb_ifdrop), a finding about a frame missing there is printed as NOT JUDGED
and does not count:
  seq-reuse        one sender, incarnation and seq in Data frames (or request
                   number in SeqRequest frames) with different payloads
  global-reuse     sequencer: one global of an epoch bound to two requests or
                   payloads, or a SeqData whose payload is not its request's
  sequenced-twice  sequencer: one request numbered with two globals in an epoch
  unrepaired-gap   a missing seq or global never received by the end (per
                   receiving interface with direction flags, else over the capture)
  delivery-order   a member acknowledges (so has delivered) a seq or global its
                   own interface never received, or its ack goes backwards
  nack-storm       more than -storm-count Nacks for one range within -storm-window
  foreign-group    a frame of another group than -group (default: the most common),
                   or a file frame (rbcastd -files) of another group than
                   -files-group (default: the file frames' most common)
  foreign-version  a frame of another wire-format version
  corrupt-frame    a frame that fails to decode (CRC, length, body, ...)
  seq-jump         a sequence or global number implausibly far (> 4096) ahead
groups that change (views, wire v4's view frames):
  view-agreement   two ViewCommits of one view id with other members, base or
                   cuts: two views with one id
  view-member      a frame of a view from a sender (id.incarnation) its
                   ViewCommit does not list
  view-order       a process's view frames go back to an older view, or it
                   sends data frames of a view older than its current one's base
  view-cut         a member that stays sent Data past its cut in the base view,
                   or flushed another count than its cut; a departing member's
                   frame relayed at or past its cut
  view-left        a ViewFlush says a member left the base cleanly, and a commit
                   from the base keeps it, or cuts its messages below what that
                   Flush's sender, which stays, delivered of them
A view's streams are owed (unrepaired-gap) only up to the cuts of the commit
that ends it, and only at the interfaces of the members that move on.`, stderr)
	group := fs.String("group", "", "the group every frame must belong to (default: the capture's most common group)")
	filesGroup := fs.String("files-group", "", "the group every file frame (types 0x40–0x4F, rbcastd -files) must belong to (default: the capture's most common group of file frames)")
	count := fs.Int("storm-count", invariant.DefaultNackStormCount, "NACK storm: more than this many Nacks for the same range ...")
	window := fs.Duration("storm-window", invariant.DefaultNackStormWindow, "... within this long")
	c.keyFlag(fs)
	files, code, ok := parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	opts := replay.CheckOptions{NackStormCount: *count, NackStormWindow: *window}
	if *count < 1 || *window <= 0 {
		fmt.Fprintf(stderr, "pcap-replay check: -storm-count %d and -storm-window %v must be positive\n", *count, *window)
		return exitError
	}
	var err error
	if opts.Group, err = optUint32("group", *group, "group id"); err != nil {
		fmt.Fprintf(stderr, "pcap-replay check: %v\n", err)
		return exitError
	}
	if opts.FilesGroup, err = optUint32("files-group", *filesGroup, "group id"); err != nil {
		fmt.Fprintf(stderr, "pcap-replay check: %v\n", err)
		return exitError
	}
	capt, ok := c.readKeyed("check", files, stdout, stderr)
	if !ok {
		return exitError
	}
	vs := replay.Check(capt, opts)
	if err := replay.WriteViolations(stdout, capt, vs); err != nil {
		fmt.Fprintf(stderr, "pcap-replay check: %v\n", err)
		return exitError
	}
	if replay.Judged(vs) > 0 {
		return exitViolation
	}
	return exitOK
}

func simulate(args []string, stdout, stderr io.Writer) int {
	fs, c := newFlags("simulate", "-node ID [flags] FILE...", `Re-runs member ID's protocol core — PBP (reliable/pbp) for a FIFO group,
the sequencer (reliable/seq) for a total-order group, the membership core
(reliable/view, with reliable/vtotal above it for Agreed and Safe) for a
group with views, PCODE (reliable/pcode) for an SPMD program; -protocol
auto picks views when the capture carries view frames (0x20-0x28) or
frames of a view, else the sequencer or PCODE when the member's interface
carries sequencer or PCODE frames (0x30-0x33) — on exactly the frames its
interface received, in captured order with captured timestamps, ticking it
at its timer deadlines between them, and proposing the messages of its own
first transmissions (PBP Data; SeqRequest, or the SeqData it numbered for
itself as the sequencer; with views, its Data of any view and, at the
Unreliable level, its Datagrams) at their capture time. Prints what it
delivers ("deliver"; with the global number for the sequencer, the view
for a group with views), what it would have sent ("send"), its events
(with views: every view installed, with its members), frames it dropped
and why, and the frames by type it sent against those captured from it.
The output is the same on every run.

The interface is the one whose description names node ID (capture.Wrap),
or the only one, or -iface. Without direction flags (tcpdump), frames from
the member's MAC count as sent and the rest as received. The member list
comes from -members, else a Start frame, else the senders in the capture.
The protocol settings must match the live node's: the defaults are the
cores' (the sequencer's first global and epoch: the lowest in the capture).

A group with views: ID is the member id the process held in its views
(-incarnation picks one process when a restart held it too); its
interface is the one with its MAC. Its core is rebuilt as rbcastd builds
it, from its ViewJoin frames (incarnation, nonce, config hash, requested
id, MTU) and the settings: the level (-order, -level) and -max-members
from the Join's config hash when it matches these flags, else from the
frames; -found from the view it founded, if it did; the timers, -window
and -join-retry as given (rbcastd's defaults otherwise). The re-run starts
at its first ViewJoin; a process without one in the capture cannot be
re-run, nor a member id no view lists.

PCODE: the member's program is rebuilt from the capture (its multicasts
from its first transmissions, its requests from the messages targeted at
it) and run without compute time between calls; the re-run's frames are
compared with the captured ones byte for byte and the first divergence
is printed ("# first divergence: frame N: ..."). -window is the buffer of
sent messages; -early-buffer, -flow-window, -status-window and the timers
as the group's reliable.PCODEConfig.`, stderr)
	node := fs.Int("node", -1, "member id to re-run (required; with views, the id the process held in its views)")
	members := fs.String("members", "", "member list id=mac[@incarnation],... (default: from a Start frame, else inferred)")
	iface := fs.Int("iface", -1, "capture interface index to take the frames from (default: the one naming -node)")
	group := fs.String("group", "", "group id (default: the group of the member's own frames)")
	protocol := fs.String("protocol", "auto", "core to re-run: auto, pbp, seq, views or pcode")
	incarnation := fs.Uint("incarnation", 0, "views: the process's incarnation, when member ID was held by several (0: the only one)")
	order := fs.String("order", "", "views: the group's order, fifo or total (default: from the Join's config hash, else the frames)")
	level := fs.String("level", "", "views, total order: agreed or safe (default: safe if the frames carry held reports)")
	found := fs.Int("found", 0, "views: processes a founder waited for, rbcastd run -members (0: the members of the view it founded, if it did)")
	maxMembers := fs.Int("max-members", 0, "views: rbcastd run -max-members (0: the value the Join's config hash shows, else 16)")
	joinRetry := fs.Duration("join-retry", 0, "views: how often view frames repeat (0: reliable.DefaultJoinRetry, 20ms)")
	mode := fs.String("mode", "pbp2", "PBP variant: pbp2 or pbp1")
	window := fs.Int("window", 0, "send window (PBP) or request window (seq) (0: the one the group's Join frames carry, else the core's default)")
	mtu := fs.Int("mtu", 0, "link MTU (0: the interface description's, else 1500)")
	maxPayload := fs.Int("max-payload", 0, "largest message (0: what the MTU allows)")
	initial := fs.Uint("initial-seq", 0, "PBP: every member's first sequence number")
	start := fs.String("start", "", "when the core started, RFC 3339 (default: isb_starttime, else the interface's first frame)")
	ackDelay := fs.Duration("ack-delay", 0, "PBP AckDelay (0: pbp default 1ms)")
	resend := fs.Duration("resend-timeout", 0, "ResendTimeout (0: the core's default, 10ms PBP2 and seq, 5ms PBP1)")
	nack := fs.Duration("nack-timeout", 0, "NackTimeout (0: default 4ms)")
	hb := fs.Duration("heartbeat", 0, "HeartbeatInterval (0: default 100ms)")
	fail := fs.Duration("failure-timeout", 0, "FailureTimeout (0: default 2s)")
	bundle := fs.Duration("bundle-delay", 0, "PBP BundleDelay (0: none)")
	method := fs.String("method", "hybrid", "seq: hybrid, method1 or method2")
	threshold := fs.Int("threshold", 0, "seq: hybrid threshold in payload bytes (0: default 512)")
	history := fs.Int("history", 0, "seq: history buffer, a power of two (0: default 1024)")
	initialGlobal := fs.String("initial-global", "", "seq: the first global number (default: the lowest global or delivered cursor in the capture)")
	initialEpoch := fs.Uint("initial-epoch", 0, "seq: the first sequencer's epoch (0: the lowest in the capture, else 1)")
	electionRetry := fs.Duration("election-retry", 0, "seq: ElectionRetry (0: default 20ms)")
	quorum := fs.Int("quorum", 0, "seq: election quorum (0: a majority)")
	resilience := fs.String("resilience", "majority", "seq: when a member delivers, as the live group's Resilience: majority (once enough members hold a message, the default) or sequencer (as soon as it is numbered)")
	earlyBuffer := fs.Int("early-buffer", 0, "pcode: EarlyBuffer (0: default 64; -1: none)")
	flowWindow := fs.Int("flow-window", 0, "pcode: FlowWindow (0: default 64)")
	statusWindow := fs.Int("status-window", 0, "pcode: StatusWindow (0: FlowWindow/2)")
	initialRTT := fs.Duration("initial-rtt", 0, "pcode: InitialRTT (0: default 500µs)")
	minTimer := fs.Duration("min-timer", 0, "pcode: MinTimer (0: default 50µs)")
	maxTimer := fs.Duration("max-timer", 0, "pcode: MaxTimer (0: default 50ms)")
	data := fs.Bool("data", false, "print delivered messages in full (hex) instead of length and SHA-256 prefix")
	lines := fs.Bool("lines", false, "print only the deliveries, one per line as 'rbcastd recv -all -format lines' does (sender id, tab, message)")
	c.keyFlag(fs)
	files, code, ok := parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	fail2 := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "pcap-replay simulate: "+format+"\n", a...)
		return exitError
	}
	nodeSet := false
	fs.Visit(func(f *flag.Flag) { nodeSet = nodeSet || f.Name == "node" })
	if !nodeSet {
		return fail2("-node ID is required: the member id to re-run, 0..%d", int(frame.NoMember)-1)
	}
	if *node < 0 || *node >= int(frame.NoMember) {
		return fail2("-node %d: want the member id to re-run, 0..%d", *node, int(frame.NoMember)-1)
	}
	// Sizes and durations whose 0 is the default: a negative one is
	// refused here, named as typed (the cores' checks name their Config
	// fields, and the other protocols' flags would pass unread).
	for _, f := range []struct {
		name string
		n    int
	}{{"window", *window}, {"mtu", *mtu}, {"max-payload", *maxPayload}, {"threshold", *threshold},
		{"history", *history}, {"quorum", *quorum}, {"flow-window", *flowWindow}, {"status-window", *statusWindow}} {
		if f.n < 0 {
			return fail2("-%s %d: want 0 (the default) or more", f.name, f.n)
		}
	}
	if *earlyBuffer < -1 {
		return fail2("-early-buffer %d: want -1 (none), 0 (the default) or more", *earlyBuffer)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ack-delay", *ackDelay}, {"resend-timeout", *resend}, {"nack-timeout", *nack}, {"heartbeat", *hb},
		{"failure-timeout", *fail}, {"bundle-delay", *bundle}, {"election-retry", *electionRetry},
		{"initial-rtt", *initialRTT}, {"min-timer", *minTimer}, {"max-timer", *maxTimer}} {
		if f.d < 0 {
			return fail2("-%s %v: want 0 (the default) or more", f.name, f.d)
		}
	}
	opts := replay.SimOptions{Node: frame.MemberID(*node), Iface: *iface, Window: *window, MTU: *mtu, MaxPayload: *maxPayload,
		AckDelay: *ackDelay, ResendTimeout: *resend, NackTimeout: *nack,
		HeartbeatInterval: *hb, FailureTimeout: *fail, BundleDelay: *bundle}
	var err error
	if opts.InitialSeq, err = flagUint32("initial-seq", *initial); err != nil {
		return fail2("%v", err)
	}
	if opts.Protocol, err = pick("protocol", *protocol, []choice[replay.Protocol]{{"auto", replay.ProtocolAuto},
		{"pbp", replay.ProtocolPBP}, {"seq", replay.ProtocolSeq}, {"views", replay.ProtocolViews}, {"pcode", replay.ProtocolPCODE}}); err != nil {
		return fail2("%v", err)
	}
	opts.EarlyBuffer, opts.FlowWindow, opts.StatusWindow = *earlyBuffer, *flowWindow, *statusWindow
	opts.InitialRTT, opts.MinTimer, opts.MaxTimer = *initialRTT, *minTimer, *maxTimer
	if opts.Incarnation, err = flagUint32("incarnation", *incarnation); err != nil {
		return fail2("%v", err)
	}
	if *order != "" {
		if opts.ViewOrder, err = pick("order", *order, []choice[replay.ViewOrder]{{"fifo", replay.ViewFIFO}, {"total", replay.ViewAgreed}}); err != nil {
			return fail2("%v", err)
		}
	}
	switch strings.ToLower(*level) {
	case "":
	case "agreed", "safe":
		if opts.ViewOrder == replay.ViewFIFO {
			return fail2("-level %s applies to -order total, not fifo", *level)
		}
		opts.ViewOrder = replay.ViewAgreed
		if strings.EqualFold(*level, "safe") {
			opts.ViewOrder = replay.ViewSafe
		}
	default:
		return fail2("-level %q: want agreed or safe", *level)
	}
	if *found < 0 || *found > reliable.MaxViewMembers {
		return fail2("-found %d: want 0..%d", *found, reliable.MaxViewMembers)
	}
	if *maxMembers < 0 || *maxMembers > reliable.MaxViewMembers {
		return fail2("-max-members %d: want 0..%d (0: from the capture)", *maxMembers, reliable.MaxViewMembers)
	}
	if *joinRetry < 0 {
		return fail2("-join-retry %v: want > 0 (0: the default)", *joinRetry)
	}
	opts.Found, opts.MaxMembers, opts.JoinRetry = *found, *maxMembers, *joinRetry
	if opts.Method, err = pick("method", *method, []choice[reliable.Method]{{"hybrid", reliable.Hybrid},
		{"method1", reliable.Method1}, {"method2", reliable.Method2}}); err != nil {
		return fail2("%v", err)
	}
	opts.Threshold, opts.History, opts.Quorum = *threshold, *history, *quorum
	if opts.Resilience, err = pick("resilience", *resilience, []choice[reliable.Resilience]{{"majority", reliable.SafeMajority},
		{"sequencer", reliable.SafeSequencer}}); err != nil {
		return fail2("%v", err)
	}
	opts.ElectionRetry = *electionRetry
	if opts.InitialEpoch, err = flagUint32("initial-epoch", *initialEpoch); err != nil {
		return fail2("%v", err)
	}
	if opts.InitialGlobal, err = optUint32("initial-global", *initialGlobal, "number"); err != nil {
		return fail2("%v", err)
	}
	if opts.Mode, err = pick("mode", *mode, []choice[reliable.Mode]{{"pbp2", reliable.PBP2}, {"pbp1", reliable.PBP1}}); err != nil {
		return fail2("%v", err)
	}
	if *members != "" {
		ms, err := replay.ParseMembers(*members)
		if err != nil {
			return fail2("-members: %v", err)
		}
		opts.Members = ms
	}
	if opts.Group, err = optUint32("group", *group, "group id"); err != nil {
		return fail2("%v", err)
	}
	if *start != "" {
		t, err := time.Parse(time.RFC3339Nano, *start)
		if err != nil {
			return fail2("-start %q: want an RFC 3339 time like 2026-01-02T15:04:05.123456789Z", *start)
		}
		opts.Start = t
	}
	if et, err := strconv.ParseUint(c.etherType, 0, 16); err == nil {
		opts.EtherType = uint16(et)
	}
	authOut := stdout
	if *lines {
		authOut = stderr // -lines prints only the deliveries
	}
	capt, ok := c.readKeyed("simulate", files, authOut, stderr)
	if !ok {
		return exitError
	}
	res, err := replay.Simulate(capt, opts)
	if err != nil {
		return fail2("%v", err)
	}
	if *lines {
		if err := res.WriteLines(stdout); err != nil {
			return fail2("%v", err)
		}
		return exitOK
	}
	if err := res.Write(stdout, capt, *data); err != nil {
		return fail2("%v", err)
	}
	return exitOK
}

func inject(args []string, stdout, stderr io.Writer) int {
	fs, c := newFlags("inject", "-i IFACE [-speed X | -asap] [flags] FILE...", `Sends the captured frames onto interface IFACE over AF_PACKET (needs
CAP_NET_RAW), at the captured pace, X times faster with -speed, or as fast
as the link takes them with -asap. Each frame goes once: outbound records,
records without direction, and one copy of frames whose sender's interface
was not captured (-all sends every record). Frames are sent as captured,
source MAC included. Progress goes to stderr about once a second.`, stderr)
	ifname := fs.String("i", "", "interface to send on (required)")
	speed := fs.Float64("speed", 1, "pace: 1 is the captured pace, 10 ten times faster")
	asap := fs.Bool("asap", false, "send as fast as possible, ignoring timestamps")
	all := fs.Bool("all", false, "send every record, also the copies a multi-interface capture holds of one transmission")
	linkKind := fs.String("link", "afpacket", "link to send with: afpacket or ring (PACKET_TX_RING)")
	files, code, ok := parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *ifname == "" {
		fmt.Fprintln(stderr, "pcap-replay inject: -i IFACE is required")
		fs.Usage()
		return exitError
	}
	if *speed <= 0 {
		fmt.Fprintf(stderr, "pcap-replay inject: -speed %v: want > 0\n", *speed)
		return exitError
	}
	capt, ok := c.read("inject", files, stderr)
	if !ok {
		return exitError
	}
	et, _ := strconv.ParseUint(c.etherType, 0, 16)
	var l link.Link
	var err error
	switch *linkKind {
	case "afpacket":
		l, err = afpacket.Open(*ifname, afpacket.Config{EtherType: uint16(et)})
	case "ring":
		l, err = ring.Open(*ifname, ring.Config{EtherType: uint16(et)})
	default:
		fmt.Fprintf(stderr, "pcap-replay inject: -link %q: want afpacket or ring\n", *linkKind)
		return exitError
	}
	if err != nil {
		fmt.Fprintf(stderr, "pcap-replay inject: %v\n", err)
		return exitError
	}
	defer l.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	frames := replay.Frames(capt, *all)
	n, err := replay.Inject(ctx, l, frames, replay.InjectOptions{Speed: *speed, ASAP: *asap, Progress: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "pcap-replay inject: %v (%d of %d frames sent)\n", err, n, len(frames))
		return exitError
	}
	fmt.Fprintf(stdout, "%d frames sent on %s\n", n, *ifname)
	return exitOK
}

// choice is one value a flag may name.
type choice[T any] struct {
	name string
	val  T
}

// pick returns the value of the choice named v, in any case, or an error
// naming the flag, v and the names it takes.
func pick[T any](flag, v string, choices []choice[T]) (T, error) {
	names := make([]string, len(choices))
	for i, c := range choices {
		if strings.ToLower(v) == c.name {
			return c.val, nil
		}
		names[i] = c.name
	}
	var zero T
	want := names[len(names)-1]
	if len(names) > 1 {
		want = strings.Join(names[:len(names)-1], ", ") + " or " + want
	}
	return zero, fmt.Errorf("-%s %q: want %s", flag, v, want)
}

// flagUint32 is v, the value of -flag, as 32 bits, or an error if it does
// not fit.
func flagUint32(flag string, v uint) (uint32, error) {
	if v > 0xffffffff {
		return 0, fmt.Errorf("-%s %d does not fit 32 bits", flag, v)
	}
	return uint32(v), nil
}

// optUint32 parses v, the value of -flag, as a 32-bit number (decimal, or
// with a 0x, 0o or 0b prefix); nil when v is empty. The error says what
// the number is.
func optUint32(flag, v, what string) (*uint32, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return nil, fmt.Errorf("-%s %q: want a 32-bit %s", flag, v, what)
	}
	n32 := uint32(n)
	return &n32, nil
}
