package harness

import (
	"fmt"
	"io"
	"os"
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
