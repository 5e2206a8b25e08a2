package netns_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

func scriptPath(t *testing.T, name string) string {
	t.Helper()
	dir, err := netns.ScriptsDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

func TestScriptsHelp(t *testing.T) {
	for _, name := range []string{"up", "down", "loss"} {
		out, err := exec.Command(scriptPath(t, name), "-h").CombinedOutput()
		if err != nil {
			t.Errorf("%s -h: %v: %s", name, err, out)
			continue
		}
		if !strings.HasPrefix(string(out), "usage: "+name+" ") {
			t.Errorf("%s -h printed %q, want a usage line", name, firstLine(out))
		}
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// TestScriptsRejectBadArguments needs no root: arguments are checked first.
func TestScriptsRejectBadArguments(t *testing.T) {
	for _, tc := range []struct {
		script string
		args   []string
		want   string
	}{
		{"up", []string{"-n", "0"}, "bad host count -n '0'"},
		{"up", []string{"-n", "x"}, "bad host count -n 'x'"},
		{"up", []string{"-m", "70000"}, "bad MTU -m '70000'"},
		{"up", []string{"-p", "xx"}, "bad prefix -p 'xx'"},
		{"up", []string{"-p", "rbABC"}, "bad prefix -p 'rbABC'"},
		{"up", []string{"-p", "rbtoolongname"}, "bad prefix -p 'rbtoolongname'"},
		{"up", []string{"-n", "251"}, "bad host count -n '251'"},
		{"up", []string{"-z"}, "unknown option -z"},
		{"up", []string{"-n"}, "option -n needs a value"},
		{"up", []string{"extra"}, "unexpected argument 'extra'"},
		{"up", []string{"-r", "pimd"}, "bad multicast routing -r 'pimd'"},
		{"up", []string{"-s", "1"}, "-s '1' needs -r"},
		{"up", []string{"-r", "none", "-n", "1"}, "for -r: want at least 2"},
		{"up", []string{"-r", "none", "-n", "3", "-s", "3"}, "bad split -s '3'"},
		{"down", []string{"-p", "notrb"}, "bad prefix -p 'notrb'"},
		{"down", []string{"junk"}, "unexpected argument 'junk'"},
		{"loss", []string{"0", "in"}, "missing arguments"},
		{"loss", []string{"0", "sideways", "none"}, "bad direction 'sideways'"},
		{"loss", []string{"0", "in", "sometimes"}, "bad loss spec 'sometimes'"},
		{"loss", []string{"0", "in", "random"}, "random wants one argument"},
		{"loss", []string{"0", "in", "random", "abc"}, "bad loss percentage 'abc'"},
		{"loss", []string{"0", "in", "random", "101"}, "bad loss percentage '101'"},
		{"loss", []string{"0", "in", "burst", "10"}, "burst wants two arguments"},
		{"loss", []string{"0", "in", "burst", "10", "0"}, "bad burst length '0'"},
		{"loss", []string{"0", "in", "burst", "100", "4"}, "bad loss percentage '100'"},
		{"loss", []string{"0", "in", "burst", "60", "1"}, "at most 50% loss for that length"},
		{"loss", []string{"-t", "88b5", "0", "in", "none"}, "bad EtherType -t '88b5'"},
		{"loss", []string{"-b", "tc", "0", "in", "none"}, "bad backend -b 'tc'"},
		{"loss", []string{"-u", "-e", "0", "in", "none"}, "-u (UDP only) and -e/-t (one EtherType) exclude each other"},
		{"loss", []string{"-u", "-b", "netem", "0", "in", "none"}, "-u (UDP only) needs the nft backend"},
		{"loss", []string{"router", "in", "none"}, "bad direction 'in' for the router"},
		{"loss", []string{"-p", "rbnnothere", "router", "both", "none"}, "no router: namespace rbnnotherert does not exist"},
		{"loss", []string{"-p", "rbnnothere", "x1", "in", "none"}, "bad host 'x1'"},
		{"loss", []string{"-p", "rbnnothere", "3", "in", "none"}, "namespace rbnnothereh3 does not exist"},
		{"loss", []string{"-p", "rbnnothere", "all", "in", "none"}, "no host namespaces for prefix 'rbnnothere'"},
	} {
		cmd := exec.Command(scriptPath(t, tc.script), tc.args...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s %v succeeded, want failure naming %q", tc.script, tc.args, tc.want)
			continue
		}
		if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), tc.want) || !strings.HasPrefix(string(out), tc.script+": ") {
			t.Errorf("%s %v: exit %d, %q; want non-zero exit and %q", tc.script, tc.args, cmd.ProcessState.ExitCode(), out, tc.script+": ..."+tc.want)
		}
	}
}

func TestDownWhenNothingExists(t *testing.T) {
	netnstest.RequireRoot(t)
	out, err := exec.Command(scriptPath(t, "down"), "-p", "rbnnothing").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("down with nothing to remove: %v, %q; want exit 0 and no output", err, out)
	}
}

func TestUpFailingMidwayLeavesNothing(t *testing.T) {
	netnstest.RequireRoot(t)
	const prefix = "rbnmid"
	t.Setenv("RBCAST_NETNS_UP_FAIL_AT", "1")
	_, err := netns.New(netns.Options{Hosts: 3, Prefix: prefix})
	if err == nil || !strings.Contains(err.Error(), "failing after host 1") {
		t.Fatalf("New with up failing after host 1: %v", err)
	}
	assertGone(t, prefix)
}

// TestFailingTestLeavesNothing runs a test that builds a topology and then
// fails, in a child process, and checks the topology is gone afterwards.
func TestFailingTestLeavesNothing(t *testing.T) {
	netnstest.RequireRoot(t)
	if os.Getenv("RBCAST_NETNS_CHILD") == "1" {
		t.Skip("child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFailsMidway$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RBCAST_NETNS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "deliberate failure with rbnhelperh1 up") {
		t.Fatalf("child test: %v, want it to fail deliberately; output:\n%s", err, out)
	}
	assertGone(t, "rbnhelper")
}

func TestHelperFailsMidway(t *testing.T) {
	if os.Getenv("RBCAST_NETNS_CHILD") != "1" {
		t.Skip("run by TestFailingTestLeavesNothing")
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbnhelper"})
	t.Fatalf("deliberate failure with %s up", topo.Hosts[1].Namespace)
}
