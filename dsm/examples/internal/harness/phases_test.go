package harness

import (
	"bytes"
	"os"
	"path/filepath"
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

// DSM_TRACE writes Go's execution trace to $DSM_TRACE.<rank>; a path that
// cannot be created is an error naming the variable.
func TestStartTrace(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DSM_TRACE", filepath.Join(dir, "tr"))
	stop, err := startTrace(2)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(filepath.Join(dir, "tr.2")); err != nil || fi.Size() == 0 {
		t.Errorf("trace file: %v, %v; want a non-empty tr.2", fi, err)
	}
	t.Setenv("DSM_TRACE", filepath.Join(dir, "missing", "tr"))
	if _, err := startTrace(0); err == nil || !strings.HasPrefix(err.Error(), "DSM_TRACE: ") {
		t.Errorf("uncreatable path: error %v, want one starting DSM_TRACE:", err)
	}
	t.Setenv("DSM_TRACE", "")
	stop, err = startTrace(0)
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

// DSM_CPUPROFILE writes a CPU profile to $DSM_CPUPROFILE.<rank> (to the
// path itself for rank -1, the simulator); a path that cannot be created
// is an error naming the variable.
func TestStartCPUProfile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DSM_CPUPROFILE", filepath.Join(dir, "cpu"))
	for _, c := range []struct {
		rank int
		file string
	}{{2, "cpu.2"}, {-1, "cpu"}} {
		stop, err := startCPUProfile(c.rank)
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if fi, err := os.Stat(filepath.Join(dir, c.file)); err != nil || fi.Size() == 0 {
			t.Errorf("rank %d: profile file: %v, %v; want a non-empty %s", c.rank, fi, err, c.file)
		}
	}
	t.Setenv("DSM_CPUPROFILE", filepath.Join(dir, "missing", "cpu"))
	if _, err := startCPUProfile(0); err == nil || !strings.HasPrefix(err.Error(), "DSM_CPUPROFILE: ") {
		t.Errorf("uncreatable path: error %v, want one starting DSM_CPUPROFILE:", err)
	}
}
