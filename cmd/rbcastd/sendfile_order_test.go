package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/localapi"
)

// A directory of small files: a file may pass before the daemon has
// hashed and queued the next one, so its FileVerdict comes before the
// next SendFile's FileQueued. sendfile took it for the answer and failed
// ("the daemon answered SendFile with FileVerdict": bench/files/run -F
// 100); it now handles the verdict and reads on.
func TestSendFilesVerdictBeforeQueued(t *testing.T) {
	c := fakeDaemon(t, func(c *net.UnixConn) {
		buf := make([]byte, 1<<16)
		write := func(m interface{ Append([]byte) []byte }) { c.Write(m.Append(nil)) }
		for id := uint32(1); id <= 2; id++ {
			if _, err := c.Read(buf); err != nil { // SendFile
				return
			}
			if id == 2 {
				write(&localapi.FileVerdict{ID: 1, Done: []uint16{1, 2}})
			}
			write(&localapi.FileQueued{ID: id, Size: 10, Name: []string{"", "a", "b"}[id]})
		}
		write(&localapi.FileVerdict{ID: 2, Done: []uint16{1, 2}})
		c.Read(buf) // until the client closes
	})
	var out, errs bytes.Buffer
	if !sendFiles(c, nil, 0, []string{"/x/a", "/x/b"}, []string{"/x/a", "/x/b"}, []string{"a", "b"}, &out, &errs, nil) {
		t.Fatalf("sendFiles failed: %s", errs.String())
	}
	if got := out.String(); !strings.Contains(got, "  a  10 bytes, held by members 1, 2\n") || !strings.Contains(got, "  b  10 bytes, held by members 1, 2\n") {
		t.Fatalf("verdicts printed:\n%s\nwant both files held by members 1, 2", got)
	}
}

// fakeDaemon is a local API connection to a daemon that serve plays,
// on a socket of the test's.
func fakeDaemon(t *testing.T, serve func(c *net.UnixConn)) *localapi.Conn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	c, err := localapi.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
