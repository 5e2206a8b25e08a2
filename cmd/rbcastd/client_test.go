package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
)

// nullLink is a segment with nobody else on it: a one-member group over
// it starts at once and every message it sends is acknowledged by every
// (no) other member. It lets the clients run against a real daemon
// without root.
type nullLink struct{ closed chan struct{} }

func (l *nullLink) Send(frames [][]byte) (int, error) { return len(frames), nil }
func (l *nullLink) Recv(deadline time.Time, _ []link.Frame) (int, error) {
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		tm := time.NewTimer(time.Until(deadline))
		defer tm.Stop()
		timeout = tm.C
	}
	select {
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	case <-l.closed:
		return 0, net.ErrClosed
	}
}
func (l *nullLink) MTU() int                       { return 1500 }
func (l *nullLink) HardwareAddr() net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (l *nullLink) Stats() (link.Stats, error)     { return link.Stats{}, nil }
func (l *nullLink) Close() error                   { close(l.closed); return nil }

// soloDaemon runs a one-member group's daemon and returns its socket.
func soloDaemon(t *testing.T) string { return soloDaemonOrder(t, reliable.FIFO) }

// soloDaemonOrder is soloDaemon with an order; under Order Total the
// member delivers its own messages, so recv has something to write.
func soloDaemonOrder(t *testing.T, order reliable.Order) string {
	t.Helper()
	return soloDaemonConfig(t, daemon.Config{Logger: quiet, Group: reliable.Config{Group: 3, Size: 1, Server: true, Order: order}})
}

// soloDaemonConfig is soloDaemon with a configuration (whose group need
// not have one member: the daemon runs alone on a link that carries
// nothing).
func soloDaemonConfig(t *testing.T, cfg daemon.Config) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "solo.sock")
	ln, err := daemon.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	l := &nullLink{closed: make(chan struct{})}
	d := daemon.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, l, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		l.Close()
	})
	return sock
}

// send -level unreliable: against a one-member group with views it sends
// every line and says they were not acknowledged; a line too long is
// refused by number; a registered total-order group refuses, naming what
// has the level.
func TestSendUnreliableCLI(t *testing.T) {
	sock := soloDaemonConfig(t, daemon.Config{Logger: quiet, Group: reliable.Config{Group: 3, Size: 1, Views: true}})
	var o, e strings.Builder
	code := rbcastd([]string{"send", "-socket", sock, "-lines", "-level", "unreliable"}, strings.NewReader("one\ntwo\nthree\n"), &o, &e)
	if code != exitOK || !strings.Contains(e.String(), "3 messages, 11 bytes sent unreliably (never acknowledged)") {
		t.Fatalf("send -level unreliable: exit %d %q", code, e.String())
	}
	e.Reset()
	code = rbcastd([]string{"send", "-socket", sock, "-lines", "-level", "unreliable"}, strings.NewReader("ok\n"+strings.Repeat("x", 2000)+"\n"), &o, &e)
	if code != exitFail || !strings.Contains(e.String(), "line 2 is 2000 bytes; the group takes at most") {
		t.Fatalf("send -level unreliable of a long line: exit %d %q", code, e.String())
	}
	e.Reset()
	code = rbcastd([]string{"send", "-socket", soloDaemonOrder(t, reliable.Total), "-level", "unreliable"}, strings.NewReader("x"), &o, &e)
	if code != exitFail || !strings.Contains(e.String(), "run the daemons with -membership views, or with -order fifo") {
		t.Fatalf("send -level unreliable to a registered group: exit %d %q", code, e.String())
	}
}

// send -level fifo|agreed|safe: accepted when it is the level the group
// runs at (the messages are sent and acknowledged), refused before any is
// sent otherwise, naming the group's level and the run flags for the one
// asked.
func TestSendLevelCLI(t *testing.T) {
	views := func(safe bool) func(t *testing.T) string {
		return func(t *testing.T) string {
			return soloDaemonConfig(t, daemon.Config{Logger: quiet, Group: reliable.Config{Group: 3, Size: 1, Views: true, Order: reliable.Total, Safe: safe}})
		}
	}
	for _, tc := range []struct {
		name string
		sock func(*testing.T) string
		ok   []string
		bad  map[string]string
	}{
		{"fifo", soloDaemon, []string{"fifo"}, map[string]string{
			"agreed": "-level agreed: the daemon's group runs at fifo, and a group has one reliable level, chosen when its members start (rbcastd run -order total); send without -level, or with -level fifo",
			"safe":   "-level safe: the daemon's group runs at fifo",
		}},
		// The registered total order (the sequencer) has Agreed alone:
		// its daemon refuses the SendLevel.
		{"agreed", func(t *testing.T) string { return soloDaemonOrder(t, reliable.Total) }, []string{"agreed"}, map[string]string{
			"fifo": "-level fifo: the daemon's group runs at agreed, and FIFO per message is not offered in a total order",
			"safe": "-level safe: the daemon's group runs at agreed, which has that level alone; a message may go agreed or safe, whatever the group's level, only in a group run with -order total -membership views",
		}},
		// A total order over views sends each message Agreed or Safe.
		{"agreed-views", views(false), []string{"agreed", "safe"}, map[string]string{
			"fifo": "-level fifo: the daemon's group runs at agreed, and FIFO per message is not offered in a total order",
		}},
		{"safe-views", views(true), []string{"safe", "agreed"}, map[string]string{
			"fifo": "-level fifo: the daemon's group runs at safe, and FIFO per message is not offered in a total order",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := tc.sock(t)
			for _, level := range append(tc.ok, "reliable") {
				var o, e strings.Builder
				code := rbcastd([]string{"send", "-socket", sock, "-lines", "-level", level}, strings.NewReader("one\ntwo\n"), &o, &e)
				if code != exitOK || !strings.Contains(e.String(), "2 messages, 6 bytes acknowledged") {
					t.Errorf("send -level %s to a %s group: exit %d %q", level, tc.name, code, e.String())
				}
			}
			for level, want := range tc.bad {
				var o, e strings.Builder
				code := rbcastd([]string{"send", "-socket", sock, "-lines", "-level", level}, strings.NewReader("one\n"), &o, &e)
				if code != exitFail || !strings.Contains(e.String(), want) {
					t.Errorf("send -level %s to a %s group: exit %d %q, want %q", level, tc.name, code, e.String(), want)
				}
			}
		})
	}
}

func TestClientsAgainstSoloDaemon(t *testing.T) {
	sock := soloDaemon(t)
	code, out, errOut := runMain("status", "-socket", sock, "-wait-ready", "5s")
	if code != exitOK || !strings.Contains(out, "group 3, member 0 of 1, started, order fifo") || !strings.Contains(out, "0 (self)") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runMain("status", "-socket", sock, "-json")
	var st daemon.Status
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || !st.Ready || st.Self != 0 {
		t.Fatalf("status -json: exit %d %q", code, out)
	}

	var o, e strings.Builder
	code = rbcastd([]string{"send", "-socket", sock, "-lines"}, strings.NewReader("one\ntwo\nthree\n"), &o, &e)
	if code != exitOK || !strings.Contains(e.String(), "3 messages, 11 bytes acknowledged") {
		t.Fatalf("send -lines: exit %d %q", code, e.String())
	}
	// A line longer than a message: the error says which and the limit.
	long := strings.Repeat("x", 2000)
	e.Reset()
	code = rbcastd([]string{"send", "-socket", sock, "-lines"}, strings.NewReader("ok\n"+long+"\n"), &o, &e)
	if code != exitFail || !strings.Contains(e.String(), "line 2 is 2000 bytes; the daemon accepts at most") {
		t.Fatalf("send of a long line: exit %d %q", code, e.String())
	}
	// A stream is cut into messages of the largest size.
	e.Reset()
	code = rbcastd([]string{"send", "-socket", sock}, strings.NewReader(long), &o, &e)
	if code != exitOK || !strings.Contains(e.String(), "2 messages, 2000 bytes acknowledged") {
		t.Fatalf("send of a stream: exit %d %q", code, e.String())
	}
	code, out, errOut = runMain("bench", "-socket", sock, "-duration", "100ms", "-size", "100", "-json")
	var r benchResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Messages == 0 || r.Size != 100 {
		t.Fatalf("bench: exit %d %q %q", code, out, errOut)
	}
	code, _, errOut = runMain("bench", "-socket", sock, "-duration", "100ms", "-size", "100000")
	if code != exitFail || !strings.Contains(errOut, "-size 100000 is larger than the daemon accepts") {
		t.Fatalf("bench -size too large: exit %d %q", code, errOut)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recv's limits and formats, against a one-member Order Total group (it
// delivers its own messages).
func TestRecvFormats(t *testing.T) {
	sock := soloDaemonOrder(t, reliable.Total)
	dir := t.TempDir()
	type result struct {
		code     int
		out, err string
	}
	start := func(args ...string) chan result {
		ch := make(chan result, 1)
		go func() {
			code, out, errOut := runMain(append([]string{"recv", "-socket", sock}, args...)...)
			ch <- result{code, out, errOut}
		}()
		return ch
	}
	raw := start("-from", "0", "-bytes", "7", "-o", filepath.Join(dir, "raw"))
	lines := start("-all", "-count", "3")
	// Both subscribed before anything is sent.
	waitSockSubscribers(t, sock, 2)
	var e strings.Builder
	if code := rbcastd([]string{"send", "-socket", sock, "-lines", "-q"}, strings.NewReader("abc\ndef\nghi\n"), &e, &e); code != exitOK {
		t.Fatalf("send: %d %s", code, e.String())
	}
	r := <-raw
	got, _ := os.ReadFile(filepath.Join(dir, "raw"))
	if r.code != exitOK || string(got) != "abcdefg" {
		t.Fatalf("recv -from 0 -bytes 7: exit %d, wrote %q (stderr %q), want exactly \"abcdefg\"", r.code, got, r.err)
	}
	r = <-lines
	if r.code != exitOK || r.out != "0\tabc\n0\tdef\n0\tghi\n" {
		t.Fatalf("recv -all -count 3: exit %d, wrote %q (stderr %q)", r.code, r.out, r.err)
	}
}

// waitSockSubscribers waits up to 10 s until the daemon on sock counts n
// subscribers.
func waitSockSubscribers(t *testing.T, sock string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := status(&socketFlags{socket: sock}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Subscribers == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers after 10 s, want %d", st.Subscribers, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recv stops on SIGINT with exit 0, having flushed what it wrote.
func TestRecvInterrupt(t *testing.T) {
	sock := soloDaemonOrder(t, reliable.Total)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(os.Args[0], "recv", "-socket", sock, "-all", "-o", out)
	cmd.Env = append(os.Environ(), "RBCASTD_TEST_MAIN=1")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitSockSubscribers(t, sock, 1)
	var e strings.Builder
	if code := rbcastd([]string{"send", "-socket", sock, "-lines", "-q"}, strings.NewReader("one\n"), &e, &e); code != exitOK {
		t.Fatalf("send: %d %s", code, e.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	b, _ := os.ReadFile(out)
	// The message may or may not have reached recv before the signal;
	// what it wrote must be whole lines.
	if err != nil || string(b) != "0\tone\n" && len(b) != 0 {
		t.Fatalf("recv after SIGINT: %v, wrote %q, stderr %q", err, b, errOut.String())
	}
}

// send from a slow input sends what it has as it comes: with -lines each
// line, without it (messages of the largest size) the bytes so far as a
// shorter message; batching never holds input back waiting for more.
func TestSendSlowInputNotHeld(t *testing.T) {
	for _, mode := range []string{"-lines", "raw"} {
		t.Run(mode, func(t *testing.T) { sendSlowInput(t, mode == "-lines") })
	}
}

func sendSlowInput(t *testing.T, lines bool) {
	sock := soloDaemonOrder(t, reliable.Total)
	c, err := localapi.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Hello(localapi.HelloBatch); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(&localapi.Subscribe{From: localapi.AllMembers}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(); err != nil { // Subscribed
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	args := []string{"send", "-socket", sock, "-q"}
	if lines {
		args = append(args, "-lines")
	}
	go func() {
		var e strings.Builder
		done <- rbcastd(args, pr, &e, &e)
	}()
	for _, line := range []string{"first", "second"} {
		if lines {
			io.WriteString(pw, line+"\n")
		} else {
			io.WriteString(pw, line)
		}
		m, err := c.Read() // before the input ends
		if err != nil {
			t.Fatalf("waiting for %q: %v", line, err)
		}
		if d, ok := m.(*localapi.Deliver); !ok || string(d.Data) != line {
			t.Fatalf("got %#v, want %q alone", m, line)
		}
	}
	pw.Close()
	if code := <-done; code != exitOK {
		t.Fatalf("send exit %d", code)
	}
}

// status -wait-ready exits 1 when the group does not start in time (here
// a group of two with only its server running).
func TestWaitReadyTimeout(t *testing.T) {
	sock := soloDaemonConfig(t, daemon.Config{Logger: quiet, Group: reliable.Config{Group: 4, Size: 2, Server: true}})
	start := time.Now()
	code, _, errOut := runMain("status", "-socket", sock, "-wait-ready", "300ms")
	if code != exitFail || !strings.Contains(errOut, "the group has not started after 300ms (-wait-ready)") || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("exit %d after %v, stderr %q", code, time.Since(start), errOut)
	}
	code, out, _ := runMain("status", "-socket", sock)
	if code != exitOK || !strings.Contains(out, "group 4, 2 members expected, waiting for members to register") {
		t.Fatalf("status of a group not started: exit %d\n%s", code, out)
	}
}

// bench -ping to a member that sends nothing back ends at -ping-timeout
// with an error naming the ping, the member and the flag, through the
// socket and through rings; it waited for count seconds and ten more.
func TestBenchPingTimeout(t *testing.T) {
	sock := soloDaemonOrder(t, reliable.FIFO)
	for _, rings := range []string{"-rings=false", "-rings"} {
		start := time.Now()
		code, _, errOut := runMain("bench", "-socket", sock, "-ping", "1", "-count", "5", "-ping-timeout", "200ms", rings)
		if code == exitOK || !strings.Contains(errOut, "ping 0: no reply from member 1 within 200ms (-ping-timeout; is 'rbcastd bench -echo' running there?)") {
			t.Errorf("%s: exit %d %q", rings, code, errOut)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v to give up, want about 200ms", rings, d)
		}
	}
	code, _, errOut := runMain("bench", "-socket", sock, "-ping", "1", "-ping-timeout", "-1s")
	if code != exitUsage || !strings.Contains(errOut, "-ping-timeout is -1s, want 0 (no bound) or more") {
		t.Errorf("-ping-timeout -1s: exit %d %q", code, errOut)
	}
}

// bench -ping of one's own id under Order Total times self-delivery, and
// says it is a loopback; under FIFO it is refused (nothing comes back).
func TestBenchPingSelf(t *testing.T) {
	sock := soloDaemonOrder(t, reliable.Total)
	code, out, errOut := runMain("bench", "-socket", sock, "-ping", "0", "-count", "20", "-json")
	var r pingResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Count != 20 || r.P50us <= 0 || r.P99us < r.P50us || !r.Loopback {
		t.Fatalf("bench -ping 0: exit %d %q %q", code, out, errOut)
	}
	code, out, errOut = runMain("bench", "-socket", sock, "-ping", "0", "-count", "5")
	if code != exitOK || !strings.Contains(out, "to itself (member 0), a loopback through the sequencer, not a round trip") {
		t.Fatalf("bench -ping 0 (text): exit %d %q %q", code, out, errOut)
	}
	fifo := soloDaemonOrder(t, reliable.FIFO)
	code, _, errOut = runMain("bench", "-socket", fifo, "-ping", "0", "-count", "5")
	if code == exitOK || !strings.Contains(errOut, "-ping 0 is this member's own id, and under -order fifo a member's own messages are not delivered back to it") {
		t.Fatalf("bench -ping own id under FIFO: exit %d %q", code, errOut)
	}
	code, _, errOut = runMain("bench", "-socket", sock, "-echo", "-ping", "1")
	if code != exitUsage || !strings.Contains(errOut, "-echo and -ping exclude each other") {
		t.Fatalf("exit %d %q", code, errOut)
	}
	// Through the socket, through rings polled and not, and through the
	// socket again where the daemon refuses rings (its bound is reached).
	tight := soloDaemonConfig(t, daemon.Config{Logger: quiet, MaxRingMemory: 1, Group: reliable.Config{Group: 3, Size: 1, Server: true, Order: reliable.Total}})
	for _, c := range []struct {
		sock string
		args []string
	}{
		{sock, []string{"-rings=false"}},
		{sock, []string{"-rings", "-spin", "0"}},
		{sock, []string{"-rings", "-spin", "1ms"}},
		{tight, nil},
	} {
		args := append([]string{"bench", "-socket", c.sock, "-ping", "0", "-count", "20", "-json"}, c.args...)
		code, out, errOut := runMain(args...)
		var r pingResult
		if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Count != 20 || r.P50us <= 0 {
			t.Errorf("%v: exit %d %q %q", args, code, out, errOut)
		}
	}
}

// TestPrintStatusLastHeard: a member no frame has come from yet (under
// -order total, every member but the sequencer, seen from a non-sequencer)
// is shown as never heard, not as heard "0 ms ago".
func TestPrintStatusLastHeard(t *testing.T) {
	st := &daemon.Status{Group: 1, Size: 3, Self: 0, Members: []daemon.MemberStatus{
		{ID: 0, Self: true, State: daemon.StateAlive},
		{ID: 1, State: daemon.StateAlive, LastHeardMs: 12.4},
		{ID: 2, State: daemon.StateAlive},
		{ID: 3, State: daemon.StateDead, Reason: "failed", DiedAt: "2026-11-22T05:00:01.250Z", SilentBeforeDeathMs: 1003.4},
		{ID: 4, State: daemon.StateDead, Reason: "failed", DiedAt: "2026-11-22T05:00:02.500Z"}, // never heard here
	}}
	var b strings.Builder
	printStatus(&b, st)
	var row1, row2, row3, row4 string
	for _, l := range strings.Split(b.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "1 "):
			row1 = l
		case strings.HasPrefix(l, "2 "):
			row2 = l
		case strings.HasPrefix(l, "3 "):
			row3 = l
		case strings.HasPrefix(l, "4 "):
			row4 = l
		}
	}
	// A dead member shows when it was removed, not a silence that keeps
	// growing.
	if want := "removed at 2026-11-22T05:00:01.250Z, silent 1003 ms before"; !strings.HasSuffix(row3, want) {
		t.Errorf("member 3 row %q, want it to end with %q\n%s", row3, want, b.String())
	}
	if want := "removed at 2026-11-22T05:00:02.500Z"; !strings.HasSuffix(row4, want) {
		t.Errorf("member 4 (never heard) row %q, want it to end with %q, no silence\n%s", row4, want, b.String())
	}
	if !strings.HasSuffix(row1, "12 ms ago") {
		t.Errorf("member 1 row %q, want it to end with %q\n%s", row1, "12 ms ago", b.String())
	}
	if !strings.HasSuffix(row2, "never") {
		t.Errorf("member 2 row %q, want it to end with %q\n%s", row2, "never", b.String())
	}
}

// TestPrintStatusRejoin: status names a rejoin under way, and the last
// one with its reason once the daemon is back.
func TestPrintStatusRejoin(t *testing.T) {
	last := &daemon.RejoinStatus{At: "2026-11-28T05:00:01.000Z", Reason: "reliable: removed from the group: group 9 member 1: view: removed from the group: view 512 leaves this member out",
		View: 770, Unacknowledged: 3}
	st := &daemon.Status{Group: 9, Size: 3, Self: -1, Membership: "views", Rejoins: 2, Rejoining: true, LastRejoin: last}
	var b strings.Builder
	printStatus(&b, st)
	for _, want := range []string{"joining the group again",
		"rejoins: 2; the last: the group went on without this daemon at 2026-11-28T05:00:01.000Z (view 770 (number 3, by member 2), 3 of its messages not held by every member): reliable: removed from the group: group 9 member 1: view: removed from the group: view 512 leaves this member out; joining again\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status while rejoining lacks %q:\n%s", want, b.String())
		}
	}
	last.BackAt = "2026-11-28T05:00:01.400Z"
	st.Rejoining, st.Ready, st.Self = false, true, 1
	b.Reset()
	printStatus(&b, st)
	if want := "view 512 leaves this member out; a member again at 2026-11-28T05:00:01.400Z\n"; !strings.Contains(b.String(), want) || strings.Contains(b.String(), "joining the group again") {
		t.Errorf("status after the rejoin lacks %q or still says it is joining:\n%s", want, b.String())
	}
}

// fakeRingDaemon answers one client as a daemon would up to its send
// ring, takes the first message from the ring without ever asking for a
// doorbell (as a daemon busy sending does), then ends the connection
// with end, closing took once it has.
func fakeRingDaemon(t *testing.T, end *localapi.Error) (sock string, took <-chan string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	first := make(chan string, 1)
	go func() {
		defer close(first)
		c, err := ln.AcceptUnix()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		buf := make([]byte, localapi.MaxBatch)
		read := func() localapi.Message {
			n, err := c.Read(buf)
			if err != nil {
				t.Error(err)
				return nil
			}
			m, err := localapi.Decode(buf[:n])
			if err != nil {
				t.Error(err)
			}
			return m
		}
		h, ok := read().(*localapi.Hello)
		if !ok {
			t.Error("the first message is no Hello")
			return
		}
		c.Write((&localapi.Welcome{Version: h.Version, Group: 3, Members: 1, Ready: true, MaxMessage: 1000}).Append(nil))
		rs, ok := read().(*localapi.RingSetup)
		if !ok || rs.Ring != localapi.RingSend {
			t.Errorf("the client asked for %#v, want a send ring", rs)
			return
		}
		fd, mem, err := localapi.CreateRingMemory(int(rs.Size))
		if err != nil {
			t.Error(err)
			return
		}
		defer localapi.UnmapRing(mem)
		r, err := localapi.NewRing(localapi.RingSend, mem, int(rs.Size))
		if err != nil {
			t.Error(err)
			return
		}
		_, _, err = c.WriteMsgUnix((&localapi.RingReady{Ring: rs.Ring, Size: rs.Size}).Append(nil), syscall.UnixRights(fd), nil)
		syscall.Close(fd)
		if err != nil {
			t.Error(err)
			return
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, data, ok, err := r.Next()
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				c.Write(end.Append(nil))
				first <- string(data)
				return
			}
			if time.Now().After(deadline) {
				t.Error("no message in the send ring")
				return
			}
			time.Sleep(time.Millisecond) // polls the ring, as the test's daemon never sleeps
		}
	}()
	return sock, first
}

// A daemon that ends a sender's connection while it wants no doorbell
// (it was taking the ring's messages when its group stopped) is heard at
// the sender's next line: send returns the daemon's Error instead of
// publishing into a ring nobody reads until the ring fills.
func TestSendHearsTheDaemonBetweenLines(t *testing.T) {
	end := &localapi.Error{Code: localapi.CodeRejoining, Text: "the group went on without this daemon"}
	sock, took := fakeRingDaemon(t, end)
	c, err := localapi.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, w := io.Pipe()
	defer w.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := send(c, in, true, "reliable", nil)
		done <- err
	}()
	io.WriteString(w, "first\n")
	if m := <-took; m != "first" {
		t.Fatalf("the daemon took %q from the ring, want first", m)
	}
	io.WriteString(w, "second\n") // the input goes on, slowly
	select {
	case err := <-done:
		var e *localapi.Error
		if !errors.As(err, &e) || *e != *end {
			t.Fatalf("send: %v, want the daemon's %v", err, end)
		}
	case <-time.After(10 * time.Second):
		w.Close() // the input ends: send flushes, fails, and stops using c's ring
		err := <-done
		t.Fatalf("send did not hear the daemon's Error after the next line (at the end of its input: %v)", err)
	}
}

// TestVecWriterLines: recv's lines (-all's default) go out from the
// deliver ring by writev like raw output, byte for byte what the
// buffered path writes: the sender, a tab, the message, a newline, with
// empty messages, the largest sender, more pieces than one writev takes
// and more senders than the prefix buffer first holds.
func TestVecWriterLines(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vw := newVecWriter(f, true)
	if vw == nil {
		t.Fatal("newVecWriter(file, lines) is nil: lines would be copied through a buffer")
	}
	var want bytes.Buffer
	add := func(from uint16, d []byte) {
		vw.add(from, d)
		fmt.Fprintf(&want, "%d\t%s\n", from, d)
	}
	for i := range 2000 {
		add(uint16(i*37), bytes.Repeat([]byte{byte('a' + i%26)}, i%50))
	}
	add(65535, nil)
	add(0, []byte("last"))
	if err := vw.flush(); err != nil {
		t.Fatal(err)
	}
	add(7, []byte("after a flush"))
	if err := vw.flush(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("wrote %d bytes, want %d; first difference at %d", len(got), want.Len(), firstDiff(got, want.Bytes()))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A daemon of local API version 4 has no level per message: send -level
// safe to its Agreed group is refused before anything is sent, naming
// the group's level and the version; version 5 sends a SendLevel.
func TestSendLevelOldDaemon(t *testing.T) {
	set, err := levelAllowed("safe", localapi.OrderTotal, 4)
	if set || err == nil || !strings.Contains(err.Error(), "-level safe: the daemon's group runs at agreed, and the daemon speaks local API version 4, which has no level per message") {
		t.Fatalf("version 4: set %v, %v", set, err)
	}
	if set, err := levelAllowed("safe", localapi.OrderTotal, 5); !set || err != nil {
		t.Fatalf("version 5: set %v, %v", set, err)
	}
	if set, err := levelAllowed("agreed", localapi.OrderTotal, 5); set || err != nil {
		t.Fatalf("the group's own level: set %v, %v", set, err)
	}
}

// TestPrintStatusAckLag: status shows who lags behind whom from a known
// acknowledgement matrix — only the members behind some sender and the
// senders some member is behind — and one line when all are in step.
func TestPrintStatusAckLag(t *testing.T) {
	st := &daemon.Status{Group: 1, Size: 3, Self: 0, Ready: true, AckLag: []daemon.SenderLag{
		{Sender: 0, Last: 120, Stable: 80, Members: []daemon.MemberLag{{Member: 0, Holds: 120}, {Member: 1, Holds: 80, Behind: 40}, {Member: 2, Holds: 120}}},
		{Sender: 1, Last: 9, Stable: 9, Members: []daemon.MemberLag{{Member: 0, Holds: 9}, {Member: 1, Holds: 9}, {Member: 2, Holds: 9}}},
		{Sender: 2, Last: 7, Stable: 4, Members: []daemon.MemberLag{{Member: 0, Holds: 4, Behind: 3}, {Member: 1, Holds: 5, Behind: 2}, {Member: 2, Holds: 7}}},
	}}
	var b strings.Builder
	printAckLag(&b, st.AckLag)
	want := "acks: frames each member is behind each sender's last, as last heard:\n" +
		"  member  from 0  from 2\n" +
		"  0       .       3\n" +
		"  1       40      2\n"
	if b.String() != want {
		t.Errorf("lag table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	printStatus(&b, st)
	if !strings.Contains(b.String(), want) {
		t.Errorf("status lacks the lag table:\n%s", b.String())
	}
	for i := range st.AckLag {
		for j := range st.AckLag[i].Members {
			st.AckLag[i].Members[j].Behind = 0
		}
	}
	b.Reset()
	printStatus(&b, st)
	if !strings.Contains(b.String(), "(all in step)\n") || strings.Contains(b.String(), "from 0") {
		t.Errorf("status of a group in step:\n%s", b.String())
	}
	st.AckLag = nil // the registered total order: no matrix
	b.Reset()
	printStatus(&b, st)
	if strings.Contains(b.String(), "acks:") {
		t.Errorf("status without a matrix shows one:\n%s", b.String())
	}
}

// A streaming recv wakes about once per nap: at most 500 times a second
// by default (at 2000, a nap's wake-up and the Go runtime's sysmon's
// looks after it were half or more of a recv's CPU on machine D), and a
// default deliver ring holds two naps of a stream at 1 GB/s.
func TestRecvNapDefault(t *testing.T) {
	if perSec := int(time.Second / defaultRecvNap); perSec > 500 {
		t.Errorf("-nap %v: a streaming recv wakes %d times a second, want at most 500", defaultRecvNap, perSec)
	}
	if held := int(2 * defaultRecvNap.Seconds() * 1e9); held > localapi.DefaultRing {
		t.Errorf("-nap %v: two naps of a 1 GB/s stream are %d bytes, more than the default deliver ring's %d", defaultRecvNap, held, localapi.DefaultRing)
	}
	if defaultRecvNap > maxRecvNap {
		t.Errorf("-nap's default %v is above its bound %v", defaultRecvNap, maxRecvNap)
	}
}

// TestPrintStatusCounters: the text status prints what the JSON has and
// an operator needs: the views installed since start (rejoins' included),
// the local API's counters, the link's view of the segment, and key
// mismatches of an authenticated group.
func TestPrintStatusCounters(t *testing.T) {
	st := &daemon.Status{Group: 4, Size: 3, Self: 1, Ready: true, Membership: "views", ViewsInstalled: 7,
		View:     &daemon.ViewStatus{ID: 770, Members: []daemon.ViewMember{{ID: 1, MAC: "02:00:00:00:00:01", Incarnation: 5}}},
		Accepted: 1200, Unreliable: 30, Queued: 4, Pending: 2, HeldData: 9, Subscribers: 2,
		KernelPackets: 5000, LinkFrames: 4990, LinkFiltered: 10, ForeignGroupFrames: 3, SendRetries: 6,
		Auth: &daemon.AuthStatus{Active: "0100000000000000", ActiveID: 1, Accepted: []string{"0100000000000000"}, Verified: 80,
			Dropped: map[string]uint64{}, MismatchesSent: 1, MismatchesReceived: 2}}
	var b strings.Builder
	printStatus(&b, st)
	for _, want := range []string{
		"views installed here since start: 7 (every rejoin's included)\n",
		"local: sends accepted 1200, unreliable 30, queued 4, pending 2, held data frames 9, subscribers 2\n",
		"link: kernel packets 5000, frames received 4990, filtered 10, other groups' frames 3, send retries 6\n",
		"auth: key 0100000000000000 (id 1) (accepting 0100000000000000), 80 frames verified, dropped: none, key mismatches sent 1 received 2\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	// A fixed group has no views to count; a key matched prints no
	// mismatches.
	st.Membership, st.View, st.ViewsInstalled = "registered", nil, 0
	st.Auth.MismatchesSent, st.Auth.MismatchesReceived = 0, 0
	b.Reset()
	printStatus(&b, st)
	if strings.Contains(b.String(), "views installed") || strings.Contains(b.String(), "mismatches") {
		t.Errorf("status of a registered group with matching keys:\n%s", b.String())
	}
}
