// Command rbcast-sim runs a group of rbcast members on the simulated lossy
// segment of package testnet, in virtual time, and verifies what arrived.
// With no flags it runs the embedded default that `make demo` shows: eight
// members of a PBP2 reliable-broadcast group, 2% loss everywhere, bursts at
// one member, a small receive queue at another, duplication, reordering,
// jitter and corruption. With -raw the members send unrepaired frames
// instead, to show the segment itself.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rbcast/rbcast/internal/simdemo"
	"github.com/rbcast/rbcast/reliable"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	for _, a := range args {
		if a == "-raw" || a == "--raw" {
			return runRaw(args)
		}
	}
	return runGroup(args)
}

func runGroup(args []string) int {
	d := simdemo.DefaultGroup()
	fs := flag.NewFlagSet("rbcast-sim", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: rbcast-sim [flags]
       rbcast-sim -raw [raw flags]   (see rbcast-sim -raw -h)

Runs a reliable-broadcast group (PBP) on a simulated lossy Ethernet segment
in virtual time (no root, no network): every member broadcasts messages of
varied sizes while the segment loses, duplicates, reorders and corrupts
frames. Then it verifies that every member delivered every other member's
messages exactly once, in each sender's order, byte for byte, that no
member was removed, and that the same seed replays the same run frame for
frame. Exits 1 if any check fails.

flags:
`)
		fs.PrintDefaults()
	}
	c := d
	mode := fs.String("mode", "pbp2", "protocol: pbp2 (negative acks) or pbp1 (positive acks)")
	fs.Uint64Var(&c.Seed, "seed", d.Seed, "random seed: the same seed gives the same run")
	fs.IntVar(&c.Members, "members", d.Members, "members in the group (2..64)")
	fs.IntVar(&c.Messages, "messages", d.Messages, "messages each member broadcasts (at most 10000000)")
	fs.IntVar(&c.MinSize, "min-size", d.MinSize, "smallest message; sizes vary up to the largest one frame carries")
	fs.IntVar(&c.MTU, "mtu", d.MTU, "link MTU (1500, 9000, up to 65535)")
	impairmentFlags(fs, &c.Impairments)
	fs.IntVar(&c.SmallQueue, "slow-queue", d.SmallQueue, "the slow member's receive queue, in frames")
	quiet := fs.Bool("q", false, "no progress lines")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	fitSpecialMembers(fs, &c.Impairments, c.Members)
	switch *mode {
	case "pbp2":
		c.Mode = reliable.PBP2
	case "pbp1":
		c.Mode = reliable.PBP1
	default:
		fmt.Fprintf(os.Stderr, "rbcast-sim: -mode %q: want pbp2 or pbp1\n", *mode)
		return 2
	}
	if *quiet {
		c.Progress = 0
	}
	if err := c.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: %v\n", err)
		return 2
	}
	fmt.Printf("rbcast-sim: a %s group of %d members on a simulated segment (seed %d, MTU %d), each broadcasting %d messages\n",
		*mode, c.Members, c.Seed, c.MTU, c.Messages)
	fmt.Printf("  impairments: %.1f%% loss at every member, bursts at member %d, member %d reads only every %v (%d-frame queue), %.1f%% dup, %.1f%% reorder, %.2f%% corrupt, %v jitter\n",
		100*c.Loss, c.BurstMember+1, c.SlowMember+1, c.SlowEvery, c.SmallQueue, 100*c.Duplicate, 100*c.Reorder, 100*c.Corrupt, c.Jitter)
	wall := time.Now()
	res, err := simdemo.RunGroup(c, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: %v\n", err)
		return 2
	}
	fmt.Printf("\n  %-6s %8s %9s %8s %6s %6s %8s %8s %8s %8s %10s\n", "member", "proposed", "delivered", "dropped", "retx", "NACKs", "corrupt", "repair", "p99", "overflow", "done at")
	for _, m := range res.Members {
		fmt.Printf("  %-6d %8d %9d %8d %6d %6d %8d %8v %8v %8d %8.1fms\n", m.ID, m.Proposed, m.Delivered, m.Segment.Dropped(),
			m.Stats.Protocol.Retransmitted, m.Stats.Protocol.RepairRequests, m.Stats.BadFrames.Checksum,
			m.Stats.RepairP50.Round(time.Microsecond), m.Stats.RepairP99.Round(time.Microsecond), m.Segment.Overflow, float64(m.Completed)/1e6)
	}
	fmt.Printf("\n  %d virtual ms, %d segment events, %.2fs wall\n", res.Duration.Milliseconds(), res.Events, time.Since(wall).Seconds())
	lines, verr := simdemo.VerifyGroup(res)
	for _, l := range lines {
		fmt.Println("  " + l)
	}
	c.Progress = 0
	again, err := simdemo.RunGroup(c, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: replay: %v\n", err)
		return 2
	}
	replayOK := again.TraceHash == res.TraceHash
	fmt.Printf("  determinism: replay of seed %d gave trace hash %016x, first run %016x (%d events)\n", c.Seed, again.TraceHash, res.TraceHash, res.Events)
	return verdict(c.Seed, verr, replayOK)
}

func runRaw(args []string) int {
	var rest []string
	for _, a := range args {
		if a != "-raw" && a != "--raw" {
			rest = append(rest, a)
		}
	}
	args = rest
	d := simdemo.Default()
	fs := flag.NewFlagSet("rbcast-sim", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: rbcast-sim -raw [flags]

Runs rbcast members on a simulated lossy Ethernet segment in virtual time
(no root, no network) and verifies: every accepted frame carries exactly
the bytes its sender encoded, every corrupted copy is rejected, nothing that
reached a member is lost inside the stack, and the same seed replays the
same run frame for frame. Exits 1 if any check fails.

The members send raw frames, unrepaired: this shows the segment the
reliable protocols work on (without -raw, rbcast-sim runs a PBP group).

flags:
`)
		fs.PrintDefaults()
	}
	c := d
	fs.Uint64Var(&c.Seed, "seed", d.Seed, "random seed: the same seed gives the same run")
	fs.IntVar(&c.Members, "members", d.Members, "members in the group")
	fs.IntVar(&c.Frames, "frames", d.Frames, "frames each member sends")
	fs.IntVar(&c.Payload, "payload", d.Payload, "payload bytes per frame")
	fs.IntVar(&c.MTU, "mtu", d.MTU, "link MTU (1500, 9000, up to 65535)")
	fs.DurationVar(&c.Interval, "interval", d.Interval, "virtual time between a member's batches")
	fs.IntVar(&c.Batch, "batch", d.Batch, "frames per batch")
	impairmentFlags(fs, &c.Impairments)
	quiet := fs.Bool("q", false, "no progress lines")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	fitSpecialMembers(fs, &c.Impairments, c.Members)
	if *quiet {
		c.Progress = 0
	}
	if err := c.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: %v\n", err)
		return 2
	}
	fmt.Printf("rbcast-sim: %d members on a simulated segment (seed %d, MTU %d), each broadcasting %d frames of %d bytes\n",
		c.Members, c.Seed, c.MTU, c.Frames, c.Payload)
	fmt.Printf("  impairments: %.1f%% loss at every member, bursts at member %d, slow reader member %d, %.1f%% dup, %.1f%% reorder, %.2f%% corrupt, %v jitter\n",
		100*c.Loss, c.BurstMember, c.SlowMember, 100*c.Duplicate, 100*c.Reorder, 100*c.Corrupt, c.Jitter)
	wall := time.Now()
	res, err := simdemo.Run(c, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: %v\n", err)
		return 2
	}
	fmt.Printf("\n  %-6s %7s %9s %8s %7s %5s %8s %8s %8s %8s\n", "member", "sent", "accepted", "missing", "missing%", "dups", "rejected", "lost", "burst", "overflow")
	var missing, expected int
	for _, m := range res.Members {
		missing += m.Missing()
		expected += m.Expected
		fmt.Printf("  %-6d %7d %9d %8d %7.2f%% %5d %8d %8d %8d %8d\n", m.ID, m.Sent, m.Unique, m.Missing(),
			100*float64(m.Missing())/float64(m.Expected), m.Dups, m.Rejected, m.Dropped.Lost, m.Dropped.BurstLost, m.Dropped.Overflow)
	}
	fmt.Printf("\n  %d virtual ms, %d segment events, %.2fs wall\n", res.Duration.Milliseconds(), res.Events, time.Since(wall).Seconds())
	lines, verr := simdemo.Verify(res)
	for _, l := range lines {
		fmt.Println("  " + l)
	}
	again, err := simdemo.Run(withoutProgress(c), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: replay: %v\n", err)
		return 2
	}
	replayOK := again.TraceHash == res.TraceHash
	fmt.Printf("  determinism: replay of seed %d gave trace hash %016x, first run %016x (%d events)\n", c.Seed, again.TraceHash, res.TraceHash, res.Events)
	fmt.Printf("\n  %.2f%% of frames (%d of %d) never reached some member: the gaps reliable broadcast (PBP) must repair.\n",
		100*float64(missing)/float64(max(expected, 1)), missing, expected)
	return verdict(c.Seed, verr, replayOK)
}

// verdict says whether the run passed its checks (verr, nil if it did)
// and its replay of seed (replayOK), and returns the exit code: 0 if
// both passed, else 1.
func verdict(seed uint64, verr error, replayOK bool) int {
	if verr != nil {
		fmt.Fprintf(os.Stderr, "rbcast-sim: VERIFICATION FAILED: %v\n", verr)
	}
	if !replayOK {
		fmt.Fprintf(os.Stderr, "rbcast-sim: VERIFICATION FAILED: seed %d did not replay identically\n", seed)
	}
	if verr != nil || !replayOK {
		return 1
	}
	fmt.Println("rbcast-sim: verification passed")
	return 0
}

func withoutProgress(c simdemo.Config) simdemo.Config {
	c.Progress = 0
	return c
}

// impairmentFlags registers the flags both scenarios share; the current
// values of im are the defaults.
func impairmentFlags(fs *flag.FlagSet, im *simdemo.Impairments) {
	fs.Float64Var(&im.Loss, "loss", im.Loss, "independent receive loss probability at every member")
	fs.IntVar(&im.BurstMember, "burst-member", im.BurstMember, "index (from 0) of the member with Gilbert-Elliott burst loss (-1: none)")
	fs.IntVar(&im.SlowMember, "slow-member", im.SlowMember, "index (from 0) of the member that reads its link only every -slow-every (-1: none)")
	fs.DurationVar(&im.SlowEvery, "slow-every", im.SlowEvery, "how often the slow member reads (0: as often as the others)")
	fs.Float64Var(&im.Duplicate, "dup", im.Duplicate, "duplication probability")
	fs.Float64Var(&im.Reorder, "reorder", im.Reorder, "reordering probability")
	fs.Float64Var(&im.Corrupt, "corrupt", im.Corrupt, "probability a frame has a byte corrupted")
	fs.DurationVar(&im.Jitter, "jitter", im.Jitter, "maximum extra delay per frame")
}

// fitSpecialMembers drops the default burst and slow members that a
// smaller -members leaves out (-members 3: there is no member 7); one set
// with its flag stays, for the scenario to refuse.
func fitSpecialMembers(fs *flag.FlagSet, im *simdemo.Impairments, members int) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["burst-member"] && im.BurstMember >= members {
		im.BurstMember = -1
	}
	if !set["slow-member"] && im.SlowMember >= members {
		im.SlowMember = -1
	}
}

// parse parses args; when it reports !ok the command exits with code (0
// after -h, 2 for bad usage).
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rbcast-sim: unexpected argument %q (see -h)\n", fs.Arg(0))
		return 2, false
	}
	return 0, true
}
