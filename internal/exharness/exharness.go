// Package exharness is what the DSM and Orca examples' harnesses
// (dsm/examples/internal/harness, orca/examples/internal/harness) share:
// the run modes and their flag checks, the -verify comparison with the
// sequential run, the report line's head, a rank's host setup (pinning,
// the ring's spin, the group's logger) and the command-line plumbing
// (Main, Parse, Verified). Each harness keeps what is its own: its flags,
// its node type, its statistics and its completion check.
//
// It touches no link: the harnesses open the ring themselves.
package exharness

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rbcast/rbcast/internal/cpupin"
)

// Mode names how an example runs: "sim" with -sim, "host" with -iface,
// "seq" otherwise.
func Mode(sim bool, iface string) string {
	switch {
	case sim:
		return "sim"
	case iface != "":
		return "host"
	}
	return "seq"
}

// Common are the flags both harnesses share. Flags registers those whose
// text is the same in both; each harness registers -rank and -pin (its
// own help) into Rank and Pin.
type Common struct {
	Procs   int
	Sim     bool
	Loss    float64
	SimSeed uint64
	Iface   string
	Rank    int
	Pin     bool
	Verify  bool
	Timeout time.Duration
	Spin    time.Duration
}

// Flags registers -procs, -sim, -loss, -simseed, -iface, -verify,
// -timeout and -spin on fs; spin is -spin's default (ring.DefaultRxSpin:
// this package opens no link).
func (c *Common) Flags(fs *flag.FlagSet, spin time.Duration) {
	fs.IntVar(&c.Procs, "procs", 1, "number of processes (ranks)")
	fs.BoolVar(&c.Sim, "sim", false, "run all -procs ranks in this process on the simulated segment (virtual time)")
	fs.Float64Var(&c.Loss, "loss", 0, "with -sim: probability that a frame is lost at each receiver")
	fs.Uint64Var(&c.SimSeed, "simseed", 1, "with -sim: seed of the simulated network")
	fs.StringVar(&c.Iface, "iface", "", "run one rank in this process over this interface (one process per host)")
	fs.BoolVar(&c.Verify, "verify", false, "also run the sequential version and fail unless the results are identical")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "give up after this long (-iface)")
	fs.DurationVar(&c.Spin, "spin", spin, "with -iface: poll the receive ring this long, yielding the CPU, before sleeping (ring.Config.RxSpin; 0: never)")
}

// CheckMode refuses a -procs, -sim, -iface and -loss that do not make a
// run.
func (c *Common) CheckMode() error {
	switch {
	case c.Procs < 1:
		return fmt.Errorf("-procs is %d, want at least 1", c.Procs)
	case c.Sim && c.Iface != "":
		return errors.New("-sim and -iface exclude each other: simulate every rank here, or run one rank per host")
	case c.Loss < 0 || c.Loss >= 1:
		return fmt.Errorf("-loss is %g, want a probability in [0, 1)", c.Loss)
	case !c.Sim && c.Iface == "" && c.Procs != 1:
		return fmt.Errorf("-procs %d needs -sim or -iface (the sequential run is one process)", c.Procs)
	}
	return nil
}

// CheckHost refuses -pin without -iface, and -iface without a -rank among
// -procs.
func (c *Common) CheckHost() error {
	switch {
	case c.Pin && c.Iface == "":
		return errors.New("-pin binds a process running one rank: it needs -iface")
	case c.Iface != "" && (c.Rank < 0 || c.Rank >= c.Procs):
		return fmt.Errorf("-iface needs -rank in 0..%d (-procs %d); it is %d", c.Procs-1, c.Procs, c.Rank)
	}
	return nil
}

// Verifier is -verify: it runs the sequential version once, when the
// first result is checked, and compares every result with it.
type Verifier struct {
	on         bool
	sequential func() (checksum uint64, detail string)
	ran        bool // sequential has run: wantSum and wantDetail hold its result
	wantSum    uint64
	wantDetail string
	failed     bool
}

// NewVerifier compares results with sequential's when on (-verify).
func NewVerifier(on bool, sequential func() (checksum uint64, detail string)) *Verifier {
	return &Verifier{on: on, sequential: sequential}
}

// Check is the report's verify part for a result: empty without -verify
// or for a rank that holds no result (valid false), " verify=ok", or
// " verify=FAIL(...)" with the sequential checksum and detail.
func (v *Verifier) Check(valid bool, checksum uint64, detail string) string {
	if !v.on || !valid {
		return ""
	}
	if !v.ran {
		v.wantSum, v.wantDetail = v.sequential()
		v.ran = true
	}
	if checksum != v.wantSum || detail != v.wantDetail {
		v.failed = true
		return fmt.Sprintf(" verify=FAIL(sequential checksum=%016x %s)", v.wantSum, v.wantDetail)
	}
	return " verify=ok"
}

// Err is the run's error if any result differed from the sequential one.
func (v *Verifier) Err() error {
	if v.failed {
		return errors.New("verify: the parallel result differs from the sequential one")
	}
	return nil
}

// Line is the start of a report line: head, then for a rank that holds
// the result its checksum and detail, then the solve time.
func Line(head string, valid bool, checksum uint64, detail string, solve time.Duration) string {
	line := head
	if valid {
		line += fmt.Sprintf(" checksum=%016x", checksum)
		if detail != "" {
			line += " " + detail
		}
	}
	return line + fmt.Sprintf(" solve_us=%d", solve.Microseconds())
}

// PinRank binds the process to its rank's CPU (cpupin.Pin) when -pin is
// set or the environment's DSM_PIN asks for it.
func PinRank(rank int, pin bool) error {
	env, err := EnvBool("DSM_PIN", "to pin each rank to a CPU")
	if err != nil {
		return err
	}
	if pin || env {
		_, err := cpupin.Pin(rank)
		return err
	}
	return nil
}

// RxSpin is ring.Config.RxSpin for -spin: -spin 0 means never, where the
// ring's 0 is its default.
func RxSpin(spin time.Duration) time.Duration {
	if spin == 0 {
		return -1
	}
	return spin
}

// WarnLogger is a rank's group logger: warnings and errors, on stderr.
func WarnLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// WrongRank is the error of a rank that registration numbered got, not
// asked.
func WrongRank(asked, got int) error {
	return fmt.Errorf("asked for rank %d, registration gave rank %d (is another process using -rank %d?)", asked, got, asked)
}

// EnvBool reads a boolean setting from the environment: unset or empty is
// no, otherwise a boolean as strconv.ParseBool reads it (1, t, true, 0, f,
// false, ...); another value is an error naming it and what it is for.
func EnvBool(name, what string) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 or true %s, 0 or false not to", name, v, what)
	}
	return on, nil
}

// ErrUsage is Parse's error for a flag error or a stray argument (fs has
// printed why).
var ErrUsage = errors.New("usage")

// Parse parses args into fs, whose -h ends with envHelp (the settings read
// from the environment). run is false after -h (fs printed the usage);
// the error is ErrUsage.
func Parse(fs *flag.FlagSet, name string, args []string, envHelp string) (run bool, err error) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", name)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), envHelp)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, nil
		}
		return false, ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q (see -h)\n", name, fs.Arg(0))
		return false, ErrUsage
	}
	return true, nil
}

// Main runs the command with os.Args and exits 1 if it failed, 2 on a
// flag error (ErrUsage), 0 after -h (as flag.ExitOnError does).
func Main(name string, runArgs func(args []string, stdout io.Writer) error) {
	err := runArgs(os.Args[1:], os.Stdout)
	if errors.Is(err, ErrUsage) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Verified runs the command with args (which should include -verify) and
// returns how many report lines say verify=ok, with the output for
// messages; it is what the commands' tests check.
func Verified(runArgs func(args []string, stdout io.Writer) error, args []string) (ok int, output string, err error) {
	var out strings.Builder
	err = runArgs(args, &out)
	return strings.Count(out.String(), " verify=ok"), out.String(), err
}
