package capture

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// seqOf reads the sequence number of a testFrame.
func seqOf(t *testing.T, b []byte) uint32 {
	t.Helper()
	return binary.BigEndian.Uint32(b[frame.EthernetHeaderLen+16:])
}

// TestRecorderBound fills a small recorder with many frames of varying
// sizes and checks that it holds the newest ones, in order, within its
// byte bound, and that Dump writes exactly those.
func TestRecorderBound(t *testing.T) {
	const size = 8192
	r := newRecorderForTest(size)
	l := &memLink{mac: net.HardwareAddr(testSrc[:])}
	c, err := Wrap(l, nil, Options{Recorder: r, Node: "1", Interface: "rec0"})
	if err != nil {
		t.Fatal(err)
	}
	var sent [][]byte
	for i := range 500 {
		f := testFrame(t, uint32(i), (i*37)%900)
		sent = append(sent, f)
		if _, err := c.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
	}
	l.stats.KernelDrops = 17
	c.Close()
	st := r.Stats()
	if st.Frames == 0 || st.Evicted == 0 || uint64(st.Frames)+st.Evicted != 500 {
		t.Fatalf("stats %+v: want frames held + evicted = 500, both nonzero", st)
	}
	var buf bytes.Buffer
	if err := r.Dump(&buf); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, &buf)
	if len(got.data) != st.Frames {
		t.Fatalf("dump has %d frames, stats say %d", len(got.data), st.Frames)
	}
	// The newest frames, oldest first, and nothing older.
	first := len(sent) - st.Frames
	held := 0
	for i, d := range got.data {
		if !bytes.Equal(d, sent[first+i]) {
			t.Fatalf("dump frame %d is seq %d, want seq %d", i, seqOf(t, d), first+i)
		}
		held += recordLen(len(d))
	}
	if held > size {
		t.Fatalf("%d bytes of records in an %d-byte recorder", held, size)
	}
	// Dropping was needed: the next older frame would not have fitted
	// beside them (allowing for the unused end of the buffer, at most one
	// record's worth).
	if older := recordLen(len(sent[first-1])); held+older <= size-maxFrameRecord(sent) {
		t.Fatalf("holds %d bytes, but the evicted frame of %d bytes would have fitted in %d", held, older, size)
	}
	// The dump's first frame says how many older ones it lacks.
	if got.drops[0] != st.Evicted || slices.Max(got.drops[1:]) != 0 {
		t.Fatalf("dump's epb_dropcount %d on the first frame (max %d after), want %d evicted on the first only", got.drops[0], slices.Max(got.drops[1:]), st.Evicted)
	}
	if len(got.isbs) != 1 || got.isbs[0].PacketsDropped != 17 {
		t.Fatalf("ISBs %+v, want one with 17 drops", got.isbs)
	}
	t.Logf("holds %d of 500 frames, %d bytes of records in %d", st.Frames, held, size)

	// Dump leaves the content in place.
	var again bytes.Buffer
	if err := r.Dump(&again); err != nil || len(readAll(t, &again).data) != st.Frames {
		t.Fatalf("second dump: %v", err)
	}
}

func maxFrameRecord(frames [][]byte) int {
	m := 0
	for _, f := range frames {
		m = max(m, recordLen(len(f)))
	}
	return m
}

// TestRecorderTooBig: a frame larger than the whole ring is counted and
// does not evict what the recorder holds.
func TestRecorderTooBig(t *testing.T) {
	r := newRecorderForTest(2048)
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, nil, Options{Recorder: r})
	if err != nil {
		t.Fatal(err)
	}
	c.Send([][]byte{testFrame(t, 1, 100)})
	c.Send([][]byte{testFrame(t, 2, 3000)})
	if st := r.Stats(); st.Frames != 1 || st.TooBig != 1 || st.Evicted != 0 {
		t.Fatalf("stats %+v, want 1 held and 1 too big", st)
	}
}

// TestDumpOnSignal sends SIGUSR1 to the test process and checks that the
// recorder wrote a readable capture.
func TestDumpOnSignal(t *testing.T) {
	r, err := NewRecorder(MinQueueBytes)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, nil, Options{Recorder: r})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		c.Send([][]byte{testFrame(t, uint32(i), 50)})
	}
	dir := t.TempDir()
	type result struct {
		path string
		err  error
	}
	done := make(chan result, 1)
	stop := r.DumpOnSignal(syscall.SIGUSR1, dir, func(path string, err error) { done <- result{path, err} })
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no dump 10 s after SIGUSR1")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if filepath.Dir(res.path) != dir {
		t.Fatalf("dump written to %s, want it in %s", res.path, dir)
	}
	f, err := os.Open(res.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := readAll(t, f); len(got.data) != 10 {
		t.Fatalf("dump has %d frames, want 10", len(got.data))
	}
	stop()
	stop() // idempotent
}

// TestWriterAndRecorderTogether: one link feeding both sinks gives the
// same frames in both.
func TestWriterAndRecorderTogether(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRecorder(MinQueueBytes)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{Recorder: r})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		c.Send([][]byte{testFrame(t, uint32(i), 64)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var dump bytes.Buffer
	if err := r.Dump(&dump); err != nil {
		t.Fatal(err)
	}
	a, b := readAll(t, &buf), readAll(t, &dump)
	if len(a.data) != 20 || len(b.data) != 20 {
		t.Fatalf("file has %d frames, recorder %d; want 20 each", len(a.data), len(b.data))
	}
	for i := range a.data {
		if !bytes.Equal(a.data[i], b.data[i]) || !a.times[i].Equal(b.times[i]) || a.dirs[i] != b.dirs[i] {
			t.Fatalf("frame %d differs between file and recorder", i)
		}
	}
}
