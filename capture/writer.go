package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Defaults and limits of WriterOptions.QueueBytes.
const (
	DefaultQueueBytes = 4 << 20
	// MinQueueBytes holds two of the largest frames a link carries.
	MinQueueBytes = 2 * maxRecordLen
)

// WriterOptions configure a Writer.
type WriterOptions struct {
	// QueueBytes bounds the memory of frames waiting to be written: 0
	// means DefaultQueueBytes, otherwise at least MinQueueBytes. A frame
	// that finds the queue full is dropped and counted (Stats.Dropped),
	// and the next frame of its interface written says how many went
	// missing before it (pcapng epb_dropcount, which pcap-replay reads):
	// a slow disk never stalls the node, and the file says where it has
	// holes.
	QueueBytes int
	// Application names the program in the pcapng section header; empty
	// means "rbcast".
	Application string
}

// WriterStats are a Writer's counters.
type WriterStats struct {
	Frames  uint64 // frames written to the file
	Bytes   uint64 // bytes of those frames
	Dropped uint64 // frames not written because the queue was full or the Writer closed (see QueueBytes)
	Errors  uint64 // records lost because writing failed (see Err)
	Queued  int    // records waiting to be written now
}

// ErrClosed is returned when a Writer is used after Close.
var ErrClosed = errors.New("capture: writer is closed")

// Writer writes the frames of one or more wrapped links to one pcapng
// file, one interface (IDB) per link. Wrapped links queue records into a
// bounded in-memory ring and return at once; one goroutine per Writer
// turns them into pcapng blocks with pcapgo.NgWriter. All methods are safe
// for concurrent use.
type Writer struct {
	out     io.Writer
	closer  io.Closer // the file CreateFile opened, else nil
	appName string

	mu     sync.Mutex
	q      *ring
	ifaces []*iface
	wake   chan struct{}
	done   chan struct{}
	idle   *sync.Cond // signalled when the writer goroutine caught up
	closed bool
	// queued and written count records, so Flush can wait for the ones
	// queued before it.
	queued, written, flushed uint64
	stats                    WriterStats
	err                      error
}

// iface is what a sink knows of one wrapped link.
type iface struct {
	name, desc string
	link       *Link // for the final statistics at Writer.Close; nil once closed
	stats      *record
	lost       uint64 // frames dropped since the last one queued (Writer); evicted (Recorder)
}

// NewWriter returns a Writer that writes a pcapng stream to out. It writes
// nothing until the first link is wrapped (pcapng needs an interface
// before its first packet). Close it to flush the stream; out is not
// closed.
func NewWriter(out io.Writer, opts WriterOptions) (*Writer, error) {
	if out == nil {
		return nil, errors.New("capture: NewWriter: output writer is nil")
	}
	size := opts.QueueBytes
	switch {
	case size == 0:
		size = DefaultQueueBytes
	case size < MinQueueBytes:
		return nil, fmt.Errorf("capture: NewWriter: QueueBytes is %d, want 0 (default %d) or at least %d (two frames of the largest size)", opts.QueueBytes, DefaultQueueBytes, MinQueueBytes)
	}
	app := opts.Application
	if app == "" {
		app = "rbcast"
	}
	w := &Writer{
		out:     out,
		appName: app,
		q:       newRing(size),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	w.idle = sync.NewCond(&w.mu)
	go w.run()
	return w, nil
}

// CreateFile creates (or truncates) the named file and returns a Writer
// for it; Close flushes and closes the file.
func CreateFile(path string, opts WriterOptions) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	w, err := NewWriter(f, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.closer = f
	return w, nil
}

// addInterface registers a link and queues its IDB.
func (w *Writer) addInterface(name, desc string, l *Link) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	id := len(w.ifaces)
	w.ifaces = append(w.ifaces, &iface{name: name, desc: desc, link: l})
	// An interface record is tiny; if the queue is full of frames, wait
	// for room rather than lose the IDB every later frame depends on.
	for !w.q.push(&record{kind: kindInterface, iface: uint32(id)}) {
		w.signal()
		w.idle.Wait()
	}
	w.queued++
	w.signal()
	return id, nil
}

// add queues one record; it never waits.
func (w *Writer) add(rec record) {
	w.mu.Lock()
	if w.closed {
		if rec.kind == kindPacket {
			w.stats.Dropped++
		}
		w.mu.Unlock()
		return
	}
	f := w.ifaces[rec.iface]
	if rec.kind == kindPacket && f.lost > 0 {
		// The count goes ahead of the frame, so the frame's block can say
		// how many of its interface's frames are missing before it.
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], f.lost)
		if w.q.push(&record{kind: kindLost, iface: rec.iface, data: n[:]}) {
			w.queued++
			f.lost = 0
		}
	}
	if !w.q.push(&rec) {
		if rec.kind == kindPacket {
			w.stats.Dropped++
			f.lost++
		}
		w.mu.Unlock()
		return
	}
	w.queued++
	w.mu.Unlock()
	w.signal()
}

func (w *Writer) detach(id int) {
	w.mu.Lock()
	w.ifaces[id].link = nil
	w.mu.Unlock()
}

func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the writer goroutine: it turns queued records into pcapng
// blocks. Only it touches ng and out. The record at the head of the queue
// is read without the lock: producers only write into free space, and the
// record is popped (under the lock) after it has been written.
func (w *Writer) run() {
	defer close(w.done)
	var ng *pcapgo.NgWriter
	var flags pcapgo.NgEpbFlags
	var lost []uint64 // per interface: frames missing before its next packet
	for {
		w.mu.Lock()
		for w.q.count == 0 {
			if ng != nil && w.flushed < w.written {
				w.mu.Unlock()
				err := ng.Flush()
				w.mu.Lock()
				w.noteErr(err, 0)
				w.flushed = w.written
				// Records (and Close) may have arrived while the lock
				// was released: look at the queue again before deciding
				// to exit, or they would be lost.
				continue
			} else if w.flushed < w.written {
				w.flushed = w.written
			}
			w.idle.Broadcast()
			if w.closed {
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		rec := w.q.front()
		failed := w.err != nil
		var desc iface
		if rec.kind == kindInterface {
			desc = *w.ifaces[rec.iface]
		}
		w.mu.Unlock()

		var err error
		if rec.kind == kindLost {
			for int(rec.iface) >= len(lost) {
				lost = append(lost, 0)
			}
			lost[rec.iface] += binary.LittleEndian.Uint64(rec.data)
		}
		if !failed {
			switch rec.kind {
			case kindInterface:
				intf := pcapgo.NgInterface{
					Name:                desc.name,
					Description:         desc.desc,
					OS:                  runtime.GOOS,
					LinkType:            layers.LinkTypeEthernet,
					TimestampResolution: 9,
				}
				if ng == nil {
					ng, err = pcapgo.NewNgWriterInterface(w.out, intf, pcapgo.NgWriterOptions{
						SectionInfo: pcapgo.NgSectionInfo{Application: w.appName, OS: runtime.GOOS, Hardware: runtime.GOARCH},
					})
				} else {
					_, err = ng.AddInterface(intf)
				}
			case kindPacket:
				flags = pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlag(rec.dir), Reception: pcapgo.NgEpbFlag(rec.reception) << 2}
				opts := pcapgo.NgPacketOptions{Flags: &flags}
				if int(rec.iface) < len(lost) && lost[rec.iface] > 0 {
					n := lost[rec.iface]
					opts.DropCount = &n
					lost[rec.iface] = 0
				}
				err = ng.WritePacketWithOptions(captureInfo(&rec), rec.data, opts)
			case kindStats:
				err = ng.WriteInterfaceStats(int(rec.iface), interfaceStats(&rec))
			}
		}

		w.mu.Lock()
		switch {
		case failed || err != nil:
			w.noteErr(err, 1)
		case rec.kind == kindPacket:
			w.stats.Frames++
			w.stats.Bytes += uint64(len(rec.data))
		}
		w.q.pop()
		w.written++
		if w.q.count == 0 || w.written%64 == 0 {
			w.idle.Broadcast() // room for a waiting addInterface
		}
		w.mu.Unlock()
	}
}

// noteErr counts lost records and keeps the first error. Called with mu.
func (w *Writer) noteErr(err error, lost uint64) {
	w.stats.Errors += lost
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("capture: writing pcapng: %w", err)
	}
}

func captureInfo(rec *record) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{
		Timestamp:      time.Unix(0, rec.ts),
		CaptureLength:  len(rec.data),
		Length:         len(rec.data),
		InterfaceIndex: int(rec.iface),
	}
}

// Flush waits until every record queued before it is written to the
// underlying writer, and returns the first write error so far.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	target := w.queued
	for w.flushed < target && !w.finished() {
		w.signal()
		w.idle.Wait()
	}
	return w.err
}

// finished reports whether the writer goroutine has exited. Called with mu.
func (w *Writer) finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Err returns the first error writing the file, or nil. After an error the
// Writer keeps accepting frames and counts them in Stats.Errors.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stats returns the Writer's counters.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Queued = w.q.count
	return s
}

// Close writes the statistics (ISB) of every link still wrapped, writes
// out what is queued, flushes, and closes the file CreateFile opened. Frames
// arriving later are counted as dropped. It returns the first error.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	var open []*Link
	for _, f := range w.ifaces {
		if f.link != nil {
			open = append(open, f.link)
		}
	}
	w.mu.Unlock()
	for _, l := range open {
		l.writeStats()
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
	<-w.done
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if w.closer != nil {
		if cerr := w.closer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("capture: closing file: %w", cerr)
		}
	}
	return err
}
