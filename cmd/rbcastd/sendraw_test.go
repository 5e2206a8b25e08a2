package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/reliable"
)

// memSink is a sink that keeps the messages in memory, in slots made
// once: what sendFile reads, message by message, without the daemon.
type memSink struct {
	buf   []byte // slot i is buf[i*n:(i+1)*n]
	n     int
	slots [][]byte
	msgs  [][]byte // committed, copied out unless counting only
	count bool     // keep no messages (an allocation-free sink)
	total uint64
	nmsgs uint64
	next  int
}

func newMemSink(max int) *memSink {
	return &memSink{buf: make([]byte, 64*max), n: max, slots: make([][]byte, 0, 64)}
}

func (s *memSink) reserve(n, k int) ([][]byte, error) {
	s.slots, s.next = s.slots[:0], 0
	for i := range min(k, 64) {
		s.slots = append(s.slots, s.buf[i*s.n:i*s.n+n])
	}
	return s.slots, nil
}

func (s *memSink) commit(k int) {
	if !s.count {
		s.msgs = append(s.msgs, bytes.Clone(s.slots[s.next][:k]))
	}
	s.next++
	s.nmsgs++
	s.total += uint64(k)
}

func (s *memSink) flush() error               { return nil }
func (s *memSink) sent() (msgs, bytes uint64) { return s.nmsgs, s.total }
func (s *memSink) heard() error               { return nil }

func messageFile(t testing.TB, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	r.Read(b)
	name := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return name, b
}

// TestSendFileMessages: a regular file goes out as messages of the
// largest size, the last shorter, their bytes the file's; an empty file
// as none.
func TestSendFileMessages(t *testing.T) {
	const max = 1000
	for _, size := range []int{0, 1, max - 1, max, max + 1, 64 * max, 64*max + 17, 200*max + 333} {
		name, want := messageFile(t, size)
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		s := newMemSink(max)
		if err := sendRaw(s, f, max); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		f.Close()
		if wantMsgs := (size + max - 1) / max; len(s.msgs) != wantMsgs {
			t.Fatalf("%d bytes: %d messages, want %d", size, len(s.msgs), wantMsgs)
		}
		for i, m := range s.msgs {
			if i < len(s.msgs)-1 && len(m) != max {
				t.Fatalf("%d bytes: message %d is %d bytes, want %d", size, i, len(m), max)
			}
		}
		if got := bytes.Join(s.msgs, nil); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the messages hold %d bytes, not the file's (first difference at %d)", size, len(got), firstDiff(got, want))
		}
	}
}

// TestSendFileAllocs: reading a file into the sink allocates nothing per
// read (x/sys's Readv made an iovec array each time: a tenth of send's
// CPU went to allocating them and collecting them).
func TestSendFileAllocs(t *testing.T) {
	const max = 1400
	name, _ := messageFile(t, 4<<20)
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := newMemSink(max)
	s.count = true
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := f.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		s.total = 0
		if err := sendFile(s, f, max); err != nil {
			t.Fatal(err)
		}
		if s.total != 4<<20 {
			t.Fatalf("read %d bytes, want %d", s.total, 4<<20)
		}
	})
	// A few for the file's raw connection and the iovec array, however
	// long the file: 4 MiB is 47 readvs.
	if allocs > 4 {
		t.Fatalf("%.0f allocations to read 4 MiB, want at most 4 (none per read)", allocs)
	}
}

// TestSendFileToRecv: `send FILE` (a regular file, or stdin from a pipe)
// to `recv -from 0 -bytes N -o FILE` through a one-member Order Total
// daemon (it delivers its own messages): the copy's bytes are the
// file's, at sizes that are not multiples of the message size; an empty
// file sends nothing and succeeds.
func TestSendFileToRecv(t *testing.T) {
	sock := soloDaemonOrder(t, reliable.Total)
	dir := t.TempDir()
	for i, c := range []struct {
		size  int
		stdin bool
	}{{3*1400 + 17, false}, {300<<10 + 5, false}, {1, false}, {100<<10 + 3, true}} {
		name, want := messageFile(t, c.size)
		out := filepath.Join(dir, fmt.Sprintf("out%d", i))
		done := make(chan string, 1)
		go func() {
			code, _, errOut := runMain("recv", "-socket", sock, "-from", "0", "-bytes", fmt.Sprint(c.size), "-o", out)
			done <- fmt.Sprintf("exit %d %s", code, errOut)
		}()
		waitSockSubscribers(t, sock, 1)
		var in io.Reader = strings.NewReader("")
		args := []string{"send", "-socket", sock, "-q", name}
		if c.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go func() { w.Write(want); w.Close() }()
			defer r.Close()
			in, args = r, args[:len(args)-1]
		}
		var e strings.Builder
		if code := rbcastd(args, in, &e, &e); code != exitOK {
			t.Fatalf("send of %d bytes: exit %d %s", c.size, code, e.String())
		}
		if r := <-done; r != "exit 0 " {
			t.Fatalf("recv of %d bytes: %s", c.size, r)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes (stdin %v): the copy has %d, first difference at %d", c.size, c.stdin, len(got), firstDiff(got, want))
		}
		waitSockSubscribers(t, sock, 0)
	}
	empty, _ := messageFile(t, 0)
	var e strings.Builder
	if code := rbcastd([]string{"send", "-socket", sock, empty}, strings.NewReader(""), &e, &e); code != exitOK || !strings.Contains(e.String(), "0 messages, 0 bytes acknowledged") {
		t.Fatalf("send of an empty file: exit %d %q", code, e.String())
	}
}

// BenchmarkSendFile: send's read of a cached 64 MiB file into 1400-byte
// messages (the sink keeps nothing); cpu-ms/MB is the process's CPU
// time (the collector's too) per MB read.
func BenchmarkSendFile(b *testing.B) {
	const max, size = 1400, 64 << 20
	name, _ := messageFile(b, size)
	f, err := os.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := newMemSink(max)
	s.count = true
	b.SetBytes(size)
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := f.Seek(0, 0); err != nil {
			b.Fatal(err)
		}
		if err := sendFile(s, f, max); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1e3/(float64(b.N)*size/1e6), "cpu-ms/MB")
}

// processCPU is the process's user and system time so far.
func processCPU() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
