package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// oddCase is one command line that must fail with a clear error and
// never panic.
type oddCase struct {
	args []string
	code int    // exit status wanted: exitUsage or exitFail; 0: either
	want string // in stderr; "" checks only the "rbcastd CMD: " prefix
	// orWant is accepted instead of want (an error that depends on
	// whether the test runs as root, for instance).
	orWant string
}

// runOdd runs one case in this process, turning a panic into a test
// failure with its stack, and checks the exit status and the message.
func runOdd(t *testing.T, c oddCase) {
	t.Helper()
	var code int
	var out, errOut bytes.Buffer
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%q panicked: %v\n%s", c.args, p, debug.Stack())
				code = -1
			}
		}()
		code = rbcastd(c.args, strings.NewReader(""), &out, &errOut)
	}()
	if code == -1 {
		return
	}
	msg := errOut.String()
	switch {
	case code == exitOK:
		t.Errorf("%q: exit 0, want a failure; stderr %q", c.args, msg)
	case c.code != 0 && code != c.code:
		t.Errorf("%q: exit %d, want %d; stderr %q", c.args, code, c.code, msg)
	case strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine "):
		t.Errorf("%q: stderr looks like a crash: %q", c.args, msg)
	case !strings.HasPrefix(msg, "rbcastd ") && !flagError(msg):
		t.Errorf("%q: stderr %q does not start by naming the command", c.args, msg)
	case c.want != "" && !strings.Contains(msg, c.want) && (c.orWant == "" || !strings.Contains(msg, c.orWant)):
		want := fmt.Sprintf("%q", c.want)
		if c.orWant != "" {
			want += fmt.Sprintf(" or %q", c.orWant)
		}
		t.Errorf("%q: stderr %q does not say %s", c.args, msg, want)
	}
}

// flagError reports whether msg is package flag's report of a bad flag,
// which names the flag and is followed by the command's usage.
func flagError(msg string) bool {
	return (strings.HasPrefix(msg, "invalid value ") || strings.HasPrefix(msg, "flag provided but not defined: ")) &&
		strings.Contains(msg, "\nusage: rbcastd ")
}

// Every subcommand against odd flags, config files, files and sockets:
// each fails with an error that says what was wrong, and none panics.
// Interfaces (loopback, missing, down, without an Ethernet address) are
// TestOddInterfaces, which needs root.
func TestOddInputs(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := file("long.conf", "i "+strings.Repeat("x", 70000)+"\n")
	nested := file("nested.conf", "config "+long+"\n")
	binary := file("binary.conf", "\x00\x01\xff\xfe garbage\n")
	noValue := file("novalue.conf", "group\n")
	badValue := file("badvalue.conf", "i rbqnosuch0\ngroup 3\nmembers -3\n")
	empty := file("empty.conf", "")
	regular := file("regular", "not a socket")
	missing := filepath.Join(dir, "missing.sock")
	longSock := filepath.Join(dir, strings.Repeat("s", 120)+".sock")
	// An interface name that exists nowhere: run must fail opening it,
	// before it creates a socket or drops privileges.
	const nosuch = "rbqnosuch0"
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.LocalAddr().String()
	base := []string{"-group", "3", "-members", "1", "-node", "0", "-socket", filepath.Join(dir, "d.sock")}
	run := func(args ...string) []string { return append([]string{"run"}, args...) }

	for _, c := range []oddCase{
		// run: flags.
		{run(), exitUsage, "-i IFACE is required", ""},
		{run("-i", ""), exitUsage, "-i IFACE is required", ""},
		{run("-i", nosuch, "-group", "-1", "-members", "1"), exitUsage, `invalid value "-1" for flag -group`, ""},
		{run("-i", nosuch, "-group", "99999999999", "-members", "1"), exitUsage, "-group is 99999999999, want 1..4294967295", ""},
		{run("-i", nosuch, "-group", "3", "-members", "41"), exitUsage, "-members is 41, want 0..16 (-max-members)", ""},
		{run("-i", nosuch, "-group", "3", "-members", "41", "-membership", "registered"), exitUsage, "-members is 41, want 1..40", ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-node", "65535"), exitUsage, `-node is "65535"`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-node", "-1"), exitUsage, `-node is "-1"`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-ethertype", "zz"), exitUsage, `-ethertype is "zz"`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-ethertype", "0x10000"), exitUsage, `-ethertype is "0x10000"`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-socket-mode", "rw"), exitUsage, `-socket-mode is "rw"`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-log-format", "xml"), exitUsage, `-log-format is "xml"`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-heartbeat", "-1s"), exitUsage, "-heartbeat is -1s: durations must not be negative", ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-leave-timeout", "-2s"), exitUsage, "-leave-timeout is -2s: durations must not be negative", ""},
		// What the protocol would refuse at the join is refused before
		// the interface is opened, named by the flags (it was exit 1,
		// naming reliable.Config's fields, after the link opened).
		{run("-i", nosuch, "-group", "3", "-window", "100000"), exitUsage, "-window is 100000, want 1..32768", ""},
		{run("-i", nosuch, "-group", "3", "-order", "total", "-membership", "views", "-window", "5000"), exitUsage, "-window is 5000, want 0..4096", ""},
		{run("-i", nosuch, "-group", "3", "-heartbeat", "3s"), exitUsage, "-failure-timeout (2s) must exceed -heartbeat (3s)", ""},
		{run("-i", nosuch, "-group", "3", "-order", "total", "-members", "3", "-failure-timeout", "150ms"), exitUsage, "-failure-timeout (150ms) must exceed twice -heartbeat (100ms)", ""},
		{run("-i", nosuch, "-group", "3", "-procs", "100000"), exitUsage, "-procs is 100000, want 1..256", ""},
		{run("-i", nosuch, "-group", "3", "-order", "total", "-membership", "views", "-mode", "pbp1"), exitUsage, "-mode is PBP1, but Order Total with Views (Agreed, Safe) runs over PBP2 only", ""},
		{run("-i", nosuch, "-group", "3", "-flight-recorder", "-1"), exitUsage, "-flight-recorder is -1 MiB, want 0 (off) or 1..16384", ""},
		{run("-i", nosuch, "-group", "3", "-flight-recorder", "100000000"), exitUsage, "-flight-recorder is 100000000 MiB", ""},
		{run("-i", nosuch, "-group", "3", "-socket-mode", "04777"), exitUsage, `-socket-mode is "04777"`, ""},
		{run("-i", nosuch, "-group", "3", "-link", "udp", "-udp-group", "239.1.1.1:7000", "-udp-ttl", "300"), exitUsage, "-udp-ttl is 300, want 1..255", ""},
		{run("-i", nosuch, "-group", "3", "-link", "udp", "-udp-group", "239.1.1.1:7000", "-udp-ttl", "-1"), exitUsage, "-udp-ttl is -1, want 1..255", ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-join-timeout", "soon"), exitUsage, `invalid value "soon" for flag -join-timeout`, ""},
		{run("-i", nosuch, "-group", "3", "-members", "1", "-mode", "pbp3"), exitUsage, `-mode is "pbp3"`, ""},
		// run: config files.
		{run("-config", filepath.Join(dir, "none.conf")), exitUsage, "config: open " + filepath.Join(dir, "none.conf"), ""},
		{run("-config", dir), exitUsage, "config " + dir + ": read " + dir + ": is a directory", ""},
		{run("-config", long), exitUsage, "config " + long + ":1: line longer than 65536 bytes", ""},
		{run("-config", nested), exitUsage, "config " + nested + ":1: config files do not nest", ""},
		{run("-config", binary), exitUsage, "config " + binary + ":1: unknown setting", ""},
		{run("-config", noValue), exitUsage, "config " + noValue + ":1: group:", ""},
		{run("-config", badValue), exitUsage, "-members is -3", ""},
		{run("-config", empty), exitUsage, "-i IFACE is required", ""},
		{run("-config", regular), exitUsage, "config " + regular + ":1: unknown setting \"not\"", ""},
		// run: interfaces that need no privilege to be refused.
		{run(append([]string{"-i", nosuch}, base...)...), exitFail, `interface "` + nosuch + `": no such network interface`, ""},
		{run(append([]string{"-i", strings.Repeat("i", 300)}, base...)...), exitFail, "no such network interface", ""},
		{run(append([]string{"-i", "eth0/../lo"}, base...)...), exitFail, "no such network interface", ""},
		{run(append([]string{"-i", nosuch, "-link", "afpacket"}, base...)...), exitFail, `interface "` + nosuch + `": no such network interface`, ""},

		// -link udp: no -udp-peers address is this host's, or each is
		// taken (-udp-seed's port + 1 below is the files' link).
		{run("-link", "udp", "-group", "3", "-udp-peers", "192.0.2.1:7000", "-socket", filepath.Join(dir, "u.sock")), exitFail, "no address of -udp-peers is one of this host's: give this member's address with -udp-listen ADDR:PORT", ""},
		{run("-link", "udp", "-group", "3", "-udp-peers", taken, "-socket", filepath.Join(dir, "u.sock")), exitFail, "every address of -udp-peers on this host is in use ([" + taken + "]): is the group already running here? Give this member's address with -udp-listen ADDR:PORT", ""},

		// The clients: no daemon, or a path that is no daemon's socket.
		{[]string{"send", "-socket", missing}, exitFail, "no daemon socket at " + missing, ""},
		{[]string{"send", "-socket", regular}, exitFail, regular, ""},
		{[]string{"send", "-socket", dir}, exitFail, dir, ""},
		{[]string{"send", "-socket", longSock}, exitFail, longSock, ""},
		{[]string{"send", "-socket", missing, filepath.Join(dir, "no-such-file")}, exitFail, "no such file or directory", ""},
		{[]string{"send", "-socket", missing, "-lines", "x", "y"}, exitUsage, "at most one FILE", ""},
		{[]string{"send", "-bogus"}, exitUsage, "flag provided but not defined: -bogus", ""},
		{[]string{"recv", "-socket", missing, "-all"}, exitFail, "no daemon socket at " + missing, ""},
		{[]string{"recv", "-socket", regular, "-from", "1"}, exitFail, regular, ""},
		{[]string{"recv", "-socket", missing, "-all", "-count", "-1"}, exitUsage, "must not be negative", ""},
		{[]string{"recv", "-socket", missing, "-from", "x"}, exitUsage, `-from is "x"`, ""},
		{[]string{"recv", "-socket", missing, "-all", "-o", filepath.Join(dir, "nodir", "out")}, exitFail, "", ""},
		{[]string{"recv", "-socket", missing, "-all", "extra"}, exitUsage, "", ""},
		{[]string{"recv", "-socket", missing, "-all", "-nap", "-1ms"}, exitUsage, "-nap is -1ms, want 0 to 10ms", ""},
		{[]string{"recv", "-socket", missing, "-all", "-nap", "1s"}, exitUsage, "-nap is 1s, want 0 to 10ms", ""},
		{[]string{"status", "-socket", missing}, exitFail, "no daemon socket at " + missing, ""},
		{[]string{"status", "-socket", dir}, exitFail, dir, ""},
		{[]string{"status", "-socket", longSock}, exitFail, longSock, ""},
		{[]string{"status", "-socket", missing, "-wait-ready", "later"}, exitUsage, `invalid value "later" for flag -wait-ready`, ""},
		{[]string{"status", "-socket", missing, "extra"}, exitUsage, `unexpected argument "extra"`, ""},
		{[]string{"bench", "-socket", missing}, exitFail, "no daemon socket at " + missing, ""},
		{[]string{"bench", "-socket", missing, "-size", "-1"}, exitUsage, "-size is -1, want 0 (the largest) or more", ""},
		{[]string{"bench", "-socket", missing, "-duration", "0s"}, exitUsage, "-duration is 0s, want more than 0", ""},
		{[]string{"bench", "-socket", missing, "-ping", "70000"}, exitUsage, `-ping is "70000", want a member id 0..65534`, ""},
		{[]string{"bench", "-socket", missing, "-ping", "-5"}, exitUsage, `-ping is "-5", want a member id 0..65534`, ""},
		{[]string{"bench", "-socket", missing, "-ping", "one"}, exitUsage, `-ping is "one", want a member id`, ""},
		{[]string{"bench", "-socket", missing, "-ping", "1", "-count", "0"}, exitUsage, "-count is 0, want 1 or more", ""},
		// Flags of one mode given to another: refused, not ignored.
		{[]string{"bench", "-socket", missing, "-count", "5"}, exitUsage, "-count and -ping-timeout apply to -ping only", ""},
		{[]string{"bench", "-socket", missing, "-echo", "-ping-timeout", "1s"}, exitUsage, "-count and -ping-timeout apply to -ping only", ""},
		{[]string{"bench", "-socket", missing, "-rings=false"}, exitUsage, "-spin and -rings apply to -ping and -echo only", ""},
		{[]string{"bench", "-socket", missing, "-ping", "1", "-duration", "1s"}, exitUsage, "-duration applies to the goodput run only", ""},
		{[]string{"bench", "-socket", missing, "-echo", "-duration", "1s"}, exitUsage, "-duration applies to the goodput run only", ""},
		{[]string{"bench", "-socket", missing, "-echo", "-ping", "1"}, exitUsage, "-echo and -ping exclude each other", ""},
		{[]string{"bench", "-socket", regular, "-size", "100000000"}, exitFail, regular, ""},
	} {
		runOdd(t, c)
	}
}

func TestKeygenAndKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/group.key"
	var out, errb bytes.Buffer
	if code := rbcastd([]string{"keygen", path}, nil, &out, &errb); code != exitOK || !strings.Contains(out.String(), "written to "+path) {
		t.Fatalf("keygen: %d %q %q", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := rbcastd([]string{"keygen", path}, nil, &out, &errb); code != exitFail || !strings.Contains(errb.String(), "file exists") {
		t.Fatalf("keygen over a file: %d %q", code, errb.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-encrypt"}, "-encrypt needs -key-file"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-key-file", dir + "/missing.key"}, "-key-file: auth: bad key file"},
		{[]string{"rekey"}, "want a step: install FILE, activate FILE|FINGERPRINT or retire"},
		{[]string{"rekey", "rotate"}, `unknown step "rotate": want install, activate or retire`},
		{[]string{"rekey", "install"}, "install takes one key FILE"},
		{[]string{"rekey", "retire", "now"}, "retire takes no argument"},
		{[]string{"rekey", "-socket", dir + "/none.sock", "retire"}, dir + "/none.sock"},
	} {
		errb.Reset()
		if code := rbcastd(c.args, nil, &out, &errb); code == exitOK || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: %d %q, want %q", c.args, code, errb.String(), c.want)
		}
	}
}

// protocolFlagNames renames whole words only: a setting's name inside
// another word is left alone.
func TestProtocolFlagNames(t *testing.T) {
	for in, want := range map[string]string{
		"Window is 5000, want 0..4096":                                "-window is 5000, want 0..4096",
		"FlowWindow is 5, Windows 3, MaxSize 2":                       "FlowWindow is 5, Windows 3, MaxSize 2",
		"FailureTimeout (150000000 ns) must exceed HeartbeatInterval": "-failure-timeout (150ms) must exceed -heartbeat",
		"Size is 2 but Members lists 3 members":                       "-members is 2 but Members lists 3 members",
	} {
		if got := protocolFlagNames(in); got != want {
			t.Errorf("protocolFlagNames(%q) = %q, want %q", in, got, want)
		}
	}
}
