package harness

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm"
)

func options(t *testing.T, args ...string) (*Options, *bytes.Buffer) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o.Stdout = &out
	return o, &out
}

// A parallel result that differs from the sequential one must fail -verify.
func TestVerifyCatchesADifference(t *testing.T) {
	o, out := options(t, "-sim", "-procs", "2", "-verify")
	seq := func() Result { return Result{Valid: true, Checksum: 1, Detail: "done=3"} }
	par := func(ctx context.Context, n *dsm.Node) (Result, error) {
		if err := n.Barrier(ctx, 1); err != nil {
			return Result{}, err
		}
		return Result{Valid: true, Checksum: uint64(1 + n.Rank()), Detail: "done=3"}, nil
	}
	err := o.Run("test", seq, par)
	if err == nil || !strings.Contains(err.Error(), "verify") {
		t.Fatalf("Run = %v, want a verify error", err)
	}
	if !strings.Contains(out.String(), "rank=0 ") || !strings.Contains(out.String(), "verify=ok") ||
		!strings.Contains(out.String(), "verify=FAIL(sequential checksum=0000000000000001 done=3)") {
		t.Fatalf("report:\n%s", out)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-procs", "3"}, "-procs 3 needs -sim or -iface"},
		{[]string{"-procs", "0", "-sim"}, "-procs is 0"},
		{[]string{"-sim", "-iface", "eth0"}, "exclude each other"},
		{[]string{"-sim", "-loss", "1"}, "-loss is 1"},
		{[]string{"-iface", "eth0", "-procs", "2"}, "-iface needs -rank in 0..1 (-procs 2); it is -1"},
		{[]string{"-iface", "eth0", "-procs", "2", "-rank", "2"}, "it is 2"},
		{[]string{"-sim", "-procs", "2", "-pin"}, "-pin binds a process running one rank: it needs -iface"},
		{[]string{"-sim", "-procs", "2", "-channels"}, "-channels: test has no channel mode (jacobi, halo and memory have)"},
	} {
		o, _ := options(t, tc.args...)
		err := o.Run("test", func() Result { return Result{} }, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: Run = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// A program with a channel mode but global barriers (memory) refuses
// -channel-barriers instead of running without them; one with channel
// barriers takes the flag.
func TestChannelBarriersNeedTheProgram(t *testing.T) {
	const refusal = "-channel-barriers: test's barriers are global ones in channel mode too"
	for _, barriers := range []bool{false, true} {
		o, _ := options(t, "-sim", "-procs", "2", "-channels", "-channel-barriers")
		o.AllowChannels(barriers)
		err := o.Run("test", func() Result { return Result{} }, nil)
		if refused := err != nil && strings.Contains(err.Error(), refusal); refused == barriers {
			t.Errorf("AllowChannels(%v): Run = %v; refused %v", barriers, err, refused)
		}
	}
}

// -h prints the usage and succeeds without running anything; a bad flag
// or a stray argument is a usage error.
func TestHelpAndUsage(t *testing.T) {
	setup := func(fs *flag.FlagSet, o *Options) (func() Result, Program) {
		fs.Int("n", 1, "size")
		return func() Result { t.Fatal("ran after -h"); return Result{} }, nil
	}
	var out bytes.Buffer
	if err := RunArgs("test", setup, []string{"-h"}, &out); err != nil || out.Len() != 0 {
		t.Fatalf("RunArgs(-h) = %v, stdout %q; want nil and no report", err, out.String())
	}
	// The usage goes to the flag set's output (stderr): capture it.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	err = RunArgs("test", setup, []string{"-h"}, &out)
	os.Stderr = stderr
	w.Close()
	if err != nil {
		t.Fatalf("RunArgs(-h) = %v", err)
	}
	usage, _ := io.ReadAll(r)
	for _, want := range []string{"Usage of test:", "-n int", "DSM_PIN=1", "DSM_PHASES=1", "DSM_TRACE=P", "DSM_WC_COPIES=N"} {
		if !strings.Contains(string(usage), want) {
			t.Errorf("-h output lacks %q:\n%s", want, usage)
		}
	}
	for _, args := range [][]string{{"-bogus"}, {"stray"}} {
		if err := RunArgs("test", setup, args, &out); !errors.Is(err, errUsage) {
			t.Errorf("RunArgs(%q) = %v, want errUsage", args, err)
		}
	}
}

// DSM_PIN is a boolean: 0 and false no longer pin, a value that is
// neither is refused with its name and the values it takes.
func TestEnvPin(t *testing.T) {
	for _, c := range []struct {
		v    string
		pin  bool
		fail bool
	}{{"", false, false}, {"1", true, false}, {"true", true, false}, {"0", false, false}, {"false", false, false}, {"yes", false, true}} {
		t.Setenv("DSM_PIN", c.v)
		pin, err := envPin()
		if pin != c.pin || (err != nil) != c.fail {
			t.Errorf("DSM_PIN=%q: pin %v, err %v; want pin %v, failing %v", c.v, pin, err, c.pin, c.fail)
		}
		if err != nil && !strings.Contains(err.Error(), `DSM_PIN="yes"`) {
			t.Errorf("DSM_PIN=%q: error %q does not name the variable and its value", c.v, err)
		}
	}
}

// DSM_WC_COPIES is dsm.Config.WCCopies: a number, negative allowed; any
// other value is refused with its name and value.
func TestEnvWCCopies(t *testing.T) {
	for _, c := range []struct {
		v    string
		n    int
		fail bool
	}{{"", 0, false}, {"-1", -1, false}, {"65536", 65536, false}, {"64k", 0, true}} {
		t.Setenv("DSM_WC_COPIES", c.v)
		n, err := envWCCopies()
		if n != c.n || (err != nil) != c.fail {
			t.Errorf("DSM_WC_COPIES=%q: %d, err %v; want %d, failing %v", c.v, n, err, c.n, c.fail)
		}
		if err != nil && !strings.Contains(err.Error(), `DSM_WC_COPIES="64k"`) {
			t.Errorf("DSM_WC_COPIES=%q: error %q does not name the variable and its value", c.v, err)
		}
	}
}

// A program's -gomaxprocs default (SetDefaultGOMAXPROCS) is what a rank
// over -iface runs at, unless GOMAXPROCS is in the environment; the flag
// given on the command line wins over both. A negative value is refused.
func TestGOMAXPROCS(t *testing.T) {
	for _, c := range []struct {
		def  int
		env  string
		args []string
		want int
	}{
		{def: 1, want: 1},
		{def: 1, env: "2", want: 0},
		{def: 1, env: "2", args: []string{"-gomaxprocs", "3"}, want: 3},
		{def: 0, want: 0},
		{def: 0, args: []string{"-gomaxprocs", "2"}, want: 2},
	} {
		t.Setenv("GOMAXPROCS", c.env)
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := Flags(fs)
		if c.def != 0 {
			o.SetDefaultGOMAXPROCS(c.def)
		}
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		o.parsed()
		if got := o.gomaxprocs(); got != c.want {
			t.Errorf("default %d, GOMAXPROCS=%q, %q: sets %d, want %d (0: leaves it)", c.def, c.env, c.args, got, c.want)
		}
		if f := fs.Lookup("gomaxprocs"); c.def != 0 && f.DefValue != "1" {
			t.Errorf("default %d: -h shows default %q", c.def, f.DefValue)
		}
	}
	o, _ := options(t, "-gomaxprocs", "-1")
	if err := o.Run("test", func() Result { return Result{} }, nil); err == nil || !strings.Contains(err.Error(), "-gomaxprocs is -1") {
		t.Errorf("-gomaxprocs -1: Run = %v, want an error naming it", err)
	}
}

// Run's errors name no program: Main prints the command's name before
// them once ("jacobi: on the simulator: ...").
func TestErrorsNameNoProgram(t *testing.T) {
	boom := errors.New("boom")
	o, _ := options(t, "-sim", "-procs", "2")
	err := o.Run("jacobi", func() Result { return Result{Valid: true} }, func(ctx context.Context, n *dsm.Node) (Result, error) {
		return Result{}, boom
	})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "on the simulator: ") || strings.Contains(err.Error(), "jacobi") {
		t.Errorf("Run = %v, want the simulator's error without the command's name", err)
	}
}
