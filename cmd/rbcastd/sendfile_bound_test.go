package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
)

// boundDaemon plays a daemon of the given local API version that queues
// at most bound files and refuses a SendFile beyond with refusal's
// Error, then judges its oldest file; it judges the oldest too when the
// client sends nothing for a moment. It returns the connection, Hello
// said, and a channel closed when it ends, after what it saw wrong.
func boundDaemon(t *testing.T, version uint16, bound int, refusal func(name string, queued int) *localapi.Error) (*localapi.Conn, chan string) {
	t.Helper()
	bad := make(chan string, 1)
	c := fakeDaemonHello(t, version, func(c *net.UnixConn) {
		serveFiles(c, bad, func(name string, queued int) localapi.Message {
			if queued >= bound {
				return refusal(name, queued)
			}
			return nil
		}, func(int, int) bool { return true })
	})
	return c, bad
}

// boundText is a daemon's refusal text for its bound on queued files.
func boundText(name string, queued int) string {
	return fmt.Sprintf("sendfile %s: %d files are %s, its bound (%d: ...); send it again after a verdict", name, queued, daemon.QueuedBoundText, queued)
}

// sendAllBound sends 6 files through c and returns whether sendFiles
// succeeded, what it printed, and how many verdicts it printed.
func sendAllBound(t *testing.T, c *localapi.Conn, bad chan string) (bool, string, int) {
	t.Helper()
	paths, names := manyNames(6)
	var out, errs bytes.Buffer
	ok := sendFiles(c, nil, 0, paths, paths, names, &out, &errs, nil)
	c.Close()
	if s := <-bad; s != "" {
		t.Fatal(s)
	}
	return ok, errs.String(), strings.Count(out.String(), "held by members 1\n")
}

// Against a daemon of version 6, sendfile tells the refusal for the
// daemon's bound by its code (CodeQueuedBound), whatever the text, and
// sends the file again; a refusal of code 7 is a refusal, even with the
// bound's text. Against one of version 5 the text (code 7) still tells
// it. Before, only the text did, whatever the version.
func TestSendFilesBoundByCode(t *testing.T) {
	t.Run("v6 code", func(t *testing.T) {
		c, bad := boundDaemon(t, 6, 2, func(name string, n int) *localapi.Error {
			return &localapi.Error{Code: localapi.CodeQueuedBound, Text: "full"}
		})
		if ok, errs, n := sendAllBound(t, c, bad); !ok || n != 6 || errs != "" {
			t.Errorf("sendFiles = %v with %d verdicts, stderr %q; want true, 6, nothing", ok, n, errs)
		}
	})
	t.Run("v6 text", func(t *testing.T) {
		c, bad := boundDaemon(t, 6, 2, func(name string, n int) *localapi.Error {
			return &localapi.Error{Code: localapi.CodeRefused, Text: boundText(name, n)}
		})
		// Each refusal has the daemon judge a file: f002 and f004 are
		// refused, the other four queued and judged.
		ok, errs, n := sendAllBound(t, c, bad)
		want := "rbcastd sendfile: /x/f002: refused: " + boundText("f002", 2)[len("sendfile f002: "):] + "\n" +
			"rbcastd sendfile: /x/f004: refused: " + boundText("f004", 2)[len("sendfile f004: "):] + "\n"
		if ok || n != 4 || errs != want {
			t.Errorf("sendFiles = %v with %d verdicts, stderr %q; want false, 4, %q", ok, n, errs, want)
		}
	})
	t.Run("v5 text", func(t *testing.T) {
		c, bad := boundDaemon(t, 5, 2, func(name string, n int) *localapi.Error {
			return &localapi.Error{Code: localapi.CodeRefused, Text: boundText(name, n)}
		})
		if ok, errs, n := sendAllBound(t, c, bad); !ok || n != 6 || errs != "" {
			t.Errorf("sendFiles = %v with %d verdicts, stderr %q; want true, 6, nothing", ok, n, errs)
		}
	})
}

// Against a daemon of version 6, a file refused for the daemon's bound
// while none of sendfile's own files is queued there (other clients'
// fill it) is sent again once the daemon says a place is free
// (FileRoom), not after a pause: before, sendfile slept a second and
// tried again, as often as it took.
func TestSendFilesBoundWaitsForRoom(t *testing.T) {
	defer func(p func(time.Duration)) { resendPause = p }(resendPause)
	pauses := 0
	resendPause = func(time.Duration) { pauses++ }
	var sent atomic.Int32
	c := fakeDaemonHello(t, 6, func(c *net.UnixConn) {
		buf := make([]byte, 1<<16)
		write := func(m localapi.Message) { c.Write(m.Append(nil)) }
		c.Read(buf)
		sent.Add(1)
		write(&localapi.Error{Code: localapi.CodeQueuedBound, Text: boundText("f000", 3)})
		write(&localapi.FileRoom{}) // another client's file judged
		c.Read(buf)
		sent.Add(1)
		write(&localapi.FileQueued{ID: 1, Size: 10, Name: "f000"})
		write(&localapi.FileVerdict{ID: 1, Done: []uint16{1}})
		c.Read(buf)
	})
	paths, names := manyNames(1)
	var out, errs bytes.Buffer
	if !sendFiles(c, nil, 0, paths, paths, names, &out, &errs, nil) {
		t.Fatalf("sendFiles failed: %s", errs.String())
	}
	if got, n := strings.Count(out.String(), "held by members 1\n"), sent.Load(); got != 1 || pauses != 0 || n != 2 {
		t.Errorf("%d verdicts printed after %d pauses and %d SendFiles, want 1 after none and 2:\n%s", got, pauses, n, out.String())
	}
}

// The FileRoom of a refusal may come after sendfile sent the file
// again on a verdict of its own (the verdict freed the place, and the
// daemon tells every client refused): sendfile takes it for what it is,
// not for the answer to its SendFile, in either order.
func TestSendFilesBoundStaleRoom(t *testing.T) {
	for _, roomFirst := range []bool{false, true} {
		c := fakeDaemonHello(t, 6, func(c *net.UnixConn) {
			buf := make([]byte, 1<<16)
			write := func(m localapi.Message) { c.Write(m.Append(nil)) }
			c.Read(buf)
			write(&localapi.FileQueued{ID: 1, Size: 10, Name: "f000"})
			c.Read(buf)
			write(&localapi.Error{Code: localapi.CodeQueuedBound, Text: boundText("f001", 1)})
			if roomFirst {
				write(&localapi.FileRoom{})
				write(&localapi.FileVerdict{ID: 1, Done: []uint16{1}})
			} else {
				write(&localapi.FileVerdict{ID: 1, Done: []uint16{1}})
				write(&localapi.FileRoom{})
			}
			c.Read(buf)
			write(&localapi.FileQueued{ID: 2, Size: 10, Name: "f001"})
			write(&localapi.FileVerdict{ID: 2, Done: []uint16{1}})
			c.Read(buf)
		})
		paths, names := manyNames(2)
		var out, errs bytes.Buffer
		if !sendFiles(c, nil, 0, paths, paths, names, &out, &errs, nil) {
			t.Fatalf("room first %v: sendFiles failed: %s", roomFirst, errs.String())
		}
		if got := strings.Count(out.String(), "held by members 1\n"); got != 2 {
			t.Errorf("room first %v: %d verdicts printed, want 2:\n%s", roomFirst, got, out.String())
		}
	}
}

// fakeDaemonHello is fakeDaemon that answers the Hello first, in the
// given version, and says Hello for the client.
func fakeDaemonHello(t *testing.T, version uint16, serve func(c *net.UnixConn)) *localapi.Conn {
	t.Helper()
	c := fakeDaemon(t, func(c *net.UnixConn) {
		buf := make([]byte, 64)
		if _, err := c.Read(buf); err != nil {
			return
		}
		c.Write((&localapi.Welcome{Version: version, Group: 7, Members: 2, Ready: true, MaxMessage: 1400}).Append(nil))
		serve(c)
	})
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Hello(0); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	return c
}
