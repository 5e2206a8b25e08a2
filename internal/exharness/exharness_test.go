package exharness

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// -verify runs the sequential version once, however many results it
// checks, and a result that differs fails the run by name.
func TestVerifier(t *testing.T) {
	runs := 0
	v := NewVerifier(true, func() (uint64, string) { runs++; return 0xab, "len=3" })
	if got := v.Check(false, 1, ""); got != "" {
		t.Errorf("rank without a result: %q, want nothing", got)
	}
	if runs != 0 {
		t.Errorf("sequential ran %d times for a rank without a result", runs)
	}
	if got := v.Check(true, 0xab, "len=3"); got != " verify=ok" {
		t.Errorf("same result: %q", got)
	}
	if err := v.Err(); err != nil {
		t.Errorf("after a matching result: %v", err)
	}
	want := " verify=FAIL(sequential checksum=00000000000000ab len=3)"
	if got := v.Check(true, 0xab, "len=4"); got != want {
		t.Errorf("other detail: %q, want %q", got, want)
	}
	if runs != 1 {
		t.Errorf("sequential ran %d times, want once", runs)
	}
	if err := v.Err(); err == nil || err.Error() != "verify: the parallel result differs from the sequential one" {
		t.Errorf("after a differing result: %v", err)
	}
	if got := NewVerifier(false, nil).Check(true, 1, ""); got != "" {
		t.Errorf("without -verify: %q", got)
	}
}

func TestLine(t *testing.T) {
	if got, want := Line("asp mode=seq", true, 0x1f, "len=3", 1500*time.Microsecond), "asp mode=seq checksum=000000000000001f len=3 solve_us=1500"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := Line("asp mode=sim", false, 0x1f, "len=3", time.Millisecond), "asp mode=sim solve_us=1000"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestParse(t *testing.T) {
	var out strings.Builder
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&out)
	if run, err := Parse(fs, "x", []string{"-h"}, "\nEnvironment:\n  X=1\n"); run || err != nil {
		t.Errorf("-h: run %v, %v; want no run, no error", run, err)
	}
	if !strings.HasPrefix(out.String(), "Usage of x:\n") || !strings.HasSuffix(out.String(), "\nEnvironment:\n  X=1\n") {
		t.Errorf("-h printed %q", out.String())
	}
	out.Reset()
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&out)
	if run, err := Parse(fs, "x", []string{"stray"}, ""); run || err != ErrUsage {
		t.Errorf("stray argument: run %v, %v", run, err)
	}
	if want := "x: unexpected argument \"stray\" (see -h)\n"; out.String() != want {
		t.Errorf("stray argument printed %q, want %q", out.String(), want)
	}
	ok, output, err := Verified(func(args []string, stdout io.Writer) error {
		_, err := io.WriteString(stdout, "a verify=ok\nb verify=ok\nc verify=FAIL(x)\n")
		return err
	}, nil)
	if ok != 2 || err != nil || !strings.HasPrefix(output, "a verify=ok") {
		t.Errorf("Verified: %d, %q, %v", ok, output, err)
	}
}

func TestEnvBool(t *testing.T) {
	t.Setenv("RB_EXHARNESS_TEST", "maybe")
	_, err := EnvBool("RB_EXHARNESS_TEST", "to do it")
	if want := `RB_EXHARNESS_TEST="maybe": want 1 or true to do it, 0 or false not to`; err == nil || err.Error() != want {
		t.Errorf("%v, want %s", err, want)
	}
	t.Setenv("RB_EXHARNESS_TEST", "")
	if on, err := EnvBool("RB_EXHARNESS_TEST", "to do it"); on || err != nil {
		t.Errorf("empty: %v, %v", on, err)
	}
	if RxSpin(0) != -1 || RxSpin(time.Millisecond) != time.Millisecond {
		t.Errorf("RxSpin: 0 gives %v, 1ms gives %v", RxSpin(0), RxSpin(time.Millisecond))
	}
}
