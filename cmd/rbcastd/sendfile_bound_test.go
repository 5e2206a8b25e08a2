package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
)

// boundDaemon plays a daemon of the given local API version that queues
// at most bound files and refuses a SendFile beyond with refusal's
// Error, then judges its oldest file; it judges the oldest too when the
// client sends nothing for a moment. It returns the connection, Hello
// said, and a channel closed when it ends, with what it saw wrong.
func boundDaemon(t *testing.T, version uint16, bound int, refusal func(name string, queued int) *localapi.Error) (*localapi.Conn, chan string) {
	t.Helper()
	bad := make(chan string, 1)
	c := fakeDaemon(t, func(c *net.UnixConn) {
		defer close(bad)
		buf := make([]byte, 1<<16)
		write := func(m localapi.Message) { c.Write(m.Append(nil)) }
		if n, err := c.Read(buf); err != nil {
			return
		} else if h, err := localapi.Decode(buf[:n]); err != nil || h.Type() != localapi.THello {
			bad <- fmt.Sprintf("read %v, %v; want Hello", h, err)
			return
		}
		write(&localapi.Welcome{Version: version, Self: 0, Group: 7, Members: 2, Ready: true, MaxMessage: 1400})
		var out []uint32
		id := uint32(0)
		judge := func() {
			write(&localapi.FileVerdict{ID: out[0], Done: []uint16{1}})
			out = out[1:]
		}
		for {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := c.Read(buf)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				if len(out) > 0 {
					judge()
				}
				continue
			}
			if err != nil {
				return
			}
			m, err := localapi.Decode(buf[:n])
			sf, ok := m.(*localapi.SendFile)
			if err != nil || !ok {
				bad <- fmt.Sprintf("read %v, %v; want SendFile", m, err)
				return
			}
			if len(out) >= bound {
				write(refusal(sf.Name, len(out)))
				if len(out) > 0 {
					judge()
				}
				continue
			}
			id++
			out = append(out, id)
			write(&localapi.FileQueued{ID: id, Size: 10, Name: sf.Name})
		}
	})
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Hello(0); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
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
