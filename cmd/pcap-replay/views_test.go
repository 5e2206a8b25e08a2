package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// viewsCapture writes a capture of a group with views on the simulator:
// two processes found it (member 0 sends lines, member 1 receives them,
// both send a datagram), and a third, configured with another
// -max-members, is refused. It returns the file and the lines member 0
// sent, as 'rbcastd recv -all -format lines' prints them.
func viewsCapture(t *testing.T) (path, lines string) {
	t.Helper()
	net, err := testnet.New(3, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "views.pcapng")
	w, err := capture.CreateFile(path, capture.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var links []*capture.Link
	var drivers []*reliable.Driver
	var eps []*testnet.Endpoint
	var refused error
	for i := range 3 {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := capture.Wrap(ep, w, capture.Options{Node: fmt.Sprint(i), Interface: fmt.Sprintf("sim%d", i), Clock: net.Now})
		if err != nil {
			t.Fatal(err)
		}
		cfg := reliable.Config{Group: 9, Views: true, Size: 2, Incarnation: uint32(i + 1), RequestID: frame.MemberID(i),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if i == 2 {
			cfg.Size, cfg.MaxMembers = 1, 8
			cfg.OnEvent = func(ev reliable.Event) {
				if ev.Kind == reliable.JoinRefused {
					refused = fmt.Errorf("%s", ev.Reason)
				}
			}
		}
		d, err := reliable.NewDriver(l, cfg, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			ep.Bind(d)
		}
		links, drivers, eps = append(links, l), append(drivers, d), append(eps, ep)
	}
	net.RunFor(1200 * time.Millisecond) // founding: FailureTimeout/2 of listening
	var b strings.Builder
	for k := range 20 {
		msg := fmt.Sprintf("line %d", k)
		if err := drivers[0].Propose(net.Now(), []byte(msg)); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "0\t%s\n", msg)
		eps[0].Bind(drivers[0]) // the endpoint learns the core's new deadline
		net.RunFor(time.Millisecond)
	}
	if err := drivers[1].ProposeUnreliable(net.Now(), []byte("a datagram")); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "1\ta datagram\n")
	eps[1].Bind(drivers[1])
	net.RunFor(10 * time.Millisecond)
	// The third process joins now, and is refused.
	eps[2].Bind(drivers[2])
	net.RunFor(500 * time.Millisecond)
	if refused == nil {
		t.Fatal("the third process was not refused")
	}
	for _, l := range links {
		l.Close()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, b.String()
}

func TestSimulateViewsCommand(t *testing.T) {
	path, sent := viewsCapture(t)

	// Member 1 delivers member 0's lines; its own datagram is not
	// delivered to it, so the lines of member 0 are all.
	code, out, errOut := runCmd("simulate", "-node", "1", "-lines", path)
	want := strings.Join(strings.SplitAfter(sent, "\n")[:20], "")
	if code != 0 || out != want {
		t.Fatalf("simulate -node 1 -lines: exit %d\n%s\nwant\n%s\nstderr: %s", code, out, want, errOut)
	}
	// Member 0 delivers member 1's datagram.
	code, out, errOut = runCmd("simulate", "-node", "0", path)
	if code != 0 {
		t.Fatalf("simulate -node 0: exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range []string{
		"# simulate member 0 (02:00:00:00:00:01 incarnation 1) of group 9 on interface 0 (n0), views, level fifo, max-members 16, found 2,",
		"# the Join frame 1's config hash ",
		"at level fifo with max-members 16 (read off the hash)",
		"found 2: the members of the view 256 it founded",
		"event      1.000000000 view 256 installed, this process member 0: 0=02:00:00:00:00:01@1 1=02:00:00:00:00:02@2",
		"view 256 unreliable from 1 datagram 1 10B",
		"# frames by type, re-run sent / captured outbound: ",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("simulate -node 0: no %q in\n%s", w, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "diverges") || strings.Contains(l, "WARNING") {
			t.Errorf("simulate -node 0: %s", l)
		}
	}
	// The same output on every run.
	if _, again, _ := runCmd("simulate", "-node", "0", path); again != out {
		t.Error("a second run of simulate -node 0 printed something else")
	}
	// Given settings that differ from the live ones, the re-run says so.
	_, out, _ = runCmd("simulate", "-node", "0", "-order", "total", path)
	if !strings.Contains(out, "WARNING: the Join frame 1's config hash") {
		t.Errorf("simulate -order total of a FIFO group: no warning about the config hash:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-node", "5"}, "pcap-replay simulate: member 5 never joined a view in " + path + ": no ViewCommit lists it and no frame of a view comes from it; the members of its views are 0=02:00:00:00:00:01 incarnation 1 (views 256), 1=02:00:00:00:00:02 incarnation 2 (views 256); processes that asked to join and are in no view: 02:00:00:00:00:03 incarnation 3 asking for id 2 (frame "},
		{[]string{"-node", "0", "-incarnation", "7"}, "member 0 has no incarnation 7 in " + path + "; its incarnations are 1"},
		{[]string{"-node", "0", "-members", "0=02:00:00:00:00:01"}, "a group with views has no static member list (-members)"},
		{[]string{"-node", "0", "-order", "sideways"}, `-order "sideways": want fifo or total`},
		{[]string{"-node", "0", "-order", "fifo", "-level", "safe"}, "-level safe applies to -order total, not fifo"},
		{[]string{"-node", "0", "-level", "eventual"}, `-level "eventual": want agreed or safe`},
		{[]string{"-node", "0", "-max-members", "61"}, "-max-members 61: want 0..60"},
		{[]string{"-node", "0", "-found", "-1"}, "-found -1: want 0..60"},
		{[]string{"-node", "0", "-protocol", "paxos"}, `-protocol "paxos": want auto, pbp, seq, views or pcode`},
	} {
		code, out, errOut := runCmd(append([]string{"simulate"}, append(c.args, path)...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "simulate: simulate:") {
			t.Errorf("simulate %s: exit %d, stderr %q, want exit 2 and %q\n%s", strings.Join(c.args, " "), code, errOut, c.want, out)
		}
	}
	// A capture without views, re-run as one.
	small := smallCapture(t, true, "three")
	code, _, errOut = runCmd("simulate", "-node", "1", "-protocol", "views", small)
	if code != 2 || !strings.Contains(errOut, "member 1 never joined a view in "+small+": no ViewCommit lists it and no frame of a view comes from it; the capture holds no view of the group") {
		t.Errorf("simulate -protocol views of a PBP capture: exit %d, stderr %q", code, errOut)
	}
}
