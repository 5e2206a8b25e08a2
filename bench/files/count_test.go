package files_test

import (
	"os/exec"
	"strings"
	"testing"
)

// count refuses bad arguments with exit 2 and says which, before it
// needs root or builds anything; -h prints its usage.
func TestCountArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "usage: count"},
		{[]string{"-n", "0"}, 2, "bad -n '0'"},
		{[]string{"-m", "100"}, 2, "bad -m '100'"},
		{[]string{"-s", "x"}, 2, "bad -s 'x'"},
		{[]string{"-r", "0"}, 2, "bad -r '0'"},
		{[]string{"-l", "100"}, 2, "bad -l '100'"},
		{[]string{"-l", "five"}, 2, "bad -l 'five'"},
		{[]string{"-t", "tcp"}, 2, "bad tool 'tcp'"},
		{[]string{"-b", "/nonexistent/rbcastd"}, 2, "not an executable"},
		{[]string{"-p", "xyz"}, 2, "bad -p 'xyz'"},
		{[]string{"extra"}, 2, "unexpected argument 'extra'"},
	} {
		out, err := exec.Command("./count", c.args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("count %v: %v", c.args, err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("count %v: exit %d, %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}
