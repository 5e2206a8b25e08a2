package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/exharness"
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
	o := Options{Common: exharness.Common{Procs: 1}}
	err := o.Run("prog", func() Result { return Result{} }, nil)
	if err == nil || !strings.Contains(err.Error(), `DSM_PHASES="yes"`) {
		t.Errorf("DSM_PHASES=yes: Run error %v, want one naming the variable and its value", err)
	}
}

// With DSM_PHASES=1 each Mark adds the time since the previous one to its
// phase, and Report prints every phase's count, median, 90th percentile,
// maximum and sum, and the CPU time from Start to Report per iteration;
// with DSM_PHASES_LOG=P it writes every Mark's time to P.<rank>.
func TestPhasesReport(t *testing.T) {
	t.Setenv("DSM_PHASES", "1")
	log := filepath.Join(t.TempDir(), "ph")
	t.Setenv("DSM_PHASES_LOG", log)
	p := NewPhases(3, "compute", "write", "idle")
	if p == nil {
		t.Fatal("DSM_PHASES=1: no timers")
	}
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	cpu := 7 * time.Second
	p.cpu = func() time.Duration { return cpu }
	var out bytes.Buffer
	p.out = &out
	p.Start()
	for i := range 10 {
		clock = clock.Add(time.Duration(i+1) * time.Millisecond) // compute: 1..10 ms
		p.Mark(0)
		clock = clock.Add(100 * time.Microsecond) // write: 100 µs each
		p.Mark(1)
		cpu += 250 * time.Microsecond
	}
	p.Report()
	want := "phases rank=3 compute: n=10 med=6000us p90=10000us max=10000us sum=55ms write: n=10 med=100us p90=100us max=100us sum=1ms cpu=250us/iter\n"
	if got := out.String(); got != want {
		t.Errorf("report\n%q\nwant\n%q", got, want)
	}
	b, err := os.ReadFile(log + ".3")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 10 || lines[0] != "1000000 1100000 0" || lines[9] != "55900000 56000000 0" {
		t.Errorf("DSM_PHASES_LOG: %d lines, first %q, last %q; want 10, \"1000000 1100000 0\", \"55900000 56000000 0\" (idle never marked)", len(lines), lines[0], lines[len(lines)-1])
	}
}
