package cliflag

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestHelpAsked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-h"}, true},
		{[]string{"-x", "1", "-help"}, true},
		{[]string{"--help"}, true},
		{[]string{"--", "-h"}, false},
		{[]string{"-hosts", "2"}, false},
	} {
		if got := HelpAsked(c.args); got != c.want {
			t.Errorf("HelpAsked(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestBounds(t *testing.T) {
	n, m := 5, -1
	var b Bounds
	b.Add("n", &n, 1, 10, "rows")
	b.Add("m", &m, 0, 3, "columns")
	if err := b.Check(); err == nil || err.Error() != "-m is -1, want 0..3 (columns)" {
		t.Fatalf("Check() = %v, want -m's range", err)
	}
	m = 3
	if err := b.Check(); err != nil {
		t.Fatalf("Check() = %v with both in range", err)
	}
	n = 11
	if err := b.Check(); err == nil || err.Error() != "-n is 11, want 1..10 (rows)" {
		t.Fatalf("Check() = %v, want -n's range", err)
	}
}

// Parse: the usage on stdout when asked for (exit 0), a bad flag's error
// and the usage on the flag set's output (exit 2), and a good command line
// parsed.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args             []string
		code             int
		ok               bool
		stdout, flagsOut string
	}{
		{[]string{"-n", "3"}, 0, true, "", ""},
		{[]string{"-h"}, 0, false, "usage of x", ""},
		{[]string{"-n", "1", "--help"}, 0, false, "usage of x", ""},
		{[]string{"-m"}, 2, false, "", "flag provided but not defined: -m\nusage of x"},
		{[]string{"-n", "z"}, 2, false, "", `invalid value "z" for flag -n`},
	} {
		var stdout, flagsOut bytes.Buffer
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(&flagsOut)
		fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage of x") }
		n := fs.Int("n", 0, "a number")
		code, ok := Parse(fs, c.args, &stdout)
		if code != c.code || ok != c.ok || !strings.HasPrefix(stdout.String(), c.stdout) || c.stdout == "" && stdout.Len() != 0 ||
			!strings.HasPrefix(flagsOut.String(), c.flagsOut) || c.flagsOut == "" && flagsOut.Len() != 0 {
			t.Errorf("Parse(%q) = %d, %v, stdout %q, flag output %q; want %d, %v, %q, %q", c.args, code, ok, stdout.String(), flagsOut.String(), c.code, c.ok, c.stdout, c.flagsOut)
		}
		if c.ok && *n != 3 {
			t.Errorf("Parse(%q): -n %d, want 3", c.args, *n)
		}
	}
}
