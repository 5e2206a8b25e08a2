package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/internal/exharness"
)

// Phases times the phases of a program's iterations when the environment
// variable DSM_PHASES is true: Mark(i) ends phase i (started at the
// previous Mark), and Report prints, per phase, the median, 90th
// percentile and total wall time to stderr, and the process's CPU time
// (user and system) from Start to Report per iteration (per Mark(0)).
// With DSM_PHASES_LOG=P as well, Report writes every Mark's time to
// P.<rank>, one line per iteration (Unix nanoseconds, the phases in
// order, 0 for a phase not marked): the ranks of a run on one machine share the clock, so the
// lines say when a rank crossed against when its neighbours wrote.
// Otherwise it does nothing (Mark is a nil check).
type Phases struct {
	names []string
	last  time.Time
	d     [][]time.Duration
	at    [][]int64 // at[i]: the Unix times of phase i's ends
	rank  int
	now   func() time.Time     // time.Now; tests set a clock
	cpu   func() time.Duration // the process's CPU time; tests set one
	cpu0  time.Duration        // at Start
	out   io.Writer            // os.Stderr
	log   string               // DSM_PHASES_LOG
}

// envPhases reads DSM_PHASES (see exharness.EnvBool). Options.Run refuses a value
// that is not a boolean before any rank starts.
func envPhases() (bool, error) {
	return exharness.EnvBool("DSM_PHASES", "to time each iteration's phases")
}

// NewPhases returns phase timers named names, or nil unless DSM_PHASES is
// true.
func NewPhases(rank int, names ...string) *Phases {
	if on, _ := envPhases(); !on {
		return nil
	}
	return &Phases{names: names, d: make([][]time.Duration, len(names)), at: make([][]int64, len(names)), rank: rank,
		last: time.Now(), now: time.Now, cpu: ProcessCPU, out: os.Stderr, log: os.Getenv("DSM_PHASES_LOG")}
}

// ProcessCPU is the user and system time the process has used, every
// thread's (getrusage RUSAGE_SELF).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Start starts the first phase.
func (p *Phases) Start() {
	if p != nil {
		p.last = p.now()
		p.cpu0 = p.cpu()
	}
}

// Mark ends phase i and starts the next.
func (p *Phases) Mark(i int) {
	if p == nil {
		return
	}
	now := p.now()
	p.d[i] = append(p.d[i], now.Sub(p.last))
	p.at[i] = append(p.at[i], now.UnixNano())
	p.last = now
}

// Report prints the phases' statistics (to stderr).
func (p *Phases) Report() {
	if p == nil {
		return
	}
	line := fmt.Sprintf("phases rank=%d", p.rank)
	for i, ds := range p.d {
		if len(ds) == 0 {
			continue
		}
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		line += fmt.Sprintf(" %s: n=%d med=%dus p90=%dus max=%dus sum=%dms", p.names[i], len(s),
			s[len(s)/2].Microseconds(), s[len(s)*9/10].Microseconds(), s[len(s)-1].Microseconds(), sum.Milliseconds())
	}
	if iters := len(p.d[0]); iters > 0 {
		line += fmt.Sprintf(" cpu=%dus/iter", (p.cpu()-p.cpu0).Microseconds()/int64(iters))
	}
	fmt.Fprintln(p.out, line)
	if p.log != "" {
		if err := p.writeLog(fmt.Sprintf("%s.%d", p.log, p.rank)); err != nil {
			fmt.Fprintf(p.out, "phases rank=%d: DSM_PHASES_LOG: %v\n", p.rank, err)
		}
	}
}

// writeLog writes the Marks' times to path, an iteration a line.
func (p *Phases) writeLog(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for k := range p.at[0] {
		for i := range p.at {
			sep := " "
			if i == len(p.at)-1 {
				sep = "\n"
			}
			var t int64
			if k < len(p.at[i]) {
				t = p.at[i][k]
			}
			fmt.Fprintf(w, "%d%s", t, sep)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
