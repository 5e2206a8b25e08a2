package main

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
)

// TestMain lets tests re-run this binary as rbcastd itself
// (RBCASTD_TEST_MAIN=1), e.g. under setpriv as an unprivileged user;
// with RBCASTD_TEST_OLD_RECEIVER=1 too, that rbcastd receives files as
// one from before offers without a hash did, and with =2 as one from
// before the offer's hash algorithm byte (oldReceiverLink, oldHashAlgLink).
func TestMain(m *testing.M) {
	mainAt = time.Now()
	if childMain != nil {
		if code, ok := childMain(); ok {
			os.Exit(code)
		}
	}
	switch {
	case os.Getenv("RBCASTD_TEST_MAIN") == "1":
		// A daemon or client the test started ends with the test
		// process, also when -timeout ends that without cleanups.
		lifeline.Tie()
		// The profiles main writes (RBCASTD_CPUPROFILE, RBCASTD_TRACE),
		// so that BenchmarkReport's daemons and clients can be profiled.
		clientProcs(os.Args[1:], os.Getenv("GOMAXPROCS"))
		switch os.Getenv("RBCASTD_TEST_OLD_RECEIVER") {
		case "1":
			filesLinkHook = oldReceiverHook
		case "2":
			filesLinkHook = oldHashAlgHook
		}
		stop := profile(os.Getenv("RBCASTD_CPUPROFILE"), os.Getenv("RBCASTD_TRACE"), os.Stderr)
		code := rbcastd(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		hops.Dump() // RBCAST_STAMPS, as main does
		os.Exit(code)
	case os.Getenv("RBCASTD_TEST_FIRSTGC") != "":
		// TestFirstGCFaults: the page faults of a collection, after run's
		// firstGC or without it (the process's first).
		if os.Getenv("RBCASTD_TEST_FIRSTGC") == "run" {
			firstGC()
		}
		os.Stdout.WriteString(strconv.FormatInt(gcFaults(), 10) + "\n")
		os.Exit(0)
	case os.Getenv("RBCASTD_TEST_GET") != "":
		// Fetch a URL (run inside a namespace, for -metrics).
		resp, err := http.Get(os.Getenv("RBCASTD_TEST_GET"))
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		io.Copy(os.Stdout, resp.Body)
		os.Exit(0)
	case os.Getenv("RBCASTD_TEST_LISTEN") != "":
		if _, err := daemon.Listen(os.Getenv("RBCASTD_TEST_LISTEN"), 0o600); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gcFaults is the minor page faults of one garbage collection.
func gcFaults() int64 {
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	runtime.GC()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	return after.Minflt - before.Minflt
}

// TestFirstGCFaults: why rbcastd run collects once right after it joins
// (firstGC; afterJoin's test says when): a process's first collection
// faults in the pointer tables rbcastd links (gopacket/layers: 5 MB),
// about 1300 pages, and one after firstGC a few. It checks that the
// binary's first collection takes those faults, so that firstGC moves
// them out of the first file; it does not check where run calls it.
func TestFirstGCFaults(t *testing.T) {
	faults := func(mode string) int64 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RBCASTD_TEST_FIRSTGC="+mode)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child (%s): %v", mode, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatalf("child (%s) printed %q", mode, out)
		}
		return n
	}
	first, after := faults("first"), faults("run")
	t.Logf("page faults of a collection: the process's first %d, one after firstGC %d", first, after)
	if after > 300 {
		t.Errorf("a collection after firstGC faulted in %d pages, want at most 300 (the process's first: %d)", after, first)
	}
}

// childMain, when set (by a test file of this platform), runs this
// binary as a helper process of a test when its environment says so.
var childMain func() (code int, ok bool)

func runMain(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = rbcastd(args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"usage: rbcastd <command>", "run", "send", "recv", "status", "bench"}},
		{[]string{"run", "-h"}, []string{"usage: rbcastd run -i IFACE -group G [-members N] [-node ID] [-order fifo|total]", "-capture", "-membership", "-max-members", "rejoins", "-metrics", "-config", "CAP_NET_RAW", "SIGTERM", "-node 0", "-resilience", "-level", "while a plain socket carries the join"}},
		{[]string{"send", "--help"}, []string{"usage: rbcastd send [-socket PATH] [-lines] [-level reliable|unreliable|fifo|agreed|safe] [FILE|-]", "-level names the delivery level", "acknowledged by every live", "-order total", "holds it", "removed", "-lines", "-level unreliable", "at most once", "one Go P"}},
		{[]string{"recv", "-h"}, []string{"usage: rbcastd recv [-socket PATH] (-from ID | -all) [-bytes N | -count N] [-format raw|lines] [-o FILE]", "<sender-id><TAB><payload>", "-bytes", "-count", "-o", "one Go P"}},
		{[]string{"status", "-h"}, []string{"usage: rbcastd status [-socket PATH] [-json] [-wait-ready DURATION]", "alive", "suspected", "dead", "-wait-ready"}},
		{[]string{"bench", "-h"}, []string{"usage: rbcastd bench", "-size", "-duration", "one Go P"}},
		// help COMMAND is COMMAND's own help.
		{[]string{"help", "sendfile"}, []string{"usage: rbcastd sendfile", "-hash algorithm"}},
		{[]string{"help", "run"}, []string{"usage: rbcastd run", "-files-ring-mb MiB"}},
		{[]string{"help"}, []string{"usage: rbcastd <command>", "rbcastd help <command>"}},
	} {
		code, out, errOut := runMain(c.args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: help lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	// Every case names an interface that does not exist: a case that
	// turned valid fails at once instead of serving on a real interface.
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: rbcastd <command>"},
		{[]string{"serve"}, `unknown command "serve" (commands: bench, keygen, recv, recvfile, rekey, run, send, sendfile, status)`},
		{[]string{"help", "serve"}, `unknown command "serve" (commands: bench, keygen`},
		{[]string{"run", "-group", "1", "-members", "2"}, "-i IFACE is required"},
		{[]string{"run", "-i", "rbnone0", "-members", "2"}, "-group is 0, want 1..4294967295"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-order", "causal"}, `-order is "causal", want fifo or total`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-node", "2", "-membership", "registered"}, "-node is 2, but a group of 2 members has ids 0..1"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-node", "16"}, "-node is \"16\", want a member id 0..15 (-max-members 16)"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-max-members", "61"}, "-max-members is 61, want 1..60"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "17"}, "-members is 17, want 0..16"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-membership", "views", "-order", "total", "-resilience", "sequencer"}, "-resilience sequencer applies to -membership registered"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-membership", "dynamic"}, `-membership is "dynamic", want views or registered`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-membership", "registered", "-max-members", "8"}, "-max-members applies to -membership views only"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-order", "total"}, "-members is 0, want 1..40"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-node", "x"}, `-node is "x", want a member id`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-link", "tap"}, `-link is "tap", want ring, afpacket or udp`},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp"}, "-link udp needs exactly one of -udp-group ADDR:PORT (multicast), -udp-peers"},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-group", "239.1.1.1:7000", "-udp-peers", "127.0.0.1:7000"}, "-link udp needs exactly one of"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-udp-group", "239.1.1.1:7000"}, "the -udp-* flags need -link udp"},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-group", "239.1.1.1:7000"}, "-udp-group needs -i IFACE"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-link", "udp", "-udp-group", "239.1.1.1"}, `-udp-group is "239.1.1.1": want a multicast ADDR:PORT`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-link", "udp", "-udp-group", "10.0.0.1:7000"}, "Group 10.0.0.1:7000 is not a multicast address"},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-peers", "127.0.0.1:7000,nohost:7001"}, `-udp-peers: address 2 "nohost:7001": want IP:PORT`},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-seed", "127.0.0.1:7000"}, "-udp-seed needs -udp-listen ADDR:PORT"},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-peers", "127.0.0.1:7000", "-udp-ttl", "3"}, "-udp-ttl applies to -udp-group (multicast) only"},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-peers", "127.0.0.1:7000", "-udp-mtu", "100"}, "-udp-mtu 100 is outside 618..65535"},
		{[]string{"run", "-group", "1", "-members", "2", "-link", "udp", "-udp-peers", "127.0.0.1:7000", "-udp-listen", "x"}, `-udp-listen is "x": want ADDR:PORT`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-spin", "2s"}, "-spin is 2s, want 0 (never) up to 1s"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-spin", "-1us"}, "-spin is -1µs, want 0 (never) up to 1s"},
		{[]string{"run", "-i", "rbr13none0", "-group", "1", "-members", "2", "-link", "afpacket", "-spin", "200us"}, "-spin polls the mmap ring: it needs -link ring"}, // an interface that does not exist: were -spin let through, run fails at once instead of serving on eth0 (as root)
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-procs", "-1"}, "-procs is -1, want 1..256 (0: one per CPU)"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-procs", "x"}, `invalid value "x" for flag -procs`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-log-level", "loud"}, `-log-level is "loud"`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-level", "safe"}, "-level safe applies to -order total -membership views"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-order", "total", "-membership", "views", "-level", "uniform"}, `-level is "uniform", want agreed or safe`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-order", "total", "-mode", "pbp1"}, "-mode pbp1 applies to -order fifo only"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-order", "total", "-bundle-delay", "1ms"}, "-bundle-delay applies to -order fifo only"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-order", "total", "-resilience", "all"}, `-resilience is "all", want majority or sequencer`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-members", "2", "-resilience", "sequencer"}, "-resilience sequencer applies to -order total only"},
		{[]string{"recv", "-from", "1", "-all"}, "-from and -all exclude each other"},
		{[]string{"recv"}, "say whose messages: -from ID or -all"},
		{[]string{"recv", "-all", "-format", "hex"}, `-format is "hex", want raw or lines`},
		{[]string{"recv", "-all", "-bytes", "1", "-count", "1"}, "-bytes and -count exclude each other"},
		{[]string{"recv", "-from", "65535"}, `-from is "65535", want a member id 0..65534`},
		{[]string{"send", "a", "b"}, "at most one FILE, got 2 arguments"},
		{[]string{"send", "-level", "sometimes"}, `-level is "sometimes", want reliable, unreliable, fifo, agreed or safe`},
		{[]string{"status", "-wait-ready", "-1s"}, "-wait-ready must not be negative"},
	} {
		code, _, errOut := runMain(c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// Each failure is one line naming the program and the command once
// ("rbcastd CMD: "), with the user's paths whole, however they are
// spelt: no library puts a program's name before its message, and fail
// rewrites none. The rows with a path holding ": rbcastd: ", or a file
// called rbcastd or sendfile, are the ones a text heuristic got wrong.
func TestErrorsNameProgramOnce(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("empty", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("regular.sock", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("present.txt", []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(dir, "old: rbcastd: group-1.sock")
	none := filepath.Join(dir, "none.sock")
	const hint = " (is `rbcastd run` running for this group? pick its socket with -socket)\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "-socket", none, "present.txt"}, "rbcastd send: no daemon socket at " + none + hint},
		{[]string{"status", "-socket", none}, "rbcastd status: no daemon socket at " + none + hint},
		{[]string{"recv", "-socket", none, "-all"}, "rbcastd recv: no daemon socket at " + none + hint},
		{[]string{"rekey", "-socket", none, "retire"}, "rbcastd rekey: no daemon socket at " + none + hint},
		{[]string{"send", "-socket", odd, "present.txt"}, "rbcastd send: no daemon socket at " + odd + hint},
		{[]string{"status", "-socket", "regular.sock"}, "rbcastd status: nobody listens on regular.sock (a stale socket: the daemon is not running)\n"},
		{[]string{"sendfile", "-socket", none, "rbcastd"}, "rbcastd sendfile: rbcastd: no such file or directory\n"},
		{[]string{"sendfile", "-socket", none, "sendfile"}, "rbcastd sendfile: sendfile: no such file or directory\n"},
		{[]string{"sendfile", "-socket", none, "empty"}, "rbcastd sendfile: empty: no regular files under the directory\n"},
		{[]string{"sendfile", "-socket", none, "present.txt"}, "rbcastd sendfile: no daemon socket at " + none + hint},
		{[]string{"send", "-socket", none, "rbcastd"}, "rbcastd send: open rbcastd: no such file or directory\n"},
		{[]string{"recvfile", "-socket", none, "-dir", "rbcastd"}, "rbcastd recvfile: -dir rbcastd: no such file or directory\n"},
	} {
		code, _, errOut := runMain(c.args...)
		if code != exitFail || errOut != c.want {
			t.Errorf("%v: exit %d, stderr\n%q\nwant exit 1 and\n%q", c.args, code, errOut, c.want)
		}
	}
}

func TestClientNoDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"send", "-socket", sock},
		{"recv", "-socket", sock, "-all"},
		{"status", "-socket", sock},
	} {
		code, _, errOut := runMain(args...)
		if want := "rbcastd " + args[0] + ": no daemon socket at " + sock; code != exitFail || !strings.HasPrefix(errOut, want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", args, code, errOut, want)
		}
	}
	start := time.Now()
	code, _, errOut := runMain("status", "-socket", sock, "-wait-ready", "200ms")
	if code != exitFail || !strings.Contains(errOut, "not ready after 200ms") || time.Since(start) < 200*time.Millisecond {
		t.Errorf("status -wait-ready: exit %d, stderr %q", code, errOut)
	}
}

func TestConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rbcastd.conf")
	os.WriteFile(path, []byte("# sample\ni eth9\ngroup = 5\nmembers 3 # three hosts\norder total\n-failure-timeout 1s\n"), 0o600)
	var f runFlags
	fs := runFlagSet(&f, io.Discard)
	if err := fs.Parse([]string{"-members", "4", "-config", path}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, path); err != nil {
		t.Fatal(err)
	}
	dc, socket, err := f.groupConfig()
	if err != nil {
		t.Fatal(err)
	}
	if f.iface != "eth9" || dc.Group.Group != 5 || dc.Group.Size != 4 || dc.Group.Order != reliable.Total || dc.Group.FailureTimeout != time.Second {
		t.Fatalf("config gave iface %q group %d size %d (command line: 4) order %v failure %v", f.iface, dc.Group.Group, dc.Group.Size, dc.Group.Order, dc.Group.FailureTimeout)
	}
	if socket != "/run/rbcastd/group-5.sock" {
		t.Fatalf("default socket %q", socket)
	}

	os.WriteFile(path, []byte("i eth0\ncolour blue\n"), 0o600)
	fs = runFlagSet(&f, io.Discard)
	if err := applyConfig(fs, path); err == nil || !strings.Contains(err.Error(), path+`:2: unknown setting "colour"`) {
		t.Fatalf("unknown setting: %v", err)
	}
	os.WriteFile(path, []byte("members many\n"), 0o600)
	fs = runFlagSet(&f, io.Discard)
	if err := applyConfig(fs, path); err == nil || !strings.Contains(err.Error(), path+":1: members:") {
		t.Fatalf("bad value: %v", err)
	}
}

// -spin defaults to the ring's default and maps 0 to never; -link
// afpacket without -spin is no error (only a -spin given is).
func TestSpinFlag(t *testing.T) {
	var f runFlags
	fs := runFlagSet(&f, io.Discard)
	if err := fs.Parse([]string{"-i", "eth0", "-group", "1", "-members", "2", "-link", "afpacket"}); err != nil {
		t.Fatal(err)
	}
	if f.spin != ring.DefaultRxSpin {
		t.Errorf("-spin defaults to %v, want ring.DefaultRxSpin (%v)", f.spin, ring.DefaultRxSpin)
	}
	if _, _, err := f.groupConfig(); err != nil {
		t.Errorf("-link afpacket with the default -spin: %v", err)
	}
	for _, c := range []struct{ flag, ring time.Duration }{{0, -1}, {time.Microsecond, time.Microsecond}, {ring.DefaultRxSpin, ring.DefaultRxSpin}} {
		if got := ringSpin(c.flag, true); got != c.ring {
			t.Errorf("-spin %v gave ring.Config.RxSpin %v, want %v", c.flag, got, c.ring)
		}
	}
	if got := ringSpin(f.spin, f.spinSet); got != 0 {
		t.Errorf("no -spin gave ring.Config.RxSpin %v, want 0 (the ring's default)", got)
	}
	if f.spinAdapt {
		t.Errorf("-spin-adapt is on by default")
	}
	var g runFlags
	if err := runFlagSet(&g, io.Discard).Parse([]string{"-i", "eth0", "-group", "1", "-members", "2", "-link", "afpacket", "-spin-adapt"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.groupConfig(); err == nil || err.Error() != "-spin-adapt adapts the mmap ring's spin: it needs -link ring" {
		t.Errorf("-spin-adapt with -link afpacket: %v", err)
	}
}

// Through run itself: -spin from a -config file counts as given (refused
// with -link afpacket), and -link afpacket without -spin gets past the
// checks to opening the link (on an interface that does not exist).
func TestSpinFlagRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rbcastd.conf")
	if err := os.WriteFile(path, []byte("link afpacket\nspin 1ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "-i", "rbr13none0", "-group", "1", "-members", "2"}
	code, _, errOut := runMain(append(base, "-config", path)...)
	if want := "-spin polls the mmap ring: it needs -link ring"; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("-spin in -config with -link afpacket: exit %d, stderr %q; want exit 2 and %q", code, errOut, want)
	}
	code, _, errOut = runMain(append(base, "-link", "afpacket")...)
	if code != exitFail || strings.Contains(errOut, "spin") || !strings.Contains(errOut, "rbr13none0") {
		t.Errorf("-link afpacket without -spin: exit %d, stderr %q; want exit 1 and an error opening rbr13none0", code, errOut)
	}
}

// -procs defaults to one P and sets GOMAXPROCS; 0 leaves Go's default;
// GOMAXPROCS in the environment wins over it.
func TestProcsFlag(t *testing.T) {
	var f runFlags
	fs := runFlagSet(&f, io.Discard)
	if err := fs.Parse([]string{"-i", "eth0", "-group", "1"}); err != nil {
		t.Fatal(err)
	}
	if f.procs != 1 {
		t.Errorf("-procs defaults to %d, want 1", f.procs)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(2)
	if n, env := setProcs(1, ""); n != 1 || env || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("setProcs(1, \"\") = %d, %v, GOMAXPROCS %d; want 1, false, 1", n, env, runtime.GOMAXPROCS(0))
	}
	if n, env := setProcs(0, ""); n != 1 || env {
		t.Errorf("setProcs(0, \"\") = %d, %v; want the Ps as they were (1), false", n, env)
	}
	runtime.GOMAXPROCS(2)
	if n, env := setProcs(1, "2"); n != 2 || !env || runtime.GOMAXPROCS(0) != 2 {
		t.Errorf("setProcs(1, \"2\") = %d, %v, GOMAXPROCS %d; want the environment's 2 kept", n, env, runtime.GOMAXPROCS(0))
	}
}

// bench, send and recv run on one P unless GOMAXPROCS is set; the other
// commands keep Go's default (run has -procs).
func TestClientProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		args []string
		env  string
		want bool
	}{
		{[]string{"bench", "-ping", "1"}, "", true},
		{[]string{"send", "FILE"}, "", true},
		{[]string{"recv", "-all"}, "", true},
		{[]string{"recv", "-all"}, "2", false},
		{[]string{"run", "-i", "eth0"}, "", false},
		{[]string{"status"}, "", false},
		{nil, "", false},
	} {
		runtime.GOMAXPROCS(2)
		if got := clientProcs(c.args, c.env); got != c.want || (runtime.GOMAXPROCS(0) == 1) != c.want {
			t.Errorf("clientProcs(%q, GOMAXPROCS=%q) = %v, GOMAXPROCS %d; want %v", c.args, c.env, got, runtime.GOMAXPROCS(0), c.want)
		}
	}
}

// The dist/ sample config parses.
func TestDistConfig(t *testing.T) {
	var f runFlags
	fs := runFlagSet(&f, io.Discard)
	if err := applyConfig(fs, "../../dist/rbcastd.conf"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.groupConfig(); err != nil {
		t.Fatal(err)
	}
	// Its commented-out settings ("# name value  # what it does") are
	// real flags too: uncommented, they parse and check.
	b, err := os.ReadFile("../../dist/rbcastd.conf")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	commented := 0
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "# "); ok && strings.Contains(rest, " # ") {
			l = rest
			commented++
		}
		lines = append(lines, l)
	}
	if commented < 5 {
		t.Fatalf("found %d commented-out settings in dist/rbcastd.conf, want at least 5 (node, failure-timeout, metrics, capture, resilience)", commented)
	}
	path := filepath.Join(t.TempDir(), "all.conf")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600)
	f = runFlags{}
	fs = runFlagSet(&f, io.Discard)
	if err := applyConfig(fs, path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.groupConfig(); err != nil {
		t.Fatal(err)
	}
}

// copyTestBinary copies the running test binary into dir, which gets mode
// perm (its parent, t.TempDir's 0700 root, 0755), so that another user
// can run it; it returns the copy's path.
func copyTestBinary(t *testing.T, dir string, perm os.FileMode) string {
	t.Helper()
	os.Chmod(dir, perm)
	os.Chmod(filepath.Dir(dir), 0o755)
	bin := filepath.Join(dir, "rbcastd.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// unprivileged re-runs this test binary as rbcastd (or as a Listen
// helper) under setpriv: user and group nobody (65534), no
// capabilities, CAP_NET_RAW out of the bounding set. It skips unless
// root.
func unprivileged(t *testing.T, ns, env string, args ...string) (code int, out string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to re-run rbcastd as an unprivileged user (setpriv); run the tests as root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	// The test binary may sit in a directory nobody cannot enter.
	dir := t.TempDir()
	bin := copyTestBinary(t, dir, 0o755)
	argv := append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-net_raw", "--", bin}, args...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env)
	cmd.Dir = dir
	o, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(o)
	}
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, o)
	}
	return 0, string(o)
}

// A socket path the user may not create is refused with the reason.
func TestSocketNotPermitted(t *testing.T) {
	dir := t.TempDir() // root's, mode 0700
	code, out := unprivileged(t, "", "RBCASTD_TEST_LISTEN="+filepath.Join(dir, "s.sock"))
	if code != 1 || !strings.Contains(out, "permission denied: this user may not create or use it") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestMain_flagsParse(t *testing.T) {
	// Every run flag has a usage text (the --help is the documentation).
	var f runFlags
	fs := runFlagSet(&f, io.Discard)
	fs.VisitAll(func(fl *flag.Flag) {
		if fl.Usage == "" {
			t.Errorf("-%s has no usage text", fl.Name)
		}
	})
}

// TestProfilePID: a "%p" in RBCASTD_CPUPROFILE's and RBCASTD_TRACE's
// paths is the process id, so that processes started with one
// environment write profiles of their own.
func TestProfilePID(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	stop := profile(filepath.Join(dir, "cpu-%p.prof"), filepath.Join(dir, "trace-%p.out"), &stderr)
	stop()
	if stderr.Len() > 0 {
		t.Fatalf("profile wrote %q", stderr.String())
	}
	pid := strconv.Itoa(os.Getpid())
	for _, name := range []string{"cpu-" + pid + ".prof", "trace-" + pid + ".out"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 {
			t.Errorf("%s is empty", name)
		}
	}
}

// sinceStart reads how long the process had run from a time's monotonic
// reading: positive and below the test binary's whole run for mainAt,
// growing with later times, 0 for a time without a reading.
func TestSinceStart(t *testing.T) {
	at := sinceStart(mainAt)
	if at <= 0 || at > time.Hour {
		t.Fatalf("sinceStart(mainAt) = %v, want a positive duration (the process ran before main)", at)
	}
	later := time.Now()
	if d := sinceStart(later); d < at || d-at > time.Since(mainAt)+time.Millisecond {
		t.Errorf("sinceStart(now) = %v, want %v plus the %v since main", d, at, time.Since(mainAt))
	}
	if d := sinceStart(later.Round(0)); d != 0 {
		t.Errorf("sinceStart of a time without a monotonic reading = %v, want 0", d)
	}
}
