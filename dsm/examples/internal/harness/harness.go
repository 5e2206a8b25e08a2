// Package harness is what the five example programs share: their flags,
// the three ways to run (sequential; every rank in one process on the
// simulated segment; one process per host on a real interface), the
// -verify comparison with the sequential run, and the one-line report.
//
// A program is written once, as a Program against dsm.Node; the harness
// runs it under dsmsim.Run or dsm.Join.
package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/cliflag"
	"github.com/rbcast/rbcast/internal/envprof"
	"github.com/rbcast/rbcast/internal/exharness"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// Result is what one run (or one rank of a parallel run) computed.
type Result struct {
	// Valid is false for a rank that does not hold the result (matmult's
	// and tsp's workers): it is then neither checked nor reported.
	Valid bool
	// Checksum identifies the result bit for bit (suite.Checksum).
	Checksum uint64
	// Detail is extra "key=value" text for the report (iterations run,
	// tour length...); it is compared too.
	Detail string
	// Solve is the time of the computation proper, without setup: from
	// the barrier after initialisation to the end (as the thesis times).
	Solve time.Duration
	// CPU is the process's CPU time (user and system, ProcessCPU) over
	// Solve, for the programs that measure it (jacobi, halo); the report
	// gives it as cpu_us with one process per rank (-iface).
	CPU time.Duration
}

// Program is the parallel version of an algorithm, run by every rank.
type Program func(ctx context.Context, n *dsm.Node) (Result, error)

// Options are the flags every command shares.
type Options struct {
	// Common are -procs, -sim, -loss, -simseed, -iface, -rank, -pin,
	// -verify, -timeout and -spin.
	exharness.Common
	Group    uint
	Window   int
	Unbuf    bool
	NoExpect bool // barriers without Group.Expect hints (dsm.Config.NoExpect)
	// GOMAXPROCS (with -iface) is the process's GOMAXPROCS, 0 for Go's
	// default; $GOMAXPROCS wins unless -gomaxprocs is given. A program
	// whose rank computes for microseconds between node calls sets 1 as
	// its default (SetDefaultGOMAXPROCS).
	GOMAXPROCS    int
	gomaxprocsSet bool // -gomaxprocs was on the command line
	fs            *flag.FlagSet
	// Channels runs the program's channel mode: selective join and a
	// reliable group per segment among the ranks that join it
	// (dsm.Config.Channels). Only programs that call AllowChannels have
	// one.
	Channels bool
	// ChannelBarriers (with Channels): the program's loop crosses
	// channel barriers (dsm.Node.ChannelBarrier), which wait only for
	// the ranks sharing a segment and send nothing on the global group.
	ChannelBarriers      bool
	channelsKnown        bool
	channelBarriersKnown bool
	params               string
	// Stdout receives the report lines (os.Stdout from Flags).
	Stdout io.Writer
	// bounds are the programs' own size flags (Bound).
	bounds cliflag.Bounds
}

// Flags registers the shared flags on fs and returns where they land.
func Flags(fs *flag.FlagSet) *Options {
	o := &Options{Stdout: os.Stdout, fs: fs}
	fs.IntVar(&o.Rank, "rank", -1, "with -iface: this process's rank, 0..procs-1; rank 0 is the group's registration server")
	fs.UintVar(&o.Group, "group", 77, "with -iface: reliable group id")
	fs.IntVar(&o.Window, "window", 0, "PBP window in frames (0: the default)")
	fs.BoolVar(&o.Unbuf, "unbuffered", false, "send every write at once (the thesis's BUFFERWRITES=0)")
	fs.BoolVar(&o.NoExpect, "noexpect", false, "barriers do not hint the group which members they wait for (dsm.Config.NoExpect), for comparisons")
	fs.BoolVar(&o.ChannelBarriers, "channel-barriers", false, "with -channels: the loop's barriers are channel barriers, which wait only for the ranks sharing a segment and send no frame on the global group (dsm.Node.ChannelBarrier)")
	fs.BoolVar(&o.Channels, "channels", false, "channel mode: each rank joins only the segments it needs, each segment a reliable group of its own among its ranks (dsm.Config.Channels; thesis §7.2)")
	fs.IntVar(&o.GOMAXPROCS, "gomaxprocs", 0, "with -iface: the process's GOMAXPROCS (0: Go's default, one per CPU); $GOMAXPROCS wins unless this flag is given")
	fs.BoolVar(&o.Pin, "pin", false, "with -iface: bind this process to one CPU, the (rank mod CPUs)-th it may use, for more processes than cores (also when the environment sets DSM_PIN=1 or true)")
	o.Common.Flags(fs, ring.DefaultRxSpin)
	return o
}

// AllowChannels declares that the program has a channel mode (-channels):
// it joins only the segments it needs and writes a segment only after the
// barrier that follows its creation (dsm.Config.Selective's rules).
// barriers says whether its loop crosses channel barriers under
// -channel-barriers; a program without them refuses the flag rather than
// ignore it.
func (o *Options) AllowChannels(barriers bool) {
	o.channelsKnown = true
	o.channelBarriersKnown = barriers
}

// SetDefaultGOMAXPROCS makes n the default of -gomaxprocs. A rank that
// computes for microseconds between node calls wants 1: its program's
// goroutine and its groups' loop then hand over on one thread, where with
// a P per CPU each hand-over wakes another thread (futex) that spins for
// work before it sleeps again — CPU that ranks sharing cores take from
// each other (docs/dsm.md, "Waiting for frames"). A rank that computes for
// milliseconds does not: its loop would run only when the computation is
// preempted (every 10 ms), and its peers' requests wait that long.
func (o *Options) SetDefaultGOMAXPROCS(n int) {
	o.GOMAXPROCS = n
	if f := o.fs.Lookup("gomaxprocs"); f != nil {
		f.DefValue = strconv.Itoa(n)
	}
}

// parsed notes which flags the command line set (after o.fs.Parse).
func (o *Options) parsed() {
	o.fs.Visit(func(f *flag.Flag) { o.gomaxprocsSet = o.gomaxprocsSet || f.Name == "gomaxprocs" })
}

// gomaxprocs is the GOMAXPROCS Run sets for a rank over -iface, 0 for
// none: -gomaxprocs if given, else its default unless the environment
// sets GOMAXPROCS.
func (o *Options) gomaxprocs() int {
	if o.gomaxprocsSet || os.Getenv("GOMAXPROCS") == "" {
		return o.GOMAXPROCS
	}
	return 0
}

// SetParams sets the problem's parameters for the report ("n=512 iters=500").
func (o *Options) SetParams(format string, args ...any) {
	o.params = fmt.Sprintf(format, args...)
}

// Mode names how the command runs.
func (o *Options) Mode() string { return exharness.Mode(o.Sim, o.Iface) }

// Bound declares that the program's flag -name, read into v, must lie in
// lo..hi (why: what limits it, for the error); Run refuses any other
// value before it computes anything, rather than let a slice of a negative
// or overflowing size panic, or memory run out.
func (o *Options) Bound(name string, v *int, lo, hi int, why string) {
	o.bounds.Add(name, v, lo, hi, why)
}

// Run runs the command: sequential unless -sim or -iface. It prints one
// report line per rank that holds a result, and returns an error if a run
// failed or -verify found a difference.
func (o *Options) Run(name string, sequential func() Result, parallel Program) error {
	if err := o.bounds.Check(); err != nil {
		return err
	}
	if err := o.CheckMode(); err != nil {
		return err
	}
	if o.GOMAXPROCS < 0 {
		return fmt.Errorf("-gomaxprocs is %d, want 0 (Go's default) or more", o.GOMAXPROCS)
	}
	if err := o.CheckHost(); err != nil {
		return err
	}
	switch {
	case o.ChannelBarriers && !o.Channels:
		return errors.New("-channel-barriers needs -channels (channel barriers are barriers of the segment channels)")
	case o.Channels && !o.channelsKnown:
		return fmt.Errorf("-channels: %s has no channel mode (jacobi, halo and memory have)", name)
	case o.ChannelBarriers && !o.channelBarriersKnown:
		return fmt.Errorf("-channel-barriers: %s's barriers are global ones in channel mode too (jacobi and halo have channel barriers)", name)
	}
	if _, err := envPhases(); err != nil {
		return err
	}
	verifier := exharness.NewVerifier(o.Verify, func() (uint64, string) {
		w := sequential()
		return w.Checksum, w.Detail
	})
	head := func(rank int) string {
		mode := o.Mode()
		if o.Channels {
			mode += "+channels"
		}
		return fmt.Sprintf("%s mode=%s procs=%d rank=%d %s", name, mode, o.Procs, rank, o.params)
	}
	report := func(rank int, r Result, st *dsm.Stats, extra string) {
		v := verifier.Check(r.Valid, r.Checksum, r.Detail)
		line := exharness.Line(head(rank), r.Valid, r.Checksum, r.Detail, r.Solve)
		if r.CPU > 0 && o.Mode() == "host" {
			line += fmt.Sprintf(" cpu_us=%d", r.CPU.Microseconds())
		}
		if st != nil {
			line += " " + statsText(st)
		}
		fmt.Fprintln(o.Stdout, line+extra+v)
	}

	wcCopies, err := envWCCopies()
	if err != nil {
		return err
	}
	prof := -1 // the simulator's one process: one profile of every rank
	if o.Mode() == "host" {
		prof = o.Rank
	}
	stopProfile, err := envprof.CPU("DSM_CPUPROFILE", prof)
	if err != nil {
		return err
	}
	defer stopProfile()
	switch o.Mode() {
	case "seq":
		r := sequential()
		report(0, r, nil, "")
	case "sim":
		results := make([]Result, o.Procs)
		cfg := dsmsim.Config{
			Members: o.Procs,
			Seed:    o.SimSeed,
			In:      testnet.Impairment{Loss: o.Loss},
			Node: dsm.Config{Group: reliable.Config{Window: o.Window}, Unbuffered: o.Unbuf, Channels: o.Channels, NoExpect: o.NoExpect,
				WCCopies: wcCopies},
		}
		start := time.Now()
		sim, err := dsmsim.Run(cfg, func(n *dsm.Node) error {
			r, err := completed(context.Background(), n, parallel)
			results[n.Rank()] = r
			return err
		})
		if err != nil {
			return fmt.Errorf("on the simulator: %w", err)
		}
		wall := time.Since(start)
		for rank, r := range results {
			if !r.Valid {
				continue
			}
			var st *dsm.Stats
			if rank < len(sim.Stats) {
				st = &sim.Stats[rank]
			}
			report(rank, r, st, fmt.Sprintf(" virtual_us=%d wall_us=%d", sim.Elapsed.Microseconds(), wall.Microseconds()))
		}
		if len(sim.Stats) > 0 {
			fmt.Fprintf(o.Stdout, "%s total %s\n", head(-1), statsText(sumStats(sim.Stats)))
		}
	case "host":
		ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
		defer cancel()
		if p := o.gomaxprocs(); p > 0 {
			runtime.GOMAXPROCS(p)
		}
		if err := exharness.PinRank(o.Rank, o.Pin); err != nil {
			return err
		}
		l, err := ring.Open(o.Iface, ring.Config{RxSpin: exharness.RxSpin(o.Spin)})
		if err != nil {
			return err
		}
		defer l.Close()
		// Rank 0 registers the group; the others ask for their rank as
		// member id, and ranks follow member ids.
		gc := reliable.Config{
			Group:     uint32(o.Group),
			Size:      o.Procs,
			Server:    o.Rank == 0,
			RequestID: frame.MemberID(o.Rank),
			Window:    o.Window,
			Logger:    exharness.WarnLogger(),
		}
		n, err := dsm.Join(ctx, l, dsm.Config{Group: gc, Unbuffered: o.Unbuf, Channels: o.Channels, NoExpect: o.NoExpect,
			WCCopies: wcCopies})
		if err != nil {
			return fmt.Errorf("joining group %d on %s: %w", o.Group, o.Iface, err)
		}
		if n.Rank() != o.Rank {
			n.Exit()
			return exharness.WrongRank(o.Rank, n.Rank())
		}
		r, err := completed(ctx, n, parallel)
		if err != nil {
			n.Exit()
			return fmt.Errorf("rank %d: %w", n.Rank(), err)
		}
		st := n.Stats()
		if err := n.Exit(); err != nil {
			return fmt.Errorf("rank %d: exit: %w", n.Rank(), err)
		}
		if !r.Valid {
			// Workers report their traffic too (fig. 6.6 sums all ranks).
			fmt.Fprintf(o.Stdout, "%s solve_us=%d %s\n", head(n.Rank()), r.Solve.Microseconds(), statsText(&st))
		} else {
			report(n.Rank(), r, &st, "")
		}
	}
	return verifier.Err()
}

// statsText is the report's traffic part: DSM messages and bytes sent
// (thesis fig. 6.6 counts these), and the repair work under them (fig.
// 6.9's losses show as gaps repaired and frames retransmitted).
//
// Over every group of the node (the global one and each segment channel):
// frames sent, retransmitted, repair requests, gaps, and rxframes, the
// frames received; applied is the update messages applied here, and, with
// channels, foreign the frames of groups this node has not joined that
// reached it all the same (the link's Filtered, which counts link/mux's
// frames without a view: 0 when the kernel filter does its work).
func statsText(s *dsm.Stats) string {
	p := s.Group.Protocol
	sent, retrans, nacks, g, rx := p.Sent, p.Retransmitted, p.RepairRequests, gaps(&s.Group), s.Group.Link.FramesReceived
	for _, c := range s.Channels {
		sent += c.Protocol.Sent
		retrans += c.Protocol.Retransmitted
		nacks += c.Protocol.RepairRequests
		g += gaps(&c)
		rx += c.Link.FramesReceived
	}
	t := fmt.Sprintf("msgs=%d bytes=%d frames=%d retrans=%d nacks=%d gaps=%d kdrops=%d rxframes=%d applied=%d wakeups=%d",
		s.Messages, s.Bytes, sent, retrans, nacks, g, s.Group.Link.KernelDrops, rx, s.AppliedUpdates, s.Wakeups)
	if s.Channels != nil {
		var held uint64 // frames WC held in a peer's window (Config.WCCopies)
		for _, c := range s.Channels {
			held += c.HeldData
		}
		t += fmt.Sprintf(" channels=%d foreign=%d held=%d", len(s.Channels), s.Group.Link.Filtered, held)
	}
	return t
}

// gaps is the number of gaps repaired, over every member.
func gaps(s *reliable.Stats) uint64 {
	var n uint64
	for _, m := range s.Members {
		n += m.Repairs
	}
	return n
}

func sumStats(all []dsm.Stats) *dsm.Stats {
	var t dsm.Stats
	for _, s := range all {
		t.Messages += s.Messages
		t.Bytes += s.Bytes
		t.AppliedUpdates += s.AppliedUpdates
		addGroup(&t.Group, &s.Group)
		for key, c := range s.Channels {
			if t.Channels == nil {
				t.Channels = map[uint32]reliable.Stats{}
			}
			sum := t.Channels[key]
			addGroup(&sum, &c)
			t.Channels[key] = sum
		}
	}
	return &t
}

// addGroup adds the counters of s that statsText shows to t.
func addGroup(t, s *reliable.Stats) {
	t.Protocol.Sent += s.Protocol.Sent
	t.Protocol.Retransmitted += s.Protocol.Retransmitted
	t.Protocol.RepairRequests += s.Protocol.RepairRequests
	t.Members = append(t.Members, s.Members...)
	t.Link.KernelDrops += s.Link.KernelDrops
	t.Link.FramesReceived += s.Link.FramesReceived
	t.Link.Filtered += s.Link.Filtered
	t.HeldData += s.HeldData
}

// Setup registers a program's own flags and returns its two versions; it
// may read its flags only inside them (they run after parsing).
type Setup func(fs *flag.FlagSet, o *Options) (sequential func() Result, parallel Program)

// Main runs the command with os.Args and exits 1 if it failed, 2 on a
// flag error, 0 after -h (as flag.ExitOnError does).
func Main(name string, setup Setup) {
	exharness.Main(name, func(args []string, stdout io.Writer) error { return RunArgs(name, setup, args, stdout) })
}

// errUsage is the error of a flag error or a stray argument.
var errUsage = exharness.ErrUsage

// envHelp ends -h: the settings read from the environment (so that
// bench/mpi/compare and netns-bdsm, which pass theirs on, can set them).
const envHelp = `
Environment:
  DSM_PIN=1     as -pin (a boolean: 1, true, 0, false)
  DSM_PHASES=1  time each iteration's phases (jacobi, cg, halo) and print their median, p90, max, sum and the CPU per iteration to stderr
  DSM_PHASES_LOG=P  with DSM_PHASES=1: write each iteration's phase end times (Unix ns) to P.<rank>
  DSM_TRACE=P   write Go's execution trace of each rank's program to P.<rank>
  DSM_CPUPROFILE=P  write a CPU profile of each rank to P.<rank> (-sim: of the one process to P)
  DSM_WC_COPIES=N  dsm.Config.WCCopies: bytes WC copies of a peer before holding it in its window (-1: none)
`

// RunArgs parses args with the shared flags and setup's, then runs the
// command, reporting on stdout.
func RunArgs(name string, setup Setup, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o := Flags(fs)
	o.Stdout = stdout
	seq, par := setup(fs, o)
	if run, err := exharness.Parse(fs, name, args, envHelp); !run {
		return err // nil after -h: fs printed the usage
	}
	o.parsed()
	return o.Run(name, seq, par)
}

// doneKey is the harness's own segment: one location per rank, set when
// the rank's program has returned.
const doneKey = 0x444f4e45

// completed runs program, then checks that every rank completed it. A
// member that fails is not waited for at barriers (dsm.Node.Barrier), so
// the others would carry on with its part of the result missing; here each
// rank marks its location of a "done" segment after its program returns,
// and after one more barrier every rank checks every mark (FIFO delivery
// puts a rank's mark before its barrier message).
func completed(ctx context.Context, n *dsm.Node, program Program) (Result, error) {
	done, err := Attach(ctx, n, doneKey, n.Size(), 1)
	if err != nil {
		return Result{}, err
	}
	stop, err := envprof.Trace("DSM_TRACE", n.Rank())
	if err != nil {
		return Result{}, err
	}
	r, err := program(ctx, n)
	stop()
	if err != nil {
		return r, err
	}
	if err := done.Write(n.Rank(), []byte{1}); err != nil {
		return r, err
	}
	if err := n.Barrier(ctx, 1<<30); err != nil {
		return r, err
	}
	for rank, mark := range done.View() {
		if mark != 1 {
			return r, fmt.Errorf("rank %d never completed (it failed or left), so the result is incomplete", rank)
		}
	}
	return r, nil
}

// Attach creates segment key on rank 0 and joins it everywhere else.
func Attach(ctx context.Context, n *dsm.Node, key uint32, locations, size int) (*dsm.Segment, error) {
	if n.Rank() == 0 {
		return n.CreateSegment(key, locations, size)
	}
	return n.JoinSegment(ctx, key, locations, size)
}

// Verified runs the command with args (which should include -verify) and
// returns how many report lines say verify=ok, with the output for
// messages; it is what the commands' tests check.
func Verified(name string, setup Setup, args ...string) (ok int, output string, err error) {
	return exharness.Verified(func(args []string, stdout io.Writer) error { return RunArgs(name, setup, args, stdout) }, args)
}

// Barriers returns a function that waits at the program's next barrier,
// numbered 1, 2, 3... in the order called (every rank calls it equally
// often, so the numbers agree).
func Barriers(ctx context.Context, n *dsm.Node) func() error {
	id := 0
	return func() error {
		id++
		return n.Barrier(ctx, id)
	}
}

// BarrierPair is Barriers and a second function sharing its numbering for
// the barriers of the program's loop: channel barriers with channel
// (Options.ChannelBarriers), total ones otherwise.
func BarrierPair(ctx context.Context, n *dsm.Node, channel bool) (sync, loop func() error) {
	id := 0
	sync = func() error {
		id++
		return n.Barrier(ctx, id)
	}
	loop = sync
	if channel {
		loop = func() error {
			id++
			return n.ChannelBarrier(ctx, id)
		}
	}
	return sync, loop
}

// envPin reads DSM_PIN, which asks for -pin from the environment (set
// where bench/mpi/compare or netns-bdsm is started: both pass their
// environment on to the programs).
func envPin() (bool, error) {
	return exharness.EnvBool("DSM_PIN", "to pin each rank to a CPU")
}

// envWCCopies reads DSM_WC_COPIES, dsm.Config.WCCopies from the
// environment (bench-channels passes it on to every process): unset or
// empty is 0 (dsm.DefaultWCCopies), -1 holds in the window at once.
func envWCCopies() (int, error) {
	v := os.Getenv("DSM_WC_COPIES")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("DSM_WC_COPIES=%q: want a number of bytes (dsm.Config.WCCopies; -1 holds at once)", v)
	}
	return n, nil
}

// Bounds the programs share (Options.Bound): the side of an n×n matrix or
// grid of float64 (2 GiB at most), and iteration counts.
const (
	MaxSide  = 16384
	MaxIters = 1_000_000_000
)
