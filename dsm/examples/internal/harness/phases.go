package harness

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"time"
)

// Phases times the phases of a program's iterations when the environment
// variable DSM_PHASES is true: Mark(i) ends phase i (started at the
// previous Mark), and Report prints, per phase, the median, 90th
// percentile and total wall time to stderr. Otherwise it does nothing
// (Mark is a nil check).
type Phases struct {
	names []string
	last  time.Time
	d     [][]time.Duration
	rank  int
	now   func() time.Time // time.Now; tests set a clock
	out   io.Writer        // os.Stderr
}

// envPhases reads DSM_PHASES (see envBool). Options.Run refuses a value
// that is not a boolean before any rank starts.
func envPhases() (bool, error) {
	return envBool("DSM_PHASES", "to time each iteration's phases")
}

// NewPhases returns phase timers named names, or nil unless DSM_PHASES is
// true.
func NewPhases(rank int, names ...string) *Phases {
	if on, _ := envPhases(); !on {
		return nil
	}
	return &Phases{names: names, d: make([][]time.Duration, len(names)), rank: rank, last: time.Now(), now: time.Now, out: os.Stderr}
}

// Start starts the first phase.
func (p *Phases) Start() {
	if p != nil {
		p.last = p.now()
	}
}

// Mark ends phase i and starts the next.
func (p *Phases) Mark(i int) {
	if p == nil {
		return
	}
	now := p.now()
	p.d[i] = append(p.d[i], now.Sub(p.last))
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
	fmt.Fprintln(p.out, line)
}

// startTrace starts Go's execution tracer (runtime/trace) into
// $DSM_TRACE.<rank> when DSM_TRACE is set; stop ends it.
func startTrace(rank int) (stop func(), err error) {
	path := os.Getenv("DSM_TRACE")
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, rank))
	if err != nil {
		return nil, fmt.Errorf("DSM_TRACE: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("DSM_TRACE: %w", err)
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}

// startCPUProfile starts Go's CPU profiler (runtime/pprof) into
// $DSM_CPUPROFILE.<rank> when DSM_CPUPROFILE is set (rank -1: into
// $DSM_CPUPROFILE itself, the simulator's one process running every rank);
// stop ends it.
func startCPUProfile(rank int) (stop func(), err error) {
	path := os.Getenv("DSM_CPUPROFILE")
	if path == "" {
		return func() {}, nil
	}
	if rank >= 0 {
		path = fmt.Sprintf("%s.%d", path, rank)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("DSM_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("DSM_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
