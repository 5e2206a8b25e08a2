package reliable

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// The benchmarks' settings from the environment. A value that does not
// parse stops the run with a message naming the variable instead of being
// ignored: any non-empty RBCAST_BENCH_DELIVER, "0" included, used to turn
// Deliver on, and a mistyped RBCAST_BENCH_WINDOW silently measured the
// default.

// envBool reads a boolean (1, 0, t, f, true, false; empty is false).
func envBool(tb testing.TB, name string) bool {
	v := os.Getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		envFail(tb, name, v, "a boolean (1, 0, true or false)")
	}
	return b
}

// envInt reads a non-negative integer; empty is 0.
func envInt(tb testing.TB, name string) int {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		envFail(tb, name, v, "a non-negative integer")
	}
	return n
}

// envDuration reads a duration like 200us; ok is false when unset.
func envDuration(tb testing.TB, name string) (d time.Duration, ok bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		envFail(tb, name, v, "a duration like 200us or 1ms")
	}
	return d, true
}

// envFail stops the run: through tb when there is one (so topologies
// already up are torn down), otherwise (package init) by exiting.
func envFail(tb testing.TB, name, v, want string) {
	if tb != nil {
		tb.Helper()
		tb.Fatalf("%s=%q: want %s", name, v, want)
	}
	fmt.Fprintf(os.Stderr, "%s=%q: want %s\n", name, v, want)
	os.Exit(2)
}

func TestBenchEnv(t *testing.T) {
	t.Setenv("RB_T_BOOL", "0")
	if envBool(t, "RB_T_BOOL") {
		t.Error(`RB_T_BOOL=0 read as true`)
	}
	t.Setenv("RB_T_BOOL", "1")
	if !envBool(t, "RB_T_BOOL") {
		t.Error(`RB_T_BOOL=1 read as false`)
	}
	t.Setenv("RB_T_INT", "256")
	if n := envInt(t, "RB_T_INT"); n != 256 {
		t.Errorf("RB_T_INT=256 read as %d", n)
	}
	t.Setenv("RB_T_DUR", "200us")
	if d, ok := envDuration(t, "RB_T_DUR"); !ok || d != 200*time.Microsecond {
		t.Errorf("RB_T_DUR=200us read as %v, %v", d, ok)
	}
	for _, c := range []struct{ name, v, want string }{
		{"RB_T_BOOL", "yes", `RB_T_BOOL="yes": want a boolean (1, 0, true or false)`},
		{"RB_T_INT", "25б", `RB_T_INT="25б": want a non-negative integer`},
		{"RB_T_INT", "-1", `RB_T_INT="-1": want a non-negative integer`},
		{"RB_T_DUR", "200", `RB_T_DUR="200": want a duration like 200us or 1ms`},
	} {
		t.Setenv(c.name, c.v)
		ft := &fatalTB{TB: t}
		func() {
			defer func() { recover() }()
			switch c.name {
			case "RB_T_BOOL":
				envBool(ft, c.name)
			case "RB_T_INT":
				envInt(ft, c.name)
			default:
				envDuration(ft, c.name)
			}
		}()
		if ft.msg != c.want {
			t.Errorf("%s=%q: got %q, want %q", c.name, c.v, ft.msg, c.want)
		}
	}
}

// fatalTB records Fatalf's message and stops the caller with a panic.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}
