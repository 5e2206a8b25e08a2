package capture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// DefaultRecorderBytes is the flight recorder size used for a zero size.
const DefaultRecorderBytes = 16 << 20

// Recorder is a flight recorder: it keeps the most recent frames of the
// links wrapped with it in memory and writes them out as pcapng on demand
// (Dump), for instance when the daemon gets SIGUSR1 or an invariant check
// fails.
//
// Memory bound: the ring is one buffer of the size given to NewRecorder,
// allocated up front. Each frame takes 24 bytes of record header plus its
// length, rounded up to 8; when a new frame does not fit, the oldest frames
// are dropped until it does. A record that does not fit before the end of
// the buffer starts over at its beginning, so up to one frame's worth of
// the buffer may be unused. Dump copies the buffer once (another allocation
// of the same size, freed afterwards) so that the links are never blocked
// while it writes. The interface list and the latest statistics of each
// interface are kept beside the ring, a few hundred bytes per link.
type Recorder struct {
	mu      sync.Mutex
	r       *ring
	ifaces  []iface
	dropped uint64 // frames pushed out by newer ones
	tooBig  uint64 // frames larger than the whole ring
}

// RecorderStats are a Recorder's counters.
type RecorderStats struct {
	Frames  int    // frames held now
	Bytes   int    // bytes of frame data held now
	Evicted uint64 // oldest frames dropped to make room for newer ones
	TooBig  uint64 // frames larger than the ring, never held
}

// NewRecorder returns a flight recorder holding at most size bytes of
// records (0 means DefaultRecorderBytes). The size must be able to hold
// the largest frame a link carries, MinQueueBytes.
func NewRecorder(size int) (*Recorder, error) {
	switch {
	case size == 0:
		size = DefaultRecorderBytes
	case size < MinQueueBytes:
		return nil, fmt.Errorf("capture: NewRecorder: size is %d bytes, want 0 (default %d) or at least %d (two frames of the largest size)", size, DefaultRecorderBytes, MinQueueBytes)
	}
	return &Recorder{r: newRing(size)}, nil
}

// newRecorderForTest skips the minimum size so tests can fill it quickly.
func newRecorderForTest(size int) *Recorder { return &Recorder{r: newRing(size)} }

func (r *Recorder) addInterface(name, desc string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ifaces = append(r.ifaces, iface{name: name, desc: desc})
	return len(r.ifaces) - 1
}

func (r *Recorder) detach(int) {}

// add keeps one record, dropping the oldest frames to make room.
// Statistics are kept per interface instead, latest only.
func (r *Recorder) add(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.kind == kindStats {
		f := &r.ifaces[rec.iface]
		if f.stats == nil {
			f.stats = &record{data: make([]byte, len(rec.data))}
		}
		f.stats.kind, f.stats.iface, f.stats.ts = rec.kind, rec.iface, rec.ts
		copy(f.stats.data, rec.data)
		return
	}
	if recordLen(len(rec.data)) > len(r.r.buf) {
		r.tooBig++
		return
	}
	for !r.r.push(&rec) {
		r.ifaces[r.r.front().iface].lost++
		r.r.pop()
		r.dropped++
	}
}

// Stats returns the recorder's counters.
func (r *Recorder) Stats() RecorderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RecorderStats{Frames: r.r.count, Bytes: r.r.dataBytes, Evicted: r.dropped, TooBig: r.tooBig}
}

// Dump writes the frames the recorder holds, oldest first, as a pcapng
// stream to w: a section header, one interface block per wrapped link,
// the frames, and the latest statistics of each link. The recorder keeps
// its content.
func (r *Recorder) Dump(w io.Writer) error {
	r.mu.Lock()
	snap := r.r.snapshot()
	ifaces := make([]iface, len(r.ifaces))
	for i, f := range r.ifaces {
		ifaces[i] = f
		if f.stats != nil {
			s := *f.stats
			s.data = append([]byte(nil), f.stats.data...)
			ifaces[i].stats = &s
		}
	}
	r.mu.Unlock()
	if len(ifaces) == 0 {
		return errors.New("capture: Dump: the recorder has no interfaces (wrap a link with Options.Recorder first)")
	}
	var ng *pcapgo.NgWriter
	for i, f := range ifaces {
		intf := pcapgo.NgInterface{Name: f.name, Description: f.desc, OS: runtime.GOOS, LinkType: layers.LinkTypeEthernet, TimestampResolution: 9}
		var err error
		if i == 0 {
			ng, err = pcapgo.NewNgWriterInterface(w, intf, pcapgo.NgWriterOptions{
				SectionInfo: pcapgo.NgSectionInfo{Application: "rbcast flight recorder", OS: runtime.GOOS, Hardware: runtime.GOARCH},
			})
		} else {
			_, err = ng.AddInterface(intf)
		}
		if err != nil {
			return fmt.Errorf("capture: Dump: %w", err)
		}
	}
	var err error
	var flags pcapgo.NgEpbFlags
	snap.each(func(rec record) {
		if err != nil {
			return
		}
		flags = pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlag(rec.dir), Reception: pcapgo.NgEpbFlag(rec.reception) << 2}
		opts := pcapgo.NgPacketOptions{Flags: &flags}
		// The interface's first frame says how many older ones were
		// evicted (epb_dropcount: lost since the capture started), so
		// pcap-replay knows the dump begins mid-stream.
		if f := &ifaces[rec.iface]; f.lost > 0 {
			n := f.lost
			opts.DropCount = &n
			f.lost = 0
		}
		err = ng.WritePacketWithOptions(captureInfo(&rec), rec.data, opts)
	})
	for i, f := range ifaces {
		if err == nil && f.stats != nil {
			err = ng.WriteInterfaceStats(i, interfaceStats(f.stats))
		}
	}
	if err == nil {
		err = ng.Flush()
	}
	if err != nil {
		return fmt.Errorf("capture: Dump: %w", err)
	}
	return nil
}

// DumpFile writes the recorder's content to a new file at path.
func (r *Recorder) DumpFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	err = r.Dump(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("capture: %w", cerr)
	}
	return err
}

// dumpPath names a dump: dir/prefix-<UTC time>.pcapng.
func dumpPath(dir, prefix string, t time.Time) string {
	return filepath.Join(dir, prefix+"-"+t.UTC().Format("20060102T150405.000000000Z")+".pcapng")
}

// DumpOnSignal dumps the recorder to a new file in dir each time the
// process receives sig (the daemon uses SIGUSR1), named
// rbcast-flight-<UTC time>.pcapng. done, if not nil, is called after each
// dump with the file's path and the error, if any. The returned stop
// function stops listening; it waits for a dump in progress.
func (r *Recorder) DumpOnSignal(sig os.Signal, dir string, done func(path string, err error)) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-quit:
				return
			case <-ch:
				path := dumpPath(dir, "rbcast-flight", time.Now())
				err := r.DumpFile(path)
				if done != nil {
					done(path, err)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
			<-finished
		})
	}
}
