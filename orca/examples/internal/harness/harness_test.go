package harness

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/orca"
)

// sumSetup is a tiny program: every rank adds its rank+1 to a shared
// counter; rank 0 waits for the total and reports it.
func sumSetup(fs *flag.FlagSet, o *Options) (func() Result, Program) {
	counter := orca.NewClass[int64]("test.sum")
	add := orca.Write(counter, "add", orca.Int64, func(s *int64, d int64) int64 { *s += d; return *s })
	total := orca.Read(counter, "total", func(s *int64, v int64) int64 { return *s }).
		When(func(s *int64, v int64) bool { return *s >= v })
	want := func(procs int) int64 { return int64(procs * (procs + 1) / 2) }
	seq := func() Result { return Result{Valid: true, Checksum: uint64(want(o.Procs))} }
	par := func(ctx context.Context, n *orca.Node) (Result, error) {
		c, err := orca.New(n, "sum", counter, 0)
		if err != nil {
			return Result{}, err
		}
		if _, err := add.Call(ctx, c, int64(n.Rank()+1)); err != nil {
			return Result{}, err
		}
		if n.Rank() != 0 {
			return Result{}, nil
		}
		v, err := total.Call(ctx, c, want(n.Size()))
		return Result{Valid: true, Checksum: uint64(v)}, err
	}
	return seq, par
}

func TestSimAndVerify(t *testing.T) {
	ok, out, err := Verified("sum", sumSetup, "-sim", "-procs", "3", "-loss", "0.1", "-verify")
	if err != nil || ok != 1 || !strings.Contains(out, "sum mode=sim procs=3 rank=0") || !strings.Contains(out, "checksum=0000000000000006") {
		t.Fatalf("%d verified, %v:\n%s", ok, err, out)
	}
}

// Flag mistakes are errors that say what is wrong.
func TestOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-procs", "0"}, "-procs is 0"},
		{[]string{"-sim", "-iface", "eth0"}, "exclude each other"},
		{[]string{"-sim", "-loss", "1"}, "-loss is 1"},
		{[]string{"-procs", "2"}, "needs -sim or -iface"},
		{[]string{"-pin"}, "-pin binds a process"},
		{[]string{"-iface", "eth0", "-procs", "2", "-rank", "2"}, "-rank in 0..1"},
		{[]string{"-sim", "-safe", "always"}, `-safe is "always"`},
	} {
		var out strings.Builder
		err := RunArgs("sum", sumSetup, tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if err := RunArgs("sum", sumSetup, []string{"-nosuchflag"}, &strings.Builder{}); err != errUsage {
		t.Errorf("an unknown flag: %v", err)
	}
}

// Run's errors name no program: Main prints the command's name before
// them once ("tsp: on the simulator: ...").
func TestErrorsNameNoProgram(t *testing.T) {
	boom := errors.New("boom")
	fail := func(fs *flag.FlagSet, o *Options) (func() Result, Program) {
		return func() Result { return Result{Valid: true} }, func(ctx context.Context, n *orca.Node) (Result, error) { return Result{}, boom }
	}
	_, _, err := Verified("tsp", fail, "-sim", "-procs", "2")
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "on the simulator: ") || strings.Contains(err.Error(), "tsp") {
		t.Errorf("Run = %v, want the simulator's error without the command's name", err)
	}
}
