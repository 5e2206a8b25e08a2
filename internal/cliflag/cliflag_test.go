package cliflag

import (
	"errors"
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

// Named names the command once: the harnesses' errors that start with it
// (joining, registration, the simulator) are not prefixed again.
func TestNamed(t *testing.T) {
	for _, c := range []struct{ err, want string }{
		{"jacobi: joining group 1 on eth0: no such interface", "jacobi: joining group 1 on eth0: no such interface"},
		{"jacobi on the simulator: stalled", "jacobi on the simulator: stalled"},
		{"-n is -1, want 1..16384", "jacobi: -n is -1, want 1..16384"},
		{"jacobiX: odd", "jacobi: jacobiX: odd"},
	} {
		if got := Named("jacobi", errors.New(c.err)); got != c.want {
			t.Errorf("Named(%q) = %q, want %q", c.err, got, c.want)
		}
	}
	// A program and its subcommand: what a library said before them.
	for _, c := range []struct{ name, err, want string }{
		{"rbcastd send", "rbcastd: no daemon socket at /run/x.sock", "rbcastd send: no daemon socket at /run/x.sock"},
		{"rbcastd recv", "after 34 messages, writing out: rbcastd: the group went on without this daemon",
			"rbcastd recv: after 34 messages, writing out: the group went on without this daemon"},
		{"pcap-replay simulate", "simulate: member 1 was 2 processes", "pcap-replay simulate: member 1 was 2 processes"},
		{"rbcastd send", "sendto: no buffer space", "rbcastd send: sendto: no buffer space"},
		{"rbcastd send", "rbcastdX: odd", "rbcastd send: rbcastdX: odd"},
	} {
		if got := Named(c.name, errors.New(c.err)); got != c.want {
			t.Errorf("Named(%q, %q) = %q, want %q", c.name, c.err, got, c.want)
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
