// Package clitest runs a command's main in a child process against odd
// command lines and checks that each ends cleanly: a non-zero exit and a
// message naming what was wrong, never a panic, a runtime crash or a hang.
// The child is the package's own test binary, which TestMain turns into
// the command when Env is set, so no separate build is needed.
package clitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Env, set to 1, makes Main run the command instead of the tests.
const Env = "RBCAST_CLITEST_MAIN"

// Main is a TestMain: with Env set to 1 the test binary is the command
// (main reads os.Args as the command would), else it runs the tests.
func Main(m *testing.M, main func()) {
	if os.Getenv(Env) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Case is one command line.
type Case struct {
	Args []string
	// Code is the exit status wanted; 0 accepts any failure. With OK the
	// command must succeed (-h) and Code is ignored.
	Code int
	OK   bool
	// Want is in the command's stderr (with OK: in stdout or stderr).
	// Every case names it: without it any failure, or any output of a
	// broken -h, would pass.
	Want string
	// NoStdout: the command prints nothing on stdout (a refused command
	// line says so before it starts any output).
	NoStdout bool
}

// Runner runs Cases as child processes.
type Runner struct {
	Env     string        // the variable that makes the test binary the command (default Env)
	Dir     string        // the children's working directory (default the test's)
	Timeout time.Duration // a child running longer hung (default 10s)
}

// crashMarks are what the Go runtime prints when a program dies of a
// panic or a fatal error (out of memory, a concurrent map write).
var crashMarks = []string{"panic: ", "fatal error: ", "goroutine ", "[signal "}

// Run runs every case and reports each that panics, crashes, hangs,
// exits with another status or does not say Want.
func (r Runner) Run(t *testing.T, cases []Case) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := r.Env
	if env == "" {
		env = Env
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	for _, c := range cases {
		if c.Want == "" {
			t.Errorf("%q: the case has no Want, what the command must say", c.Args)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, exe, c.Args...)
		cmd.Env = append(os.Environ(), env+"=1")
		// A child killed at the timeout whose own children hold its
		// output open would otherwise keep Run waiting for them.
		cmd.WaitDelay = time.Second
		cmd.Dir = r.Dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		hung := ctx.Err() != nil
		cancel()
		code := 0
		var exit *exec.ExitError
		switch {
		case hung:
			t.Errorf("%q: still running after %v", c.Args, timeout)
			continue
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Errorf("%q: %v", c.Args, err)
			continue
		}
		msg := stderr.String()
		if crashed(msg) {
			t.Errorf("%q: crashed (exit %d):\n%s", c.Args, code, firstLines(msg, 8))
			continue
		}
		if c.OK {
			if code != 0 || !strings.Contains(stdout.String()+msg, c.Want) {
				t.Errorf("%q: exit %d, want 0 and %q in the output:\n%s%s", c.Args, code, c.Want, firstLines(stdout.String(), 4), firstLines(msg, 4))
			}
			continue
		}
		switch {
		case code == 0:
			t.Errorf("%q: exit 0, want a failure; stderr %q", c.Args, firstLines(msg, 4))
		case c.Code != 0 && code != c.Code:
			t.Errorf("%q: exit %d, want %d; stderr %q", c.Args, code, c.Code, firstLines(msg, 4))
		case !strings.Contains(msg, c.Want):
			t.Errorf("%q: stderr %q does not say %q", c.Args, firstLines(msg, 4), c.Want)
		case c.NoStdout && stdout.Len() > 0:
			t.Errorf("%q: printed on stdout before it refused:\n%s", c.Args, firstLines(stdout.String(), 4))
		}
	}
}

func crashed(msg string) bool {
	for _, l := range strings.Split(msg, "\n") {
		for _, m := range crashMarks {
			if strings.HasPrefix(l, m) {
				return true
			}
		}
	}
	return false
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

// ExampleCases are the odd command lines that every dsm and orca example
// (dsm/examples, orca/examples: their harnesses share these flags)
// refuses alike: an unknown flag, an argument, -procs 0, a loss that is
// no probability, an -iface rank past -procs; -h succeeds.
func ExampleCases(name string) []Case {
	return []Case{
		{Args: []string{"-h"}, OK: true, Want: "Usage of " + name + ":"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"extra"}, Code: 2, Want: name + `: unexpected argument "extra"`},
		{Args: []string{"-procs", "0"}, Code: 1, Want: "-procs is 0, want at least 1"},
		{Args: []string{"-sim", "-procs", "2", "-loss", "2"}, Code: 1, Want: "-loss is 2, want a probability in [0, 1)"},
		{Args: []string{"-iface", "rbuxnosuch0", "-procs", "2", "-rank", "5"}, Code: 1, Want: "-iface needs -rank in 0..1 (-procs 2); it is 5"},
	}
}

// Bounded are the cases of an example's size flag -name that its harness
// bounds to lo..hi (Options.Bound): lo-1, -1 and a value far past hi,
// each refused naming the flag and the range.
func Bounded(name string, lo, hi int) []Case {
	vals := []int{lo - 1}
	if lo-1 != -1 {
		vals = append(vals, -1)
	}
	vals = append(vals, max(99999999, hi*10-1))
	var cs []Case
	for _, v := range vals {
		s := strconv.Itoa(v)
		cs = append(cs, Case{Args: []string{"-" + name, s}, Code: 1, Want: fmt.Sprintf("-%s is %s, want %d..%d", name, s, lo, hi)})
	}
	return cs
}
