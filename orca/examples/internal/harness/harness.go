// Package harness is what the Orca example programs share: their flags
// (those of dsm/examples, so that bench/mpi/compare and netns-bdsm run
// them alike), the three ways to run (sequential; every rank in one
// process on the simulated segment; one process per host on a real
// interface), the -verify comparison with the sequential run, the
// one-line report, and a barrier object.
//
// A program is written once, as a Program against orca.Node; the harness
// runs it under orcasim.Run or orca.Join.
package harness

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/cliflag"
	"github.com/rbcast/rbcast/internal/envprof"
	"github.com/rbcast/rbcast/internal/exharness"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/orca/orcasim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// Result is what one run (or one rank of a parallel run) computed.
type Result struct {
	// Valid is false for a rank that does not hold the result: it is then
	// neither checked nor reported.
	Valid bool
	// Checksum identifies the result bit for bit (suite.Checksum).
	Checksum uint64
	// Detail is extra "key=value" text for the report; it is compared
	// too.
	Detail string
	// Solve is the time of the computation proper, without setup: from
	// the barrier after initialisation to the end.
	Solve time.Duration
}

// Program is the parallel version of an algorithm, run by every rank.
type Program func(ctx context.Context, n *orca.Node) (Result, error)

// Options are the flags every command shares.
type Options struct {
	// Common are -procs, -sim, -loss, -simseed, -iface, -rank, -pin,
	// -verify, -timeout and -spin.
	exharness.Common
	Group    uint
	Window   int
	Safe     string
	MaxWrite int
	params   string
	// Stdout receives the report lines (os.Stdout from Flags).
	Stdout io.Writer
	// bounds are the programs' own size flags (Bound).
	bounds cliflag.Bounds
}

// Flags registers the shared flags on fs and returns where they land.
func Flags(fs *flag.FlagSet) *Options {
	o := &Options{Stdout: os.Stdout}
	fs.IntVar(&o.Rank, "rank", -1, "with -iface: this process's rank, 0..procs-1; rank 0 is the group's registration server and first sequencer")
	fs.UintVar(&o.Group, "group", 78, "with -iface: reliable group id")
	fs.IntVar(&o.Window, "window", 0, "total order's window: requests in flight per member (0: the default)")
	fs.StringVar(&o.Safe, "safe", "majority", "when the total order delivers: majority (a majority holds a message; survives the sequencer's crash) or sequencer (as soon as it is numbered; faster)")
	fs.BoolVar(&o.Pin, "pin", false, "with -iface: bind this process to one CPU, the (rank mod CPUs)-th it may use (also when the environment sets DSM_PIN=1 or true)")
	fs.IntVar(&o.MaxWrite, "maxwrite", 64<<20, "largest write, in bytes (orca.Config.MaxWrite); every rank must use the same")
	o.Common.Flags(fs, ring.DefaultRxSpin)
	return o
}

// SetParams sets the problem's parameters for the report ("n=512").
func (o *Options) SetParams(format string, args ...any) {
	o.params = fmt.Sprintf(format, args...)
}

// Mode names how the command runs.
func (o *Options) Mode() string { return exharness.Mode(o.Sim, o.Iface) }

func (o *Options) config() (orca.Config, error) {
	gc := reliable.Config{Window: o.Window}
	switch o.Safe {
	case "majority":
	case "sequencer":
		gc.Resilience = reliable.SafeSequencer
	default:
		return orca.Config{}, fmt.Errorf("-safe is %q, want majority or sequencer", o.Safe)
	}
	return orca.Config{Group: gc, MaxWrite: o.MaxWrite}, nil
}

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
	if err := o.CheckHost(); err != nil {
		return err
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	verifier := exharness.NewVerifier(o.Verify, func() (uint64, string) {
		w := sequential()
		return w.Checksum, w.Detail
	})
	head := func(rank int) string {
		return fmt.Sprintf("%s mode=%s procs=%d rank=%d %s", name, o.Mode(), o.Procs, rank, o.params)
	}
	report := func(rank int, r Result, st *orca.Stats, extra string) {
		v := verifier.Check(r.Valid, r.Checksum, r.Detail)
		line := exharness.Line(head(rank), r.Valid, r.Checksum, r.Detail, r.Solve)
		if st != nil {
			line += " " + statsText(st)
		}
		fmt.Fprintln(o.Stdout, line+extra+v)
	}

	switch o.Mode() {
	case "seq":
		report(0, sequential(), nil, "")
	case "sim":
		results := make([]Result, o.Procs)
		scfg := orcasim.Config{Members: o.Procs, Seed: o.SimSeed, In: testnet.Impairment{Loss: o.Loss}, Node: cfg, Stay: true}
		start := time.Now()
		sim, err := orcasim.Run(scfg, func(n *orca.Node) error {
			r, err := completed(context.Background(), n, parallel)
			results[n.Rank()] = r
			return err
		})
		if err != nil {
			return fmt.Errorf("on the simulator: %w", err)
		}
		wall := time.Since(start)
		for rank, r := range results {
			if r.Valid {
				report(rank, r, &sim.Stats[rank], fmt.Sprintf(" virtual_us=%d wall_us=%d", sim.Elapsed.Microseconds(), wall.Microseconds()))
			}
		}
	case "host":
		ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
		defer cancel()
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
		cfg.Group.Group = uint32(o.Group)
		cfg.Group.Size, cfg.Group.Server, cfg.Group.RequestID = o.Procs, o.Rank == 0, frame.MemberID(o.Rank)
		cfg.Group.Logger = exharness.WarnLogger()
		n, err := orca.Join(ctx, l, cfg)
		if err != nil {
			return fmt.Errorf("joining group %d on %s: %w", o.Group, o.Iface, err)
		}
		if n.Rank() != o.Rank {
			n.Close()
			return exharness.WrongRank(o.Rank, n.Rank())
		}
		stopTrace, err := envprof.Trace("ORCA_TRACE", n.Rank())
		if err != nil {
			n.Close()
			return err
		}
		stopProfile, err := envprof.CPU("ORCA_CPUPROFILE", n.Rank())
		if err != nil {
			stopTrace()
			n.Close()
			return err
		}
		r, err := completed(ctx, n, parallel)
		stopProfile()
		stopTrace()
		if err != nil {
			n.Close()
			return fmt.Errorf("rank %d: %w", n.Rank(), err)
		}
		st := n.Stats()
		if err := n.Close(); err != nil {
			// The result is complete and checked at every rank (completed);
			// a leave that does not finish (the others left first) is
			// reported, not a failure.
			fmt.Fprintf(os.Stderr, "%s rank %d: leaving the group: %v\n", name, n.Rank(), err)
		}
		if !r.Valid {
			fmt.Fprintf(o.Stdout, "%s solve_us=%d %s\n", head(n.Rank()), r.Solve.Microseconds(), statsText(&st))
		} else {
			report(n.Rank(), r, &st, "")
		}
	}
	return verifier.Err()
}

// statsText is the report's traffic part: Orca messages and bytes sent,
// writes applied, and the repair work under them.
func statsText(s *orca.Stats) string {
	p := s.Group.Protocol
	var gaps uint64
	for _, m := range s.Group.Members {
		gaps += m.Repairs
	}
	return fmt.Sprintf("msgs=%d bytes=%d writes=%d applied=%d frames=%d retrans=%d nacks=%d gaps=%d kdrops=%d",
		s.Messages, s.Bytes, s.Writes, s.Applied, p.Sent, p.Retransmitted, p.RepairRequests, gaps, s.Group.Link.KernelDrops)
}

// Setup registers a program's own flags and returns its two versions; it
// may read its flags only inside them (they run after parsing).
type Setup func(fs *flag.FlagSet, o *Options) (sequential func() Result, parallel Program)

// Main runs the command with os.Args and exits 1 if it failed, 2 on a
// flag error, 0 after -h.
func Main(name string, setup Setup) {
	exharness.Main(name, func(args []string, stdout io.Writer) error { return RunArgs(name, setup, args, stdout) })
}

// errUsage is the error of a flag error or a stray argument.
var errUsage = exharness.ErrUsage

const envHelp = "\nEnvironment:\n  DSM_PIN=1     as -pin (a boolean: 1, true, 0, false)\n  ORCA_TRACE=P  with -iface: write Go's execution trace of the rank's program to P.<rank>\n  ORCA_CPUPROFILE=P  with -iface: write a CPU profile of the rank's program to P.<rank>\n"

// RunArgs parses args with the shared flags and setup's, then runs the
// command, reporting on stdout.
func RunArgs(name string, setup Setup, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o := Flags(fs)
	o.Stdout = stdout
	seq, par := setup(fs, o)
	if run, err := exharness.Parse(fs, name, args, envHelp); !run {
		return err
	}
	return o.Run(name, seq, par)
}

// Verified runs the command with args (which should include -verify) and
// returns how many report lines say verify=ok, with the output for
// messages; it is what the commands' tests check.
func Verified(name string, setup Setup, args ...string) (ok int, output string, err error) {
	return exharness.Verified(func(args []string, stdout io.Writer) error { return RunArgs(name, setup, args, stdout) }, args)
}

// completed runs program, then waits at a barrier until every rank has
// completed it: a rank that failed never arrives, and the others time out
// rather than report a result that misses its part.
func completed(ctx context.Context, n *orca.Node, program Program) (Result, error) {
	done, err := NewBarrier(n, "harness.done")
	if err != nil {
		return Result{}, err
	}
	r, err := program(ctx, n)
	if err != nil {
		return r, err
	}
	if err := done.Wait(ctx); err != nil {
		return r, fmt.Errorf("waiting for every rank to complete: %w", err)
	}
	return r, nil
}

// Barrier is Orca's barrier object (the paper's example of a guard): a
// count of arrivals, and a read that waits until it reaches the next
// multiple of the group's size.
type Barrier struct {
	n     *orca.Node
	obj   *orca.Object[int64]
	round int64
}

var (
	barrierClass = orca.NewClass[int64]("harness.barrier")
	arrive       = orca.Write(barrierClass, "arrive", orca.NoArgs, func(s *int64, _ struct{}) int64 { *s++; return *s })
	reached      = orca.Read(barrierClass, "reached", func(s *int64, v int64) bool { return true }).
			When(func(s *int64, v int64) bool { return *s >= v })
)

// NewBarrier makes the barrier object called name.
func NewBarrier(n *orca.Node, name string) (*Barrier, error) {
	o, err := orca.New(n, name, barrierClass, 0)
	if err != nil {
		return nil, err
	}
	return &Barrier{n: n, obj: o}, nil
}

// Wait arrives and waits until every rank has arrived as often.
func (b *Barrier) Wait(ctx context.Context) error {
	b.round++
	if _, err := arrive.Call(ctx, b.obj, struct{}{}); err != nil {
		return err
	}
	_, err := reached.Call(ctx, b.obj, b.round*int64(b.n.Size()))
	return err
}
