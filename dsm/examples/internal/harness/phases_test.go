package harness

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// DSM_PHASES is a boolean: unset, empty, 0 and false give no timers (a nil
// *Phases, whose methods do nothing); a value that is not a boolean is
// refused by Options.Run with the variable and its value named.
func TestPhasesEnv(t *testing.T) {
	for _, v := range []string{"", "0", "false"} {
		t.Setenv("DSM_PHASES", v)
		p := NewPhases(0, "a")
		if p != nil {
			t.Errorf("DSM_PHASES=%q: timers on", v)
		}
		p.Start()
		p.Mark(0)
		p.Report()
	}
	t.Setenv("DSM_PHASES", "yes")
	o := Options{Procs: 1}
	err := o.Run("prog", func() Result { return Result{} }, nil)
	if err == nil || !strings.Contains(err.Error(), `DSM_PHASES="yes"`) {
		t.Errorf("DSM_PHASES=yes: Run error %v, want one naming the variable and its value", err)
	}
}

// With DSM_PHASES=1 each Mark adds the time since the previous one to its
// phase, and Report prints every phase's count, median, 90th percentile,
// maximum and sum.
func TestPhasesReport(t *testing.T) {
	t.Setenv("DSM_PHASES", "1")
	p := NewPhases(3, "compute", "write", "idle")
	if p == nil {
		t.Fatal("DSM_PHASES=1: no timers")
	}
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	var out bytes.Buffer
	p.out = &out
	p.Start()
	for i := range 10 {
		clock = clock.Add(time.Duration(i+1) * time.Millisecond) // compute: 1..10 ms
		p.Mark(0)
		clock = clock.Add(100 * time.Microsecond) // write: 100 µs each
		p.Mark(1)
	}
	p.Report()
	want := "phases rank=3 compute: n=10 med=6000us p90=10000us max=10000us sum=55ms write: n=10 med=100us p90=100us max=100us sum=1ms\n"
	if got := out.String(); got != want {
		t.Errorf("report\n%q\nwant\n%q", got, want)
	}
}
