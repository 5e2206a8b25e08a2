package capture

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/link"
)

// testFrame is a valid rbcast Data frame with sequence number seq and a
// payload of size bytes, behind an Ethernet header.
func testFrame(tb testing.TB, seq uint32, size int) []byte {
	tb.Helper()
	b := frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType)
	h := frame.Header{Group: 1, Sender: 3, Seq: seq}
	b, err := frame.Append(b, &h, &frame.Payload{T: frame.Data, Data: bytes.Repeat([]byte{byte(seq)}, size)})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// rxLink is a link.Link whose Recv returns the same frames every time.
type rxLink struct {
	memLink
	rx []link.Frame
}

func (r *rxLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	return copy(frames, r.rx), nil
}

// readAll reads a pcapng stream: the frames, their capture info and EPB
// options, and how many ISBs it held.
type readBack struct {
	data  [][]byte
	dirs  []pcapgo.NgEpbFlag
	ifs   []int
	times []time.Time
	drops []uint64 // epb_dropcount, 0 when absent
	isbs  []pcapgo.NgInterfaceStatistics
}

func readAll(t *testing.T, r io.Reader) readBack {
	t.Helper()
	var out readBack
	ng, err := pcapgo.NewNgReader(r, pcapgo.NgReaderOptions{
		StatisticsCallback: func(_ int, s pcapgo.NgInterfaceStatistics) { out.isbs = append(out.isbs, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, ci, opts, err := ng.ReadPacketDataWithOptions()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out.data = append(out.data, bytes.Clone(data))
		out.ifs = append(out.ifs, ci.InterfaceIndex)
		out.times = append(out.times, ci.Timestamp)
		var drops uint64
		if opts.DropCount != nil {
			drops = *opts.DropCount
		}
		out.drops = append(out.drops, drops)
		if opts.Flags != nil {
			out.dirs = append(out.dirs, opts.Flags.Direction)
		} else {
			out.dirs = append(out.dirs, 0)
		}
	}
}

func TestWriterSendRecvDirections(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 2, 3, 4, 5, 6, 789, time.UTC)
	in := testFrame(t, 1, 10)
	own := testFrame(t, 2, 10)
	l := &rxLink{memLink: memLink{mac: net.HardwareAddr(testSrc[:])}, rx: []link.Frame{{Data: in, Time: at}, {Data: own, Outgoing: true}}}
	clock := at.Add(time.Second)
	c, err := Wrap(l, w, Options{Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	out := testFrame(t, 3, 10)
	if n, err := c.Send([][]byte{out}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	frames := make([]link.Frame, 4)
	if n, err := c.Recv(time.Time{}, frames); n != 2 || err != nil {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, bytes.NewReader(bytes.Clone(buf.Bytes())))
	want := readBack{
		data:  [][]byte{out, in, own},
		dirs:  []pcapgo.NgEpbFlag{pcapgo.NgEpbFlagDirectionOutbound, pcapgo.NgEpbFlagDirectionInbound, pcapgo.NgEpbFlagDirectionOutbound},
		times: []time.Time{clock, at, clock}, // a zero Frame.Time falls back to the clock
	}
	if len(got.data) != 3 {
		t.Fatalf("%d frames after Flush, want 3", len(got.data))
	}
	for i := range want.data {
		if !bytes.Equal(got.data[i], want.data[i]) || got.dirs[i] != want.dirs[i] || !got.times[i].Equal(want.times[i]) {
			t.Errorf("frame %d: dir %d at %v, want dir %d at %v", i, got.dirs[i], got.times[i], want.dirs[i], want.times[i])
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Close wrote the final statistics of the still-wrapped link.
	if got := readAll(t, bytes.NewReader(buf.Bytes())); len(got.isbs) != 1 {
		t.Fatalf("%d ISBs after Close, want 1", len(got.isbs))
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if _, err := Wrap(l, w, Options{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wrap on a closed Writer: %v, want ErrClosed", err)
	}
}

func TestOptionErrors(t *testing.T) {
	l := &memLink{mac: net.HardwareAddr(testSrc[:])}
	w, err := NewWriter(io.Discard, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cases := []struct {
		name string
		err  func() error
		want string
	}{
		{"nil out", func() error { _, err := NewWriter(nil, WriterOptions{}); return err }, "output writer is nil"},
		{"small queue", func() error { _, err := NewWriter(io.Discard, WriterOptions{QueueBytes: 1000}); return err }, "QueueBytes is 1000"},
		{"small recorder", func() error { _, err := NewRecorder(1000); return err }, "size is 1000 bytes"},
		{"nil link", func() error { _, err := Wrap(nil, w, Options{}); return err }, "link is nil"},
		{"no sink", func() error { _, err := Wrap(l, nil, Options{}); return err }, "neither a Writer nor a Recorder"},
		{"interval", func() error { _, err := Wrap(l, w, Options{StatsInterval: -time.Second}); return err }, "StatsInterval is -1s"},
		{"empty dump", func() error { r, _ := NewRecorder(0); return r.Dump(io.Discard) }, "no interfaces"},
	}
	for _, c := range cases {
		if err := c.err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// failWriter fails every write after the first limit bytes.
type failWriter struct{ limit int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n := f.limit
		f.limit = 0
		return n, errors.New("disk full")
	}
	f.limit -= len(p)
	return len(p), nil
}

// TestWriterErrorDoesNotBreakNode: a failing file is reported by Err and
// counted, while Send keeps working.
func TestWriterErrorDoesNotBreakNode(t *testing.T) {
	w, err := NewWriter(&failWriter{limit: 5000}, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := testFrame(t, 1, 1000)
	for range 100 {
		if n, err := c.Send([][]byte{f}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v: a capture error reached the node", n, err)
		}
	}
	err = w.Close()
	if err == nil || !strings.Contains(err.Error(), "capture: writing pcapng: disk full") {
		t.Fatalf("Close: %v, want the disk-full error", err)
	}
	if c.Err() == nil || w.Err() == nil {
		t.Fatal("Err is nil after a write error")
	}
	st := w.Stats()
	if st.Errors == 0 || st.Frames+st.Errors < 100 {
		t.Fatalf("stats %+v: want errors counted for the lost frames", st)
	}
}

// gateWriter blocks every Write until released.
type gateWriter struct {
	open chan struct{}
	buf  syncbuf.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	<-g.open
	return g.buf.Write(p)
}

// TestWriterQueueFullDrops: a stalled file never stalls Send; frames that
// do not fit in the queue are dropped and counted, the rest are written,
// and the first frame of an interface written after a drop says how many
// of its interface's frames are missing before it (epb_dropcount), so a
// reader knows where the file has holes.
func TestWriterQueueFullDrops(t *testing.T) {
	g := &gateWriter{open: make(chan struct{})}
	w, err := NewWriter(g, WriterOptions{QueueBytes: MinQueueBytes})
	if err != nil {
		t.Fatal(err)
	}
	var links [2]*Link
	for i := range links {
		if links[i], err = Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	const sent = 2000
	send := func(seq uint32) {
		if _, err := links[seq%2].Send([][]byte{testFrame(t, seq, 1400)}); err != nil {
			t.Fatal(err)
		}
	}
	for seq := range uint32(sent) {
		send(seq)
	}
	st := w.Stats()
	if st.Dropped == 0 {
		t.Fatalf("stats %+v: %d frames of 1400 bytes into a %d-byte queue with a stalled file dropped none", st, sent, MinQueueBytes)
	}
	close(g.open)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// One more frame on each link, after the stall: it carries the count
	// of the frames dropped after the last one written.
	send(sent)
	send(sent + 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st = w.Stats()
	got := readAll(t, bytes.NewReader(g.buf.Bytes()))
	if st.Frames+st.Dropped != sent+2 || uint64(len(got.data)) != st.Frames {
		t.Fatalf("stats %+v, file has %d frames; want written+dropped = %d", st, len(got.data), sent+2)
	}
	// Each link's frames carry seqs of one parity: the seqs skipped since
	// the link's previous frame in the file are the drop count.
	next := [2]uint32{0, 1}
	var counted uint64
	for i, data := range got.data {
		_, body, err := frame.SplitEthernet(data, frame.EtherType)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		l := got.ifs[i]
		if missing := uint64(v.Seq()-next[l]) / 2; got.drops[i] != missing {
			t.Fatalf("frame %d (interface %d, seq %d): epb_dropcount %d, want %d (seqs %d to %d missing)", i+1, l, v.Seq(), got.drops[i], missing, next[l], v.Seq()-2)
		}
		counted += got.drops[i]
		next[l] = v.Seq() + 2
	}
	if counted != st.Dropped {
		t.Fatalf("drop counts in the file add up to %d, the Writer dropped %d", counted, st.Dropped)
	}
	t.Logf("%d written, %d dropped while the file was stalled, all accounted for in epb_dropcount", st.Frames, st.Dropped)
}

func TestPeriodicStats(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &memLink{mac: net.HardwareAddr(testSrc[:])}
	c, err := Wrap(l, w, Options{Clock: func() time.Time { return now }, StatsInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f := testFrame(t, 1, 10)
	for i := range 50 {
		l.stats.KernelDrops = uint64(i)
		if _, err := c.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(100 * time.Millisecond) // 5 s in all: an ISB each second
	}
	c.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, &buf)
	if len(got.isbs) != 5 { // at 1, 2, 3, 4 s and at Close
		t.Fatalf("%d ISBs, want 5", len(got.isbs))
	}
	last := got.isbs[len(got.isbs)-1]
	if last.PacketsDropped != 49 || !last.StartTime.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("last ISB %+v, want 49 drops since the start", last)
	}
}

// pausedWriter is a Writer whose goroutine is not running, so a test can
// measure the node's side of recording alone.
func pausedWriter(size int) *Writer {
	w := &Writer{q: newRing(size), wake: make(chan struct{}, 1), done: make(chan struct{}), appName: "test"}
	w.idle = sync.NewCond(&w.mu)
	return w
}

// TestNodePathAllocs: recording a sent or received frame allocates nothing
// on the node's goroutine (it is one copy into the ring).
func TestNodePathAllocs(t *testing.T) {
	w := pausedWriter(64 << 20)
	rec, err := NewRecorder(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	l := &rxLink{memLink: memLink{mac: net.HardwareAddr(testSrc[:])}}
	f := testFrame(t, 1, 1000)
	l.rx = []link.Frame{{Data: f, Time: time.Unix(1, 0)}, {Data: f, Time: time.Unix(2, 0)}}
	c, err := Wrap(l, w, Options{Recorder: rec, StatsInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	batch := [][]byte{f, f, f, f}
	frames := make([]link.Frame, 8)
	if a := testing.AllocsPerRun(1000, func() { _, _ = c.Send(batch) }); a != 0 {
		t.Errorf("Send with capture allocates %.1f times per batch, want 0", a)
	}
	if a := testing.AllocsPerRun(1000, func() { _, _ = c.Recv(time.Time{}, frames) }); a != 0 {
		t.Errorf("Recv with capture allocates %.1f times per batch, want 0", a)
	}
}

// TestRingModel checks the ring against a slice model under random pushes
// and pops of random sizes, including eviction as the recorder does it.
func TestRingModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := newRing(4096)
	type item struct {
		id   uint32
		data []byte
	}
	var model []item
	id := uint32(0)
	for step := range 20000 {
		if rng.IntN(3) > 0 {
			data := bytes.Repeat([]byte{byte(id)}, rng.IntN(700))
			rec := record{kind: kindPacket, iface: id, ts: int64(step), data: data}
			if recordLen(len(data)) > len(r.buf) {
				continue
			}
			for !r.push(&rec) {
				if r.count == 0 {
					t.Fatalf("step %d: a %d-byte record does not fit in an empty ring", step, len(data))
				}
				r.pop()
				model = model[1:]
			}
			model = append(model, item{id, data})
			id++
		} else if r.count > 0 {
			r.pop()
			model = model[1:]
		}
		if r.count != len(model) {
			t.Fatalf("step %d: ring has %d records, model %d", step, r.count, len(model))
		}
		i, used := 0, 0
		r.each(func(rec record) {
			if rec.iface != model[i].id || !bytes.Equal(rec.data, model[i].data) {
				t.Fatalf("step %d: record %d is id %d (%d bytes), want id %d (%d bytes)", step, i, rec.iface, len(rec.data), model[i].id, len(model[i].data))
			}
			used += recordLen(len(rec.data))
			i++
		})
		if used > len(r.buf) {
			t.Fatalf("step %d: %d bytes of records in a %d-byte ring", step, used, len(r.buf))
		}
	}
}

// TestCloseWritesEverythingQueued is the regression test for a lost tail:
// the writer goroutine released its lock to flush, a last frame and Close
// arrived meanwhile, and it exited with them still queued. Close must write
// every frame accepted before it, every time.
func TestCloseWritesEverythingQueued(t *testing.T) {
	for it := range 300 {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			c.Send([][]byte{testFrame(t, uint32(i), 64)})
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.Frames != 20 || st.Queued != 0 || st.Dropped != 0 {
			t.Fatalf("iteration %d: after Close %+v, want 20 frames written and nothing queued or dropped", it, st)
		}
		if got := len(readAll(t, &buf).data); got != 20 {
			t.Fatalf("iteration %d: file has %d frames, want 20", it, got)
		}
	}
}
