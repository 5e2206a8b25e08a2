package main

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
)

// fakeSendFiles plays a daemon that queues every SendFile it takes and
// judges the oldest file queued when take refuses a file, or when the
// client sends nothing for a moment (it waits for a verdict) and full
// files are queued or it has taken all files: take says, with the files
// queued and not judged, whether to queue the file or refuse it (the
// refusal's text). It returns what it saw wrong.
func fakeSendFiles(t *testing.T, files, full int, take func(outstanding int) string) (*localapi.Conn, chan string) {
	bad := make(chan string, 1)
	c := fakeDaemon(t, func(c *net.UnixConn) {
		serveFiles(c, bad, func(name string, queued int) localapi.Message {
			if text := take(queued); text != "" {
				return &localapi.Error{Code: localapi.CodeRefused, Text: "sendfile " + name + ": " + text}
			}
			return nil
		}, func(queued, taken int) bool { return queued >= full || taken == files })
	})
	return c, bad
}

// serveFiles is a fake daemon's side of sendfile on c: it queues each
// SendFile it reads (a FileQueued of 10 bytes) unless refuse answers it
// with a refusal, judges the oldest queued file (a FileVerdict: receiver
// 1 holds it) after each refusal and whenever the client has been quiet
// for 50 ms and idle(queued, taken) says so, and sends on bad what it
// read that was not a SendFile. It closes bad when the client is gone.
func serveFiles(c *net.UnixConn, bad chan<- string, refuse func(name string, queued int) localapi.Message, idle func(queued, taken int) bool) {
	defer close(bad)
	buf := make([]byte, 1<<16)
	write := func(m localapi.Message) { c.Write(m.Append(nil)) }
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
			if len(out) > 0 && idle(len(out), int(id)) {
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
		if r := refuse(sf.Name, len(out)); r != nil {
			write(r)
			if len(out) > 0 {
				judge()
			}
			continue
		}
		id++
		out = append(out, id)
		write(&localapi.FileQueued{ID: id, Size: 10, Name: sf.Name})
	}
}

func manyNames(n int) (paths, names []string) {
	for i := range n {
		names = append(names, fmt.Sprintf("f%03d", i))
		paths = append(paths, "/x/"+names[i])
	}
	return paths, names
}

// sendManyFiles sends the files manyNames(files) names to
// fakeSendFiles(t, files, full, take) and fails the test if sendFiles
// fails or the fake saw something wrong. It returns the files' names
// and what sendfile wrote to stdout and stderr.
func sendManyFiles(t *testing.T, files, full int, take func(outstanding int) string) (names []string, out, errs string) {
	t.Helper()
	c, bad := fakeSendFiles(t, files, full, take)
	paths, names := manyNames(files)
	var o, e bytes.Buffer
	if !sendFiles(c, nil, 0, paths, paths, names, &o, &e, nil) {
		t.Fatalf("sendFiles failed: %s", e.String())
	}
	c.Close()
	if s := <-bad; s != "" {
		t.Fatal(s)
	}
	return names, o.String(), e.String()
}

// sendfile keeps at most sendfileWindow files queued and not yet judged
// at the daemon: before, it sent every SendFile at once, and a sending
// daemon held a descriptor for each (issue 20: a directory of more files
// than RLIMIT_NOFILE had the rest refused, "too many open files").
func TestSendFilesWindow(t *testing.T) {
	defer func(w int) { sendfileWindow = w }(sendfileWindow)
	sendfileWindow = 3
	most := 0
	_, out, _ := sendManyFiles(t, 10, 3, func(n int) string {
		most = max(most, n+1)
		return ""
	})
	if most != 3 {
		t.Errorf("the daemon held up to %d files queued and not judged, want 3 (the window)", most)
	}
	if got := strings.Count(out, "held by members 1\n"); got != 10 {
		t.Errorf("%d verdicts printed, want 10:\n%s", got, out)
	}
}

// A daemon refuses a SendFile beyond its bound on the files queued and
// not yet judged (daemon.QueuedBoundText): sendfile waits for a verdict
// and sends that file again, rather than counting it refused. Here the
// daemon's bound is 2, below the window.
func TestSendFilesQueuedBound(t *testing.T) {
	refusals := 0
	names, out, errs := sendManyFiles(t, 8, 0, func(n int) string {
		if n < 2 {
			return ""
		}
		refusals++
		return fmt.Sprintf("%d files are %s, its bound (2: ...); send it again after a verdict", n, daemon.QueuedBoundText)
	})
	for _, n := range names {
		if !strings.Contains(out, "  "+n+"  10 bytes, held by members 1\n") {
			t.Errorf("no verdict of %s printed:\n%s", n, out)
		}
	}
	if errs != "" || refusals == 0 {
		t.Errorf("stderr %q after %d refusals, want nothing, after some", errs, refusals)
	}
}

// Only the refusal for the daemon's bound is sent again: a refusal for
// another reason whose text holds daemon.QueuedBoundText (the file's
// name or path does) is said once and counted refused. Before, sendfile
// took it for the bound and, with none of its files queued, sent the
// file again every second, for ever.
func TestSendFilesBoundTextElsewhere(t *testing.T) {
	name := "dir/" + daemon.QueuedBoundText
	tries := 0
	c, bad := fakeSendFiles(t, 1, 0, func(int) string {
		tries++
		return "open /x/" + name + ": permission denied"
	})
	var out, errs bytes.Buffer
	done := make(chan bool, 1)
	go func() {
		done <- sendFiles(c, nil, 0, []string{"/x/" + name}, []string{name}, []string{name}, &out, &errs, nil)
	}()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("sendFiles succeeded with the file refused")
		}
	case <-time.After(10 * time.Second):
		c.Close()
		t.Fatal("sendFiles still sending the file again after 10 s")
	}
	c.Close()
	if s := <-bad; s != "" {
		t.Fatal(s)
	}
	if want := "rbcastd sendfile: " + name + ": refused: open /x/" + name + ": permission denied\n"; errs.String() != want || tries != 1 {
		t.Errorf("stderr %q after %d SendFiles, want %q after 1", errs.String(), tries, want)
	}
}

// On a terminal, sendfile erases the progress lines drawn before it
// says a file was refused: before, the refusal went below them, and the
// next redraw (or the end) erased as many lines up from there, the
// refusal with them, leaving a progress line standing.
func TestSendFilesRefusalBelowProgress(t *testing.T) {
	c, bad := fakeSendFiles(t, 1, 0, func(int) string { return "open /x/f000: permission denied" })
	var errs bytes.Buffer
	errs.WriteString("f000: sending\n  member 1: ...\n")
	prog := &fileProgress{sf: &socketFlags{socket: filepath.Join(t.TempDir(), "none")}, w: &errs, ids: make(chan [2]int64, 8), quit: make(chan struct{}), ended: make(chan struct{}), lines: 2}
	go prog.run()
	paths, names := manyNames(1)
	var out bytes.Buffer
	ok := sendFiles(c, nil, 0, paths, paths, names, &out, &errs, prog)
	prog.stop()
	c.Close()
	if s := <-bad; s != "" {
		t.Fatal(s)
	}
	const erase = "\x1b[1A\x1b[2K"
	if want := "f000: sending\n  member 1: ...\n" + erase + erase + "rbcastd sendfile: /x/f000: refused: open /x/f000: permission denied\n"; ok || errs.String() != want {
		t.Errorf("sendFiles = %v, the terminal got %q, want false, %q", ok, errs.String(), want)
	}
}

// A daemon gone while sendfile waits for the answer to a SendFile: the
// files queued before, whose verdicts will not come, are named, and the
// files not sent counted, as when it goes while sendfile waits for a
// verdict. Before, only the file being sent was named.
func TestSendFilesGoneNamesQueued(t *testing.T) {
	c := fakeDaemon(t, func(c *net.UnixConn) {
		buf := make([]byte, 1<<16)
		c.Read(buf)
		c.Write((&localapi.FileQueued{ID: 1, Size: 10, Name: "f000"}).Append(nil))
		c.Read(buf) // the second SendFile: gone before it answers
	})
	paths, names := manyNames(3)
	var out, errs bytes.Buffer
	if sendFiles(c, nil, 0, paths, paths, names, &out, &errs, nil) {
		t.Fatal("sendFiles succeeded with the daemon gone")
	}
	if !strings.HasPrefix(errs.String(), "rbcastd sendfile: /x/f001: ") || !strings.HasSuffix(errs.String(), "\nrbcastd sendfile: f000: no verdict\nrbcastd sendfile: 1 files not sent\n") {
		t.Errorf("stderr %q, want /x/f001's error, f000 without its verdict, 1 file not sent", errs.String())
	}
}

// A verdict of one of sendfile's files that comes between a SendFile and
// the daemon's refusal of it for its bound freed a place: sendfile sends
// the file again at once. Before, it counted only verdicts after the
// refusal: with none of its files left queued it paused a second, and
// with some it waited for one more verdict.
func TestSendFilesBoundVerdictBeforeRefusal(t *testing.T) {
	defer func(p func(time.Duration)) { resendPause = p }(resendPause)
	pauses := 0
	resendPause = func(time.Duration) { pauses++ }
	c := fakeDaemon(t, func(c *net.UnixConn) {
		buf := make([]byte, 1<<16)
		write := func(m interface{ Append([]byte) []byte }) { c.Write(m.Append(nil)) }
		c.Read(buf)
		write(&localapi.FileQueued{ID: 1, Size: 10, Name: "f000"})
		c.Read(buf)
		write(&localapi.FileVerdict{ID: 1, Done: []uint16{1}})
		write(&localapi.Error{Code: localapi.CodeRefused, Text: "sendfile f001: 1 files are " + daemon.QueuedBoundText + ", its bound (1: ...); send it again after a verdict"})
		c.Read(buf)
		write(&localapi.FileQueued{ID: 2, Size: 10, Name: "f001"})
		write(&localapi.FileVerdict{ID: 2, Done: []uint16{1}})
		c.Read(buf)
	})
	paths, names := manyNames(2)
	var out, errs bytes.Buffer
	if !sendFiles(c, nil, 0, paths, paths, names, &out, &errs, nil) {
		t.Fatalf("sendFiles failed: %s", errs.String())
	}
	if got := strings.Count(out.String(), "held by members 1\n"); got != 2 || pauses != 0 {
		t.Errorf("%d verdicts printed after %d pauses, want 2 after none:\n%s", got, pauses, out.String())
	}
}
