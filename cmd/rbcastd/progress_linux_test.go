package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/reliable"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: what is written to tty is read from
// master.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		n, total int64
		el       time.Duration
		want     string
	}{
		{12_500_000, 200_000_000, 2 * time.Second, "sent 12.5 MB of 200.0 MB (6 %), 6.2 MB/s, 30s left"},
		{200_000_000, 200_000_000, 4 * time.Second, "sent 200.0 MB of 200.0 MB (100 %), 50.0 MB/s"},
		{3_000_000, 0, time.Second, "sent 3.0 MB, 3.0 MB/s"},
		{0, 5_000_000, 0, "sent 0.0 MB of 5.0 MB (0 %), 0.0 MB/s"},
	} {
		if got := progressLine("sent", c.n, c.total, c.el); got != c.want {
			t.Errorf("progressLine(%d, %d, %v) = %q, want %q", c.n, c.total, c.el, got, c.want)
		}
	}
}

// stderrFor is a stderr for a command under test: on a terminal (term) a
// pty's end, else a file at path. shown, once f is closed, is what it
// held.
func stderrFor(t *testing.T, term bool, path string) (f *os.File, shown func() string) {
	t.Helper()
	if !term {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		return f, func() string { b, _ := os.ReadFile(path); return string(b) }
	}
	master, tty := openPTY(t)
	var buf bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		io.Copy(&buf, master) // until the pty closes
	}()
	return tty, func() string { <-read; return buf.String() }
}

// On a terminal, send and recv show their progress on stderr; anywhere
// else they print nothing but what they printed before (send's summary).
func TestProgressOnTerminalOnly(t *testing.T) {
	sock := soloDaemonOrder(t, reliable.Total) // recv gets the sender's own messages
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	data := bytes.Repeat([]byte("progress "), 50_000)
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, term := range []bool{true, false} {
		t.Run(fmt.Sprintf("terminal=%v", term), func(t *testing.T) {
			stderr, shown := stderrFor(t, term, filepath.Join(dir, fmt.Sprintf("stderr-%v", term)))
			out := filepath.Join(dir, "out")
			recvDone := make(chan int, 1)
			go func() {
				recvDone <- rbcastd([]string{"recv", "-socket", sock, "-from", "0", "-bytes", fmt.Sprint(len(data)), "-o", out}, nil, io.Discard, stderr)
			}()
			waitSockSubscribers(t, sock, 1)
			if code := rbcastd([]string{"send", "-socket", sock, in}, nil, io.Discard, stderr); code != exitOK {
				t.Fatalf("send: exit %d", code)
			}
			if code := <-recvDone; code != exitOK {
				t.Fatalf("recv: exit %d", code)
			}
			if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
				t.Fatalf("recv wrote %d bytes that differ from the %d sent", len(got), len(data))
			}
			stderr.Close()
			text := shown()
			progress := strings.Contains(text, "sent ") && strings.Contains(text, "received ") && strings.Contains(text, " MB/s")
			summary := strings.Contains(text, "rbcastd send: ")
			switch {
			case term && !progress:
				t.Fatalf("on a terminal, no progress was shown: %q", text)
			case !term && (strings.ContainsRune(text, '\r') || strings.Count(text, "\n") != 1 || !strings.HasPrefix(text, "rbcastd send: ")):
				t.Fatalf("off a terminal, stderr holds more than send's summary: %q", text)
			case !summary:
				t.Fatalf("send's summary is missing: %q", text)
			}
		})
	}
}
