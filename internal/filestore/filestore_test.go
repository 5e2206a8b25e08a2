package filestore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/files"
	"golang.org/x/sys/unix"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sourceOf writes data to a file of its own and opens it as the sender's
// source named name, by open (OpenSource or OpenSourceHashLater).
func sourceOf(t *testing.T, data []byte, name string, open func(path, name string) (*Source, error)) *Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := open(path, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func meta(name string, data []byte, bs uint32) files.Meta {
	return files.Meta{Sender: 1, Incarnation: 1, ID: 1, Name: name, Size: uint64(len(data)), BlockSize: bs, Hash: sha256.Sum256(data)}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"a", "a/b.img", "dir/.hidden"} {
		if err := CheckName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for name, text := range map[string]string{
		"":                  "not a local relative path",
		"/etc/passwd":       "not a local relative path",
		"../up":             "not a local relative path",
		"a/../../up":        "not a local relative path",
		".rbcast-partial/x": "where partial copies live",
		".":                 "names the root itself",
		"a/..":              "names the root itself",
		"./":                "names the root itself",
	} {
		if err := CheckName(name); err == nil || !strings.Contains(err.Error(), text) {
			t.Errorf("%q: err = %v, want it to say %q", name, err, text)
		}
	}
	d := &Dir{Root: t.TempDir()}
	if _, _, err := d.Open(meta("../escape", []byte("x"), 4)); err == nil {
		t.Fatal("Open accepted a name outside the root")
	}
	if _, _, err := d.Open(meta(".", []byte("x"), 4)); err == nil {
		t.Fatal("Open accepted the root itself as a name")
	}
}

// TestResumeCommit: blocks written, the process gone (the partial closed
// without Abort), one block torn; Open again holds every block but the
// torn one; the rest written, the hash checked, the file committed under
// its name, nothing left in the partial directory; Open once more finds
// it stored.
func TestResumeCommit(t *testing.T) {
	root := t.TempDir()
	data := randomBytes(10_000, 1)
	m := meta("out/file.bin", data, 1000)
	d := &Dir{Root: root}
	f, held, err := d.Open(m)
	if err != nil || len(held) != 0 {
		t.Fatalf("Open: %v, held %v", err, held)
	}
	for b := range uint32(8) {
		if b == 6 {
			// Blocks 0..5 written out; 6 and 7 stay in the run, and the
			// crash loses them.
			if err := f.(*partial).flush(); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.WriteBlock(b, data[b*1000:b*1000+1000]); err != nil {
			t.Fatal(err)
		}
	}
	f.(*partial).close() // the process dies
	part := f.(*partial).path
	pf, err := os.OpenFile(part, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	pf.WriteAt([]byte{data[4500] ^ 0xff}, 4500) // block 4 torn
	pf.Close()
	if _, err := os.Stat(filepath.Join(root, "out/file.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a partial file under the real name: %v", err)
	}

	f, held, err = d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := []frame.Range{{First: 0, Last: 3}, {First: 5, Last: 5}}; !slices.Equal(held, want) {
		t.Fatalf("resumed with %v, want %v", held, want)
	}
	for _, b := range []uint32{4, 6, 7, 8, 9} {
		if err := f.WriteBlock(b, data[b*1000:b*1000+1000]); err != nil {
			t.Fatal(err)
		}
	}
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "out/file.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, %v", len(got), err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, PartialDir)); len(left) != 1 || left[0].Name() != recordsDir {
		t.Fatalf("left in the partial directory: %v, want the records of stored files only", left)
	}
	_, held, err = d.Open(m)
	if err != nil || !slices.Equal(held, []frame.Range{{First: 0, Last: 9}}) {
		t.Fatalf("Open of a stored file: %v, held %v", err, held)
	}
}

func TestAbort(t *testing.T) {
	root := t.TempDir()
	data := randomBytes(3000, 2)
	d := &Dir{Root: root, Accept: func(m files.Meta) bool { return m.Name != "no" }}
	if _, _, err := d.Open(meta("no", data, 1000)); !errors.Is(err, files.ErrDeclined) {
		t.Fatalf("declined: %v", err)
	}
	f, _, _ := d.Open(meta("a", data, 1000))
	f.WriteBlock(0, data[:1000])
	f.Abort(true)
	f, held, _ := d.Open(meta("a", data, 1000))
	if !slices.Equal(held, []frame.Range{{First: 0, Last: 0}}) {
		t.Fatalf("kept partial: held %v", held)
	}
	f.Abort(false)
	if left, _ := os.ReadDir(filepath.Join(root, PartialDir)); len(left) != 0 {
		t.Fatalf("Abort(false) left %v", left)
	}
}

func TestWalk(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"tree/a", "tree/sub/b", "one"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(p), 0o644)
	}
	paths, names, err := Walk([]string{filepath.Join(root, "tree"), filepath.Join(root, "one")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tree/a", "tree/sub/b", "one"}; !slices.Equal(names, want) || len(paths) != 3 {
		t.Fatalf("names %v, want %v", names, want)
	}
}

// TestCoresOverFiles runs a sender's and a receiver's file cores over a
// lossless in-memory exchange, the sender reading a file and the
// receiver storing into a directory; the receiver is killed halfway
// (its core dropped, its partial copy left as it was) and restarted: it
// receives only the blocks it lacked, and stores the file byte for byte.
func TestCoresOverFiles(t *testing.T) {
	// Runs of 8 blocks: at the kill, blocks 0..95 are written, 96..99
	// in the run, lost with the process.
	defer func(n int) { runBytes = n }(runBytes)
	runBytes = 8 * 1464
	const durable = 96
	dst := t.TempDir()
	data := randomBytes(200*1464+17, 3)
	s := sourceOf(t, data, "images/img", OpenSource)
	sender := pairCore(t, 1, nil)
	recv := func() *files.Core { return pairCore(t, 2, &Dir{Root: dst}) }
	r := recv()
	if _, err := sender.Send(1, s.Outgoing(nil)); err != nil {
		t.Fatal(err)
	}
	blocks, killed, again := 0, false, 0
	dropped := 0
	l := &coreLink{t: t, sender: sender, r: r, parse: frame.ParseGroup}
	l.toReceiver = func(v frame.View) bool {
		if v.Type() != frame.FileData {
			return true
		}
		if killed && dropped < 20 {
			dropped++ // the receiver is down
			return false
		}
		blocks++
		if killed && v.Seq() < durable {
			again++
		}
		return true
	}
	verdict := l.run(func() {
		if !killed && blocks >= 100 {
			// kill -9: the receiver's core is gone; 20 blocks pass it by;
			// then it restarts on the same directory.
			killed, l.r = true, recv()
			blocks = 0
		}
	})
	if verdict == nil || !verdict.OK() {
		t.Fatalf("verdict %v", verdict)
	}
	got, err := os.ReadFile(filepath.Join(dst, "images/img"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want the %d sent", len(got), err, len(data))
	}
	// After the restart: the 4 lost in the run, the 20 blocks it missed
	// while down, the 81 after them, and again those that came before
	// the offer it asked for; never one of the 96 it had written.
	if again > 0 || blocks > 201-durable+32 {
		t.Fatalf("the restarted receiver received %d blocks, %d of the %d it had written", blocks, again, durable)
	}
	t.Logf("the restarted receiver received %d blocks of 201, none of the %d it had written", blocks, durable)
}

// The prefix hash: blocks written in any order, some again, and a copy
// resumed halfway, each hash to the file's SHA-256; a copy with a block
// changed on disk behind its back does not.
func TestPrefixHash(t *testing.T) {
	data := randomBytes(10*64+17, 9)
	m := meta("f", data, 64)
	n := m.Blocks()
	block := func(b uint32) []byte { return data[int(b)*64 : int(b)*64+m.BlockLen(b)] }
	orders := map[string][]uint32{}
	var seq, rev, odd []uint32
	for b := range n {
		seq = append(seq, b)
		rev = append(rev, n-1-b)
	}
	for b := uint32(1); b < n; b += 2 {
		odd = append(odd, b)
	}
	for b := uint32(0); b < n; b += 2 {
		odd = append(odd, b)
	}
	orders["in order"], orders["reversed"], orders["odd then even"] = seq, rev, odd
	orders["rewritten"] = append(append([]uint32{}, seq...), 3, 0)
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			d := &Dir{Root: t.TempDir()}
			f, _, err := d.Open(m)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range order {
				if err := f.WriteBlock(b, block(b)); err != nil {
					t.Fatal(err)
				}
			}
			if sum, err := f.Sum(); err != nil || sum != m.Hash {
				t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
			}
			f.Abort(false)
		})
	}
	d := &Dir{Root: t.TempDir()}
	f, _, _ := d.Open(m)
	for b := range n / 2 {
		f.WriteBlock(b, block(b))
	}
	f.(*partial).flush()
	f.(*partial).close() // the process gone
	f, held, err := d.Open(m)
	if err != nil || len(held) != 1 || held[0].Last != n/2-1 {
		t.Fatalf("resumed with %v, %v", held, err)
	}
	if p := f.(*partial); p.hashed != n/2 {
		t.Fatalf("resumed with %d blocks in the prefix hash, want %d", p.hashed, n/2)
	}
	for b := n / 2; b < n; b++ {
		f.WriteBlock(b, block(b))
	}
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("resumed: Sum = %x, %v; want %x", sum, err, m.Hash)
	}
	// Without the prefix hash (a block not known held), Sum reads the
	// file: a block changed on disk shows.
	p := f.(*partial)
	p.data.WriteAt([]byte{^data[0]}, 0)
	f.WriteBlock(n-1, block(n-1))
	p.h.Reset()
	p.hashed, p.inH = 0, 0
	if sum, _ := f.Sum(); sum == m.Hash {
		t.Fatal("a changed block hashed to the file's SHA-256")
	}
}

// BenchmarkWriteBlock is the receiver's storage cost per block of a file
// arriving in order, at a full frame's block of MTU 1500 and 9000: the
// write, the block's checksum and the prefix hash; cpu-ns/op is the
// process's CPU per block (-benchtime 22312x: 200 MB at MTU 9000) (docs/benchmarks-history.md,
// "Files: the table before the changes, machine B idle, 2026-11-28
// 12:43–13:09 UTC, and where the time went (loaded)").
func BenchmarkWriteBlock(b *testing.B) {
	for _, bs := range []uint32{1464, 8964} {
		b.Run(fmt.Sprintf("block=%d", bs), func(b *testing.B) {
			data := randomBytes(int(bs)*1024, 5)
			m := files.Meta{Sender: 1, Incarnation: 1, ID: 1, Name: "f", Size: uint64(bs) * uint64(b.N), BlockSize: bs}
			f, _, err := (&Dir{Root: b.TempDir()}).Open(m)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Abort(false)
			b.SetBytes(int64(bs))
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			for i := range uint32(b.N) {
				off := int(i%1024) * int(bs)
				if err := f.WriteBlock(i, data[off:off+int(bs)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// The sender's source: blocks read alone (repairs, behind and ahead of
// the pass) and runs read with one ReadRunAt (the pass: runs of a few
// blocks, of more than one preadv takes, and one past the file's end)
// each return the file's bytes.
func TestRunSource(t *testing.T) {
	data := randomBytes(3<<20+1000, 11)
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, data, 0o644)
	s, err := OpenSource(path, "f")
	if err != nil {
		t.Fatal(err)
	}
	src, ok := s.Outgoing(nil).Source.(files.RunSource)
	if !ok {
		t.Fatalf("the source is a %T, not a files.RunSource", s.Outgoing(nil).Source)
	}
	defer src.Close()
	const bs = 8964
	blocks := (len(data) + bs - 1) / bs
	blockLen := func(b int) int { return min(bs, len(data)-b*bs) }
	read := func(b int) {
		t.Helper()
		if b < 0 || b >= blocks {
			return
		}
		want := data[b*bs : b*bs+blockLen(b)]
		p := make([]byte, len(want))
		n, err := src.ReadAt(p, int64(b*bs))
		if n != len(want) || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(p, want) {
			t.Fatalf("block %d: read %d bytes of %d, %v, equal %v", b, n, len(want), err, bytes.Equal(p[:n], want[:n]))
		}
	}
	for b := 0; b < blocks; b += 7 {
		k := min(7, blocks-b)
		ps := make([][]byte, k)
		for i := range ps {
			ps[i] = make([]byte, blockLen(b+i))
		}
		n, err := src.ReadRunAt(ps, int64(b*bs))
		want := data[b*bs : b*bs+n]
		if n != len(bytes.Join(ps, nil)) || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(bytes.Join(ps, nil), want) {
			t.Fatalf("run of blocks %d..%d: read %d bytes, %v", b, b+k-1, n, err)
		}
		read(b - 40)  // a repair behind the pass
		read(b + 200) // and one far ahead (another file's block)
	}
	// More buffers than one preadv takes, and past the end of the file:
	// the bytes there are, and io.EOF.
	ps := make([][]byte, 3000)
	for i := range ps {
		ps[i] = make([]byte, 1100)
	}
	off := len(data) - 2500*1100 - 10
	n, err := src.ReadRunAt(ps, int64(off))
	if n != len(data)-off || !errors.Is(err, io.EOF) || !bytes.Equal(bytes.Join(ps, nil)[:n], data[off:]) {
		t.Fatalf("a run past the end: read %d bytes of the %d there are, %v", n, len(data)-off, err)
	}
}

// BenchmarkPassRead is the pass's reading of a file in the page cache
// into frames, a run at a time, each frame then copied as the link copies
// it into its transmit ring: the run read into the frames with one preadv
// (runSource, what the core does, in runs of 512 KiB: files.runBytes;
// 256 KiB and 1 MiB beside it) against a pread of a MiB into a buffer
// and a copy into each frame (readAheadCopy, what it did). cpu-ns/MiB is
// the benchmark thread's CPU, the kernel's copy included.
func BenchmarkPassRead(b *testing.B) {
	data := randomBytes(64<<20, 12)
	path := filepath.Join(b.TempDir(), "f")
	os.WriteFile(path, data, 0o644)
	ring := make([]byte, 8<<20) // the transmit ring's slots
	for _, bs := range []int{1464, 8964} {
		for _, way := range []string{"copy", "preadv-256k", "preadv-512k", "preadv-1m"} {
			run := map[string]int{"copy": 1 << 20, "preadv-256k": 256 << 10, "preadv-512k": 512 << 10, "preadv-1m": 1 << 20}[way]
			per := run / bs
			frames := make([][]byte, per)
			ps := make([][]byte, per)
			for i := range frames {
				frames[i] = make([]byte, bs+64)
				ps[i] = frames[i][64 : 64+bs]
			}
			b.Run(fmt.Sprintf("block=%d/%s", bs, way), func(b *testing.B) {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				rs := runSource{f}
				ra := &readAheadCopy{f: f}
				runBytes := int64(per * bs)
				b.SetBytes(runBytes)
				off, slot := int64(0), 0
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0 := threadCPU(b)
				for b.Loop() {
					if off+runBytes > int64(len(data)) {
						off = 0
					}
					if way == "copy" {
						for i := range ps {
							if _, err := ra.ReadAt(ps[i], off+int64(i*bs)); err != nil {
								b.Fatal(err)
							}
						}
					} else if _, err := rs.ReadRunAt(ps, off); err != nil {
						b.Fatal(err)
					}
					for _, fr := range frames {
						if slot+len(fr) > len(ring) {
							slot = 0
						}
						slot += copy(ring[slot:], fr)
					}
					off += runBytes
				}
				// The thread's CPU, which the machine's other work does
				// not add to as it does to the wall time.
				b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(b.N)/float64(runBytes)*(1<<20), "cpu-ns/MiB")
			})
		}
	}
}

// processCPU is the process's user and system CPU time, in ns: on a
// loaded machine a steadier measure than the wall time.
func processCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// threadCPU is the calling thread's user and system CPU time, in ns.
func threadCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// readAheadCopy is the sender's source before runs: a pread of a MiB,
// then a copy into each block's frame.
type readAheadCopy struct {
	f   *os.File
	buf []byte
	off int64
}

func (r *readAheadCopy) ReadAt(p []byte, off int64) (int, error) {
	end := r.off + int64(len(r.buf))
	if off >= r.off && off+int64(len(p)) <= end {
		return copy(p, r.buf[off-r.off:]), nil
	}
	if cap(r.buf) == 0 {
		r.buf = make([]byte, 1<<20)
	}
	n, err := r.f.ReadAt(r.buf[:cap(r.buf)], off)
	r.buf, r.off = r.buf[:n], off
	if n < len(p) {
		return copy(p, r.buf), err
	}
	return copy(p, r.buf), nil
}

// A lossless receiver's verdict needs no read of its copy: blocks that
// arrive in order are hashed from memory as they are stored, so once the
// last is written Sum is the prefix hash. The copy is overwritten on
// disk behind the partial's back after every block is written out; Sum
// still gives the file's SHA-256, which it could not if it read the copy.
func TestLosslessSumNoReread(t *testing.T) {
	defer func(n int) { runBytes = n }(runBytes)
	runBytes = 4 * 1000 // several runs written out, the last one too
	data := randomBytes(50*1000+123, 21)
	m := meta("f", data, 1000)
	d := &Dir{Root: t.TempDir()}
	f, _, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort(false)
	p := f.(*partial)
	for b := range m.Blocks() {
		if err := f.WriteBlock(b, data[int(b)*1000:int(b)*1000+m.BlockLen(b)]); err != nil {
			t.Fatal(err)
		}
	}
	if p.hashed != m.Blocks() {
		t.Fatalf("after the last block, %d of %d blocks are in the prefix hash", p.hashed, m.Blocks())
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.path, make([]byte, len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("Sum = %x, %v; want %x (the blocks as written, not the copy read back)", sum, err, m.Hash)
	}
}

// A lossy receiver's prefix hash reads nothing back either: the blocks
// written past a gap are kept in memory (up to aheadBytes) and hashed
// from there once the gap is repaired. The copy is overwritten on disk
// behind the partial's back before the repairs come; the hash is still
// the file's. With less room than the blocks past the gap, those beyond
// it are read back: the copy left alone, the hash is the file's too.
func TestLossySumNoReread(t *testing.T) {
	defer func(n, a int) { runBytes, aheadBytes = n, a }(runBytes, aheadBytes)
	runBytes = 4 * 1000
	data := randomBytes(50*1000+123, 22)
	m := meta("f", data, 1000)
	block := func(b uint32) []byte { return data[int(b)*1000 : int(b)*1000+m.BlockLen(b)] }
	lost := func(b uint32) bool { return b%7 == 3 || b == 0 || b == 20 }
	for _, tc := range []struct {
		name      string
		ahead     int
		overwrite bool
	}{{"all kept", 1 << 20, true}, {"some kept", 9 * 1000, false}} {
		t.Run(tc.name, func(t *testing.T) {
			aheadBytes = tc.ahead
			f, _, err := (&Dir{Root: t.TempDir()}).Open(m)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Abort(false)
			p := f.(*partial)
			for b := range m.Blocks() {
				if !lost(b) {
					if err := f.WriteBlock(b, block(b)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if p.hashed != 0 {
				t.Fatalf("block 0 lost, yet %d blocks are in the prefix hash", p.hashed)
			}
			if err := p.flush(); err != nil {
				t.Fatal(err)
			}
			if tc.overwrite {
				if err := os.WriteFile(p.path, make([]byte, len(data)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for b := range m.Blocks() { // the repairs
				if lost(b) {
					if err := f.WriteBlock(b, block(b)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if sum, err := f.Sum(); err != nil || sum != m.Hash {
				t.Fatalf("Sum = %x, %v; want %x (the blocks as written, not the copy read back)", sum, err, m.Hash)
			}
		})
	}
}

// At 5 % loss a receiver's writes stay runs: a lost block is a hole of
// its run (filled in place if its repair comes before the run is
// written), and a repair behind the run is written alone without
// cutting the run short. Before, every gap and every repair ended the
// run: a write of a few blocks each time. A copy written so and
// abandoned before the repairs resumes with exactly the blocks that
// came (a hole is not taken for a block); with the repairs, the hash is
// the file's.
func TestLossyRuns(t *testing.T) {
	defer func(n int) { runBytes = n }(runBytes)
	const bs, n, perRun = 100, 2000, 100
	runBytes = perRun * bs
	data := randomBytes(n*bs, 24)
	m := meta("f", data, bs)
	block := func(b uint32) []byte { return data[int(b)*bs : int(b)*bs+bs] }
	lost := func(b uint32) bool { return b%20 == 7 }
	d := &Dir{Root: t.TempDir()}
	f, _, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	p := f.(*partial)
	losses := 0
	for b := range uint32(n) {
		if lost(b) {
			losses++
		} else if err := f.WriteBlock(b, block(b)); err != nil {
			t.Fatal(err)
		}
		if b >= 30 && lost(b-30) { // its repair, 30 blocks later
			if err := f.WriteBlock(b-30, block(b-30)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for b := uint32(n - 30); b < n; b++ {
		if lost(b) {
			if err := f.WriteBlock(b, block(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	// Two writes a run, two a repair written alone.
	if most := 2*(n/perRun+1) + 2*losses; p.writes > most {
		t.Errorf("%d writes for %d blocks in runs of %d with %d lost and repaired: want at most %d", p.writes, n, perRun, losses, most)
	}
	t.Logf("%d writes", p.writes)
	p.close()

	// Abandoned with its holes: the resume holds every block but them.
	f, _, err = d.Open(meta("g", data, bs))
	if err != nil {
		t.Fatal(err)
	}
	for b := range uint32(n) {
		if !lost(b) {
			f.WriteBlock(b, block(b))
		}
	}
	f.(*partial).flush()
	f.(*partial).close()
	f, held, err := d.Open(meta("g", data, bs))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort(false)
	want := 0
	for _, r := range held {
		for b := r.First; b <= r.Last; b++ {
			if lost(b) {
				t.Fatalf("resumed holding block %d, a hole never written", b)
			}
			want++
		}
	}
	if want != n-losses {
		t.Fatalf("resumed holding %d blocks, want %d", want, n-losses)
	}
	for b := range uint32(n) {
		if lost(b) {
			f.WriteBlock(b, block(b))
		}
	}
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("resumed: Sum = %x, %v; want %x", sum, err, m.Hash)
	}
}

// Blocks kept in memory past the gap and written again with other bytes
// (the fetch of every block again after a mismatch) are hashed as last
// written, whether the room kept holds the new copy or not.
func TestAheadRewritten(t *testing.T) {
	defer func(a int) { aheadBytes = a }(aheadBytes)
	aheadBytes = 8 * 100
	data := randomBytes(40*100, 23)
	m := meta("f", data, 100)
	block := func(b uint32) []byte { return data[int(b)*100 : int(b)*100+100] }
	f, _, err := (&Dir{Root: t.TempDir()}).Open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort(false)
	// Blocks 5..9 kept in memory, with other bytes than the file's.
	for b := uint32(5); b < 10; b++ {
		f.WriteBlock(b, make([]byte, 100))
	}
	for _, b := range []uint32{1, 2, 3, 4} {
		f.WriteBlock(b, block(b))
	}
	for b := uint32(10); b < 40; b++ {
		f.WriteBlock(b, block(b))
	}
	for b := uint32(5); b < 10; b++ {
		f.WriteBlock(b, block(b))
	}
	f.WriteBlock(0, block(0))
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
	}
}

// A block corrupted on its way to the disk (every time it is written,
// so the fetch of every block again after the first mismatch fails too;
// on the wire the frame's CRC-32C would drop it) gives a receiver over a
// Dir the cause FileHashMismatch, named in the sender's verdict, and
// nothing is stored under the file's name: with the hash in the offer,
// and with the hash in FileEnd (the sender hashed the file as it sent it).
func TestCorruptBlockHashMismatch(t *testing.T) {
	for _, alg := range []frame.FileHashAlg{frame.FileHashSHA256, frame.FileHashBLAKE3} {
		for _, first := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/hash in the offer %v", alg, first), func(t *testing.T) { corruptBlockHashMismatch(t, alg, first) })
		}
	}
}

// librarySum is data's hash as the algorithm's own library computes it.
func librarySum(a frame.FileHashAlg, data []byte) [32]byte {
	if a == frame.FileHashBLAKE3 {
		return blake3.Sum256(data)
	}
	return sha256.Sum256(data)
}

func corruptBlockHashMismatch(t *testing.T, alg frame.FileHashAlg, first bool) {
	dst := t.TempDir()
	data := randomBytes(40*1464+5, 23)
	s := sourceOf(t, data, "img", OpenSourceHashLater)
	s.HashAlg = alg
	if first {
		s.Hash = librarySum(alg, data)
	}
	sender := pairCore(t, 1, nil)
	l := &coreLink{t: t, sender: sender, r: pairCore(t, 2, corruptSink{&Dir{Root: dst}}), parse: frame.ParseGroup}
	if _, err := sender.Send(1, s.Outgoing(nil)); err != nil {
		t.Fatal(err)
	}
	verdict := l.run(nil)
	var incomplete []files.Report
	for _, rep := range l.reports {
		if rep.Kind == files.Incomplete {
			incomplete = append(incomplete, rep)
		}
	}
	if verdict == nil || len(verdict.Missing) != 1 || verdict.Missing[0].Member != 2 || verdict.Missing[0].Cause != files.CauseHash {
		t.Fatalf("verdict %v, want member 2 missing with cause %q", verdict, files.CauseHash)
	}
	if verdict.Meta.Hash != librarySum(alg, data) || verdict.Meta.HashAlg != alg {
		t.Fatalf("verdict's hash %v %x, want the file's", verdict.Meta.HashAlg, verdict.Meta.Hash)
	}
	if !strings.Contains(verdict.String(), "hash mismatch") {
		t.Fatalf("verdict %q does not say %q", verdict, "hash mismatch")
	}
	if len(incomplete) != 1 || incomplete[0].Cause != files.CauseHash {
		t.Fatalf("the receiver reported %v, want one incomplete with cause %q", incomplete, files.CauseHash)
	}
	if _, err := os.Stat(filepath.Join(dst, "img")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file is stored under the name: %v", err)
	}
}

// corruptSink flips a bit of block 17 of every file it stores.
type corruptSink struct{ d *Dir }

func (c corruptSink) Open(m files.Meta) (files.SinkFile, []frame.Range, error) {
	f, held, err := c.d.Open(m)
	if err != nil {
		return nil, nil, err
	}
	return corruptFile{f}, held, nil
}

type corruptFile struct{ files.SinkFile }

func (c corruptFile) WriteBlock(b uint32, data []byte) error {
	if b == 17 {
		data = slices.Clone(data)
		data[len(data)/2] ^= 1
	}
	return c.SinkFile.WriteBlock(b, data)
}

// receive stores data as m through d, block by block, and commits it.
func receive(t *testing.T, d *Dir, m files.Meta, data []byte) {
	t.Helper()
	f, _, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	for b := range m.Blocks() {
		if err := f.WriteBlock(b, data[int(b)*int(m.BlockSize):int(b)*int(m.BlockSize)+m.BlockLen(b)]); err != nil {
			t.Fatal(err)
		}
	}
	if sum, err := f.Sum(); err != nil || sum != librarySum(hashAlg(m.HashAlg), data) {
		t.Fatalf("Sum = %x, %v", sum, err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
}

// A file received under BLAKE3 is hashed so (its Sum is the library's),
// recorded so, and matched from the record when offered under BLAKE3
// again (the file is not read: it is gone before Sum here). Offered
// under SHA-256, the record does not hold: the file is read once, and
// recorded under SHA-256. A record from before algorithms had names
// ("rbcast-stored 1", the hash in hex) is a SHA-256 record.
func TestStoredRecordAlg(t *testing.T) {
	d := &Dir{Root: t.TempDir()}
	data := randomBytes(10*100+3, 5)
	b3 := meta("f", data, 100)
	b3.Hash, b3.HashAlg = [32]byte{}, frame.FileHashBLAKE3
	receive(t, d, b3, data)
	final := filepath.Join(d.Root, "f")
	rec, _ := os.ReadFile(d.recordPath("f"))
	if want := fmt.Sprintf("rbcast-stored 2\nblake3:%x\n", blake3.Sum256(data)); !strings.HasPrefix(string(rec), want) {
		t.Fatalf("record %q, want it to begin %q", rec, want)
	}
	saved, _ := os.ReadFile(final)
	f, _, err := d.Open(b3)
	if err != nil || !f.(*partial).Stored() {
		t.Fatalf("Open of the stored file under blake3: %v", err)
	}
	os.Remove(final)
	if sum, err := f.Sum(); err != nil || sum != blake3.Sum256(data) {
		t.Fatalf("Sum of the candidate = %x, %v; want the recorded blake3", sum, err)
	}
	f.Abort(false)
	os.WriteFile(final, saved, 0o644)
	id, _ := statFile(final, uint64(len(data)))
	writeRecord(d.recordPath("f"), "f", final, frame.FileHashBLAKE3, blake3.Sum256(data))
	if _, ok := readRecord(d.recordPath("f"), "f", id, frame.FileHashSHA256); ok {
		t.Fatal("a blake3 record read as a sha256 one")
	}
	s2 := meta("f", data, 100)
	s2.HashAlg = frame.FileHashSHA256
	if f, held, err := d.Open(s2); err != nil || !f.(*partial).Stored() || len(held) != 1 {
		t.Fatalf("Open with the file's sha256: %v, held %v", err, held)
	}
	if sum, ok := readRecord(d.recordPath("f"), "f", id, frame.FileHashSHA256); !ok || sum != sha256.Sum256(data) {
		t.Fatalf("record after a sha256 offer: %x %v", sum, ok)
	}
	os.WriteFile(d.recordPath("f"), fmt.Appendf(nil, "rbcast-stored 1\n%x\n%v\nf", sha256.Sum256(data), id), 0o644)
	if sum, ok := readRecord(d.recordPath("f"), "f", id, frame.FileHashSHA256); !ok || sum != sha256.Sum256(data) {
		t.Fatalf("a version 1 record: %x %v", sum, ok)
	}
	if _, ok := readRecord(d.recordPath("f"), "f", id, frame.FileHashBLAKE3); ok {
		t.Fatal("a version 1 record read as blake3")
	}
}

// A file stored under a name, offered again without a hash (same name,
// same size), is a candidate with every block held, and its Sum is the
// hash recorded when it was stored (the file is not read: it is gone
// before Sum here). Changed behind the store's back, it has no record
// and Sum reads it. Opened under another hash (FileEnd's, after a
// mismatch), it is not offered as stored.
func TestStoredCandidate(t *testing.T) {
	d := &Dir{Root: t.TempDir()}
	data := randomBytes(10*100+3, 4)
	zero := meta("a/f", data, 100)
	zero.Hash = [32]byte{}
	receive(t, d, zero, data)
	final := filepath.Join(d.Root, "a", "f")

	f, held, err := d.Open(zero)
	if err != nil || !f.(*partial).Stored() || !slices.Equal(held, []frame.Range{{First: 0, Last: 10}}) {
		t.Fatalf("Open of a stored file for an offer without a hash: %v, held %v", err, held)
	}
	saved, _ := os.ReadFile(final)
	os.Remove(final)
	if sum, err := f.Sum(); err != nil || sum != sha256.Sum256(data) {
		t.Fatalf("Sum of the candidate = %x, %v; want the recorded hash", sum, err)
	}
	f.Abort(false)
	os.WriteFile(final, saved, 0o644) // a new file: the record is not of it

	// A hashed offer of it: matched (and recorded again); of another
	// file: not stored.
	if f, held, err := d.Open(meta("a/f", data, 100)); err != nil || !f.(*partial).Stored() || len(held) != 1 {
		t.Fatalf("Open with the file's hash: %v, held %v", err, held)
	}
	other := bytes.Clone(data)
	other[500] ^= 1
	if f, held, err := d.Open(meta("a/f", other, 100)); err != nil || f.(*partial).Stored() || len(held) != 0 {
		t.Fatalf("Open with another hash: %v, held %v", err, held)
	} else {
		f.Abort(false)
	}

	// Changed in place, same size: the record no longer holds; Sum reads
	// the file.
	if err := os.WriteFile(final, other, 0o644); err != nil {
		t.Fatal(err)
	}
	f, _, err = d.Open(zero)
	if err != nil || !f.(*partial).Stored() {
		t.Fatalf("Open after a change: %v", err)
	}
	if sum, err := f.Sum(); err != nil || sum != sha256.Sum256(other) {
		t.Fatalf("Sum after a change = %x, %v; want the new bytes' hash", sum, err)
	}
	// Another size is not a candidate.
	short := zero
	short.Size--
	if f, held, err := d.Open(short); err != nil || f.(*partial).Stored() || len(held) != 0 {
		t.Fatalf("Open of another size: %v, held %v", err, held)
	} else {
		f.Abort(false)
	}
}

// Over the cores: a file sent twice without a hash in its offer, to a
// receiver restarted between the sends, is not received the second
// time (no block written, the stored file untouched); a changed file of
// the same name and size is received again and replaces it.
func TestCoresSendAgain(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	data := randomBytes(50*1464+9, 8)
	path := filepath.Join(src, "img")
	send := func(content []byte) (rep files.Report, blocks int) {
		t.Helper()
		os.WriteFile(path, content, 0o644)
		s, err := OpenSourceHashLater(path, "images/img")
		if err != nil {
			t.Fatal(err)
		}
		// Both cores new: the receiver restarted, on the same directory.
		sender, r := pairCore(t, 1, nil), pairCore(t, 2, &Dir{Root: dst})
		if _, err := sender.Send(1, s.Outgoing(nil)); err != nil {
			t.Fatal(err)
		}
		l := &coreLink{t: t, sender: sender, r: r, parse: frame.ParseGroup}
		if verdict := l.run(nil); verdict == nil || !verdict.OK() {
			t.Fatalf("verdict %v", verdict)
		}
		if n := len(l.reports); n > 0 {
			rep = l.reports[n-1]
		}
		st := r.Stats().Detail.(files.Stats)
		return rep, int(st.BlocksReceived)
	}
	stored := filepath.Join(dst, "images", "img")
	if rep, n := send(data); rep.Kind != files.Received || rep.Held || n != 51 {
		t.Fatalf("first send: %v, %d blocks received", rep, n)
	}
	before, _ := os.Stat(stored)
	if rep, n := send(data); rep.Kind != files.Received || !rep.Held || rep.Replaced || n != 0 {
		t.Fatalf("the same file again: %v, %d blocks received; want held, none received", rep, n)
	}
	after, _ := os.Stat(stored)
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("the stored file was replaced though it was held")
	}
	changed := bytes.Clone(data)
	changed[1464*20] ^= 0xff
	if rep, n := send(changed); rep.Kind != files.Received || rep.Held || !rep.Replaced || n != 51 {
		t.Fatalf("a changed file of the same name and size: %v, %d blocks received; want replaced, 51 received", rep, n)
	}
	if got, err := os.ReadFile(stored); err != nil || !bytes.Equal(got, changed) {
		t.Fatalf("stored %d bytes (%v), want the changed file", len(got), err)
	}
}

// Lossy writes, crashes and resumes, drawn per seed (RBCAST_SEEDS, 100
// by default): blocks come as a pass with loss, their repairs later and
// some twice; at a drawn point the process dies (its run lost) or gives
// the copy up to resume it (its run written). A resume holds only blocks
// whose bytes are the file's, and with the rest written in a drawn order
// the hash is the file's and the file committed is its bytes: whatever
// the holes, the in-place fills, the repairs written alone and the
// memory kept past a gap did.
func TestLossyResumeSeeds(t *testing.T) {
	defer func(n, a int) { runBytes, aheadBytes = n, a }(runBytes, aheadBytes)
	seeds := 100
	if v := os.Getenv("RBCAST_SEEDS"); v != "" {
		fmt.Sscan(v, &seeds)
	}
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 0x10557))
		bs := 16 + r.IntN(200)
		data := randomBytes(r.IntN(300*bs)+1, seed)
		m := meta("f", data, uint32(bs))
		n := m.Blocks()
		runBytes = bs * (1 + r.IntN(40))
		aheadBytes = bs * r.IntN(60)
		loss := []float64{0, 0.05, 0.2, 0.5}[r.IntN(4)]
		block := func(b uint32) []byte { return data[int(b)*bs : int(b)*bs+m.BlockLen(b)] }
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (RBCAST_SEEDS=%d; block %d, %d blocks, run %d, ahead %d, loss %v): %s",
				seed, seed+1, bs, n, runBytes, aheadBytes, loss, fmt.Sprintf(format, args...))
		}
		// The pass with loss, each lost block repaired 1..60 blocks later
		// (or at the end), one in ten blocks twice.
		var order []uint32
		later := map[uint32][]uint32{}
		for b := range n {
			if r.Float64() < loss {
				at := b + 1 + uint32(r.IntN(60))
				later[at] = append(later[at], b)
			} else {
				order = append(order, b)
				if r.IntN(10) == 0 {
					order = append(order, b)
				}
			}
			order = append(order, later[b]...)
			delete(later, b)
		}
		for b := n; len(later) > 0; b++ {
			order = append(order, later[b]...)
			delete(later, b)
		}
		d := &Dir{Root: t.TempDir()}
		f, _, err := d.Open(m)
		if err != nil {
			fail("%v", err)
		}
		stop := r.IntN(len(order) + 1)
		for _, b := range order[:stop] {
			if err := f.WriteBlock(b, block(b)); err != nil {
				fail("%v", err)
			}
		}
		if r.IntN(2) == 0 {
			f.(*partial).close() // killed: the run is lost
		} else {
			f.Abort(true)
		}
		f, held, err := d.Open(m)
		if err != nil {
			fail("resume: %v", err)
		}
		p := f.(*partial)
		for _, rg := range held {
			for b := rg.First; b <= rg.Last; b++ {
				got := make([]byte, m.BlockLen(b))
				p.data.ReadAt(got, int64(b)*int64(bs))
				if !bytes.Equal(got, block(b)) {
					fail("resumed holding block %d, whose bytes on disk are not the file's", b)
				}
			}
		}
		rest := r.Perm(int(n))
		for _, i := range rest {
			if b := uint32(i); !p.holds(b) {
				if err := f.WriteBlock(b, block(b)); err != nil {
					fail("%v", err)
				}
			}
		}
		if sum, err := f.Sum(); err != nil || sum != m.Hash {
			fail("Sum = %x, %v; want %x", sum, err, m.Hash)
		}
		if err := f.Commit(); err != nil {
			fail("commit: %v", err)
		}
		if got, err := os.ReadFile(filepath.Join(d.Root, "f")); err != nil || !bytes.Equal(got, data) {
			fail("the stored file differs from the file sent (%d bytes, %v)", len(got), err)
		}
	}
}

// allocated is the bytes f allocates: the growth of the runtime's
// TotalAlloc across it.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A receiver's second file reuses the run buffer of its first (freeRuns):
// it allocates less than a run. A new 1 MiB run per file cost 256 page
// faults once the runtime had given the last one's pages back.
func TestRunReused(t *testing.T) {
	d := &Dir{Root: t.TempDir()}
	data := randomBytes(4<<20, 31)
	receive(t, d, meta("first", data, 8964), data)
	m := meta("second", data, 8964)
	n := allocated(func() { receive(t, d, m, data) })
	t.Logf("the second file of 4 MiB allocated %d bytes", n)
	if n >= uint64(runBytes) {
		t.Errorf("the second file allocated %d bytes, want less than a run (%d): its run is the first's", n, runBytes)
	}
}

// A receiver's second lossy file reuses the buffer of blocks past a gap
// of its first (freeAheads): the second allocates less than the buffer.
// A smaller buffer kept before (a small file's) gives way to the larger.
func TestAheadReused(t *testing.T) {
	defer func(a int) { aheadBytes = a }(aheadBytes)
	freeAheads.give(make([]byte, 1000))
	aheadBytes = 4 << 20
	data := randomBytes(8<<20, 32)
	lossy := func(name string) {
		m := meta(name, data, 8964)
		f, _, err := (&Dir{Root: t.TempDir()}).Open(m)
		if err != nil {
			t.Fatal(err)
		}
		block := func(b uint32) []byte {
			return data[int(b)*int(m.BlockSize) : int(b)*int(m.BlockSize)+m.BlockLen(b)]
		}
		for _, repair := range []bool{false, true} {
			for b := range m.Blocks() {
				if (b == 0 || b%5 == 2) == repair {
					if err := f.WriteBlock(b, block(b)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if sum, err := f.Sum(); err != nil || sum != m.Hash {
			t.Fatalf("%s: Sum = %x, %v; want %x", name, sum, err, m.Hash)
		}
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	lossy("first")
	n := allocated(func() { lossy("second") })
	t.Logf("the second lossy file of 8 MiB allocated %d bytes", n)
	if n >= uint64(aheadBytes) {
		t.Errorf("the second lossy file allocated %d bytes, want less than its blocks past the gap (%d): they are the first's", n, aheadBytes)
	}
}

// TestRunSourceCachedRaw: a run the page cache holds is read by a raw
// preadv2(RWF_NOWAIT), with no blocking preadv (whose entersyscall wakes
// the runtime's sysmon when the P had been idle); a run the cache does
// not hold (the raw call answers EAGAIN) falls back to the blocking
// preadv. Both return the file's bytes.
func TestRunSourceCachedRaw(t *testing.T) {
	data := randomBytes(4<<20, 13)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	calls := 0
	defer func(p func(int, [][]byte, int64) (int, error)) { preadv = p }(preadv)
	preadv = func(fd int, iovs [][]byte, off int64) (int, error) {
		calls++
		return unix.Preadv(fd, iovs, off)
	}
	s, err := OpenSource(path, "f")
	if err != nil {
		t.Fatal(err)
	}
	src := s.Outgoing(nil).Source.(files.RunSource)
	defer src.Close()
	const bs = 8964
	readRun := func(off int) {
		t.Helper()
		ps := make([][]byte, 58)
		for i := range ps {
			ps[i] = make([]byte, bs)
		}
		n, err := src.ReadRunAt(ps, int64(off))
		if n != len(ps)*bs || err != nil || !bytes.Equal(bytes.Join(ps, nil), data[off:off+n]) {
			t.Fatalf("run at %d: read %d bytes of %d, %v", off, n, len(ps)*bs, err)
		}
	}
	readRun(0) // just written: in the page cache
	if calls != 0 {
		t.Errorf("a run in the page cache: %d blocking preadv calls, want 0 (a raw preadv2 with RWF_NOWAIT)", calls)
	}
	// Not cached: posix_fadvise(DONTNEED) may leave the pages where
	// they are (tmpfs), so the raw call is made to say what it says of
	// pages not in the cache (EAGAIN), and the run is read by preadv.
	defer func(r func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno)) { rawSyscall6 = r }(rawSyscall6)
	rawSyscall6 = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno) {
		return 0, 0, unix.EAGAIN
	}
	readRun(2 << 20)
	if calls == 0 {
		t.Errorf("a run not in the page cache (preadv2 RWF_NOWAIT: EAGAIN) made no blocking preadv")
	}
}

// keepSink is a Dir that keeps the partial copies it opens.
type keepSink struct {
	*Dir
	opened []*partial
}

func (k *keepSink) Open(m files.Meta) (files.SinkFile, []frame.Range, error) {
	f, held, err := k.Dir.Open(m)
	if p, ok := f.(*partial); ok {
		k.opened = append(k.opened, p)
	}
	return f, held, err
}

// TestBlockSumsFromFrames: a receiver's store takes each block's CRC-32C
// from the core, which derives it from the FileData frame's CRC: it
// computes none itself (a pass over every byte it received before),
// unless the frames' CRCs are the link's (SkipCRC), and the checksums it
// stores are the blocks' (Open, resuming, keeps every block written).
func TestBlockSumsFromFrames(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("SkipCRC=%v", skip), func(t *testing.T) {
			dst := t.TempDir()
			data := randomBytes(300*1464+17, 5)
			s := sourceOf(t, data, "img", OpenSource)
			sink := &keepSink{Dir: &Dir{Root: dst}}
			sender, r := pairCore(t, 1, nil), pairCore(t, 2, sink)
			if skip {
				r.SkipCRC()
			}
			if _, err := sender.Send(1, s.Outgoing(nil)); err != nil {
				t.Fatal(err)
			}
			l := &coreLink{t: t, sender: sender, r: r, parse: frame.ParseGroup}
			if skip {
				l.parse = frame.ParseGroupNoCRC // the link's CRC
			}
			verdict := l.run(nil)
			if verdict == nil || !verdict.OK() {
				t.Fatalf("verdict %v", verdict)
			}
			if got, err := os.ReadFile(filepath.Join(dst, "img")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("stored %d bytes (%v), want the %d sent", len(got), err, len(data))
			}
			if len(sink.opened) != 1 {
				t.Fatalf("%d partial copies opened, want 1", len(sink.opened))
			}
			want := int64(0)
			if skip {
				want = int64(len(data))
			}
			if got := sink.opened[0].crcBytes; got != want {
				t.Errorf("the store computed the CRC-32C of %d bytes, want %d", got, want)
			}
		})
	}
}

// TestWriteBlockSumResumes: blocks written with the CRCs the core gives
// are held after a restart, and a block whose given CRC is not its
// bytes' is fetched again.
func TestWriteBlockSumResumes(t *testing.T) {
	data := randomBytes(40*64+17, 6)
	m := meta("f", data, 64)
	d := &Dir{Root: t.TempDir()}
	f, _, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	p := f.(*partial)
	for b := range m.Blocks() {
		blk := data[int(b)*64 : int(b)*64+m.BlockLen(b)]
		crc := crc32.Checksum(blk, castagnoli)
		if b == 7 {
			crc ^= 1
		}
		if err := p.WriteBlockSum(b, blk, crc); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	if p.crcBytes != 0 {
		t.Errorf("WriteBlockSum computed the CRC-32C of %d bytes", p.crcBytes)
	}
	p.Abort(true)
	_, held, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	want := []frame.Range{{First: 0, Last: 6}, {First: 8, Last: m.Blocks() - 1}}
	if !slices.Equal(held, want) {
		t.Errorf("held after the restart %v, want %v", held, want)
	}
}

// pair is the group of the tests that run file cores over files: member
// 1 sends, member 2 receives.
var pair = []frame.MemberInfo{{ID: 1, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Incarnation: 1}, {ID: 2, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Incarnation: 1}}

// pairCore is member self's file core in pair (group 3), storing into
// sink, at a rate that paces nothing.
func pairCore(t *testing.T, self frame.MemberID, sink files.Sink) *files.Core {
	t.Helper()
	c, err := files.New(files.Config{Group: 3, Self: self, Members: pair, Sink: sink, Rate: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// coreLink runs a sender's and a receiver's file cores (pair's members)
// over a lossless in-memory exchange, 10 µs a round: the sender ticks
// and its frames reach the receiver, then the receiver ticks and its
// frames reach the sender. parse reads a frame (frame.ParseGroup, or
// ParseGroupNoCRC where the link checks the CRC); toReceiver, if set,
// sees each frame on its way to the receiver and drops it by returning
// false. reports gathers both cores' reports but the verdict, in order.
type coreLink struct {
	t          *testing.T
	sender, r  *files.Core
	parse      func([]byte, uint32) (frame.View, error)
	toReceiver func(v frame.View) bool
	now        clock.Time
	verdict    *files.Report
	reports    []files.Report
}

// run exchanges rounds until the sender reports its verdict (at most
// 100 000 rounds), calling after, if set, after each, and returns it.
func (l *coreLink) run(after func()) *files.Report {
	l.now = clock.Time(1)
	for i := 0; l.verdict == nil && i < 100_000; i++ {
		l.now += clock.Time(10 * clock.Microsecond)
		l.sender.Tick(l.now)
		l.exchange(l.sender, l.r, pair[0].MAC, pair[1].MAC, l.toReceiver)
		l.r.Tick(l.now)
		l.exchange(l.r, l.sender, pair[1].MAC, pair[0].MAC, nil)
		if after != nil {
			after()
		}
	}
	return l.verdict
}

func (l *coreLink) exchange(from, to *files.Core, fromMAC, toMAC [6]byte, keep func(frame.View) bool) {
	for _, f := range from.Ready().Frames {
		_, body, _ := frame.SplitEthernet(f, frame.EtherType)
		v, err := l.parse(body, 3)
		if err != nil {
			l.t.Fatal(err)
		}
		if keep == nil || keep(v) {
			to.Step(l.now, fromMAC, toMAC, v)
		}
	}
	for _, rep := range from.Reports() {
		if rep.Kind == files.Verdict {
			l.verdict = &rep
		} else {
			l.reports = append(l.reports, rep)
		}
	}
	from.Advance()
}

// An offer the directory cannot hold is refused at Open, before any
// block, naming the limit the core tells the sender: a file larger than
// the room left (less KeepFree) is files.ErrNoSpace, a name with a
// component longer than the file system takes files.ErrNameTooLong.
// Neither leaves a partial copy. A resumed copy needs only what it
// lacks, and a file stored already needs no room.
func TestOpenLimits(t *testing.T) {
	root := t.TempDir()
	var fsys unix.Statfs_t
	if err := unix.Statfs(root, &fsys); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(4<<20, 3)
	m := meta("big.bin", data, 1<<15)

	d := &Dir{Root: root, KeepFree: 1 << 62} // leaves no room for a byte
	if _, _, err := d.Open(m); !errors.Is(err, files.ErrNoSpace) || !strings.Contains(err.Error(), "big.bin needs 4194304 bytes more") {
		t.Fatalf("Open with no room: %v, want ErrNoSpace naming the need", err)
	}
	if _, err := os.Stat(filepath.Join(root, PartialDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused file left the partial directory: %v", err)
	}

	long := strings.Repeat("n", int(max(fsys.Namelen, 255))+1)
	if _, _, err := (&Dir{Root: root}).Open(meta("dir/"+long, data, 1000)); !errors.Is(err, files.ErrNameTooLong) {
		t.Fatalf("Open of a name with a component of %d bytes: %v, want ErrNameTooLong", len(long), err)
	}
	deep := strings.Repeat("d/", unix.PathMax/2) + "f"
	if _, _, err := (&Dir{Root: root}).Open(meta(deep, data, 1000)); !errors.Is(err, files.ErrNameTooLong) {
		t.Fatalf("Open of a name of %d bytes: %v, want ErrNameTooLong", len(deep), err)
	}

	// Half the file written (2 MiB), then a KeepFree that leaves room
	// for 3 MiB: the resume is taken; for 1 MiB: refused. (The margins
	// allow for other processes writing to the file system meanwhile.)
	f, _, err := (&Dir{Root: root}).Open(m)
	if err != nil {
		t.Fatal(err)
	}
	for b := range uint32(64) {
		if err := f.WriteBlock(b, data[b<<15:(b+1)<<15]); err != nil {
			t.Fatal(err)
		}
	}
	f.(*partial).flush()
	f.(*partial).close()
	unix.Statfs(root, &fsys)
	free := fsys.Bavail * uint64(fsys.Frsize)
	if free < 4<<20 {
		t.Skipf("%d bytes free under %s: too few to test a resume's room", free, root)
	}
	if _, _, err := (&Dir{Root: root, KeepFree: free - 3<<20}).Open(m); err != nil {
		t.Fatalf("a resume that fits the room left: %v", err)
	}
	if _, _, err := (&Dir{Root: root, KeepFree: free - 1<<20}).Open(m); !errors.Is(err, files.ErrNoSpace) {
		t.Fatalf("a resume that does not fit: %v, want ErrNoSpace", err)
	}
}

// A root not made yet (an -inbox that Open will make) has its room
// checked on the file system it will be made on: a file that does not
// fit is refused there too, and nothing is made.
func TestOpenLimitsRootNotYet(t *testing.T) {
	root := filepath.Join(t.TempDir(), "inbox", "new")
	data := randomBytes(1<<20, 4)
	if _, _, err := (&Dir{Root: root, KeepFree: 1 << 62}).Open(meta("big.bin", data, 1<<15)); !errors.Is(err, files.ErrNoSpace) {
		t.Fatalf("Open under a root not there yet, with no room: %v, want ErrNoSpace", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused file made the root: %v", err)
	}
}

// writeCounter counts the Writes into a hash and their bytes.
type writeCounter struct {
	hash.Hash
	writes, bytes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	w.bytes += len(p)
	return w.Hash.Write(p)
}

// The prefix hash takes the blocks that arrive in order from the run, a
// run's bytes in one Write as the run is written (BLAKE3's hasher copied
// nearly every byte of a block-sized Write into its own buffer first):
// 22 runs of 4 blocks and a last of 3 (the short block among them), 23
// Writes where there were 91, one per block. With blocks lost and
// repaired — soon, into the run's holes or alone behind it; or after the
// pass, each repair starting a run of its own that the prefix hash takes
// up, the blocks after it then read from memory or the file — the hash is
// still the file's, of either algorithm.
func TestPrefixHashFromRun(t *testing.T) {
	defer func(n int) { runBytes = n }(runBytes)
	runBytes = 4 * 1000
	data := randomBytes(90*1000+123, 23)
	for _, alg := range []frame.FileHashAlg{frame.FileHashSHA256, frame.FileHashBLAKE3} {
		for _, repair := range []string{"none", "soon", "late"} {
			t.Run(fmt.Sprintf("%v/%s", alg, repair), func(t *testing.T) {
				m := meta("f", data, 1000)
				m.HashAlg = alg
				m.Hash, _ = files.Sum(alg, data)
				block := func(b uint32) []byte { return data[int(b)*1000 : int(b)*1000+m.BlockLen(b)] }
				lost := func(b uint32) bool { return repair != "none" && (b%9 == 2 || b == 30 || b == 31) }
				f, _, err := (&Dir{Root: t.TempDir()}).Open(m)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Abort(false)
				p := f.(*partial)
				wc := &writeCounter{Hash: p.h}
				p.h = wc
				write := func(b uint32) {
					t.Helper()
					if err := f.WriteBlock(b, block(b)); err != nil {
						t.Fatal(err)
					}
				}
				for b := range m.Blocks() {
					if !lost(b) {
						write(b)
					}
					if repair == "soon" && b >= 3 && lost(b-3) {
						write(b - 3)
					}
				}
				if err := p.flush(); err != nil { // the pass's last run written
					t.Fatal(err)
				}
				for b := range m.Blocks() {
					if repair == "late" && lost(b) {
						write(b)
					}
				}
				if sum, err := f.Sum(); err != nil || sum != m.Hash {
					t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
				}
				if wc.bytes != len(data) {
					t.Fatalf("the hash took %d bytes of the file's %d", wc.bytes, len(data))
				}
				if repair == "none" && wc.writes != 23 {
					t.Fatalf("the hash took the file in %d Writes, want 23 (one per run)", wc.writes)
				}
			})
		}
	}
}

// Repairs of a burst of lost blocks (a ring that overflowed), coming
// behind the run in order among the pass's blocks, are gathered and
// written together, a quarter of a run at a time: 40 repairs in 2
// gatherings, 4 writes where each written alone made 80. The copy holds
// the file's bytes and checksums (a resume holds every block), and its
// hash is the file's.
func TestBurstRepairsGathered(t *testing.T) {
	defer func(n int) { runBytes = n }(runBytes)
	const bs, n, perRun, burst = 100, 2000, 100, 40
	runBytes = perRun * bs
	data := randomBytes(n*bs, 25)
	m := meta("f", data, bs)
	block := func(b uint32) []byte { return data[int(b)*bs : int(b)*bs+bs] }
	lost := func(b uint32) bool { return b >= 500 && b < 500+burst }
	d := &Dir{Root: t.TempDir()}
	f, _, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	p := f.(*partial)
	write := func(b uint32) {
		t.Helper()
		if err := f.WriteBlock(b, block(b)); err != nil {
			t.Fatal(err)
		}
	}
	for b := range uint32(n) {
		if !lost(b) {
			write(b)
		}
		if b >= 700 && b < 700+burst { // the repairs, one after each pass block
			write(b - 200)
		}
	}
	before := p.writes
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	// Two writes a run of the pass (its holes' zeros among them), two a
	// gathering of repairs.
	runs := n / perRun
	if want := 2*runs + 2*2; p.writes != want {
		t.Errorf("%d writes (%d before the last run) for %d blocks in runs of %d and %d repairs in order: want %d", p.writes, before, n, perRun, burst, want)
	}
	p.close()
	got, err := os.ReadFile(p.path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy: %d bytes, equal %v, %v", len(got), bytes.Equal(got, data), err)
	}
	f, held, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort(false)
	if len(held) != 1 || held[0] != (frame.Range{First: 0, Last: n - 1}) {
		t.Fatalf("resumed holding %v, want every block", held)
	}
}

// Past a gap in the prefix hash, the blocks no memory holds (beyond
// aheadBytes) are read back from the file readBatch at a time when the
// gap is repaired: block 0 lost, blocks 1..4 kept in memory, the other 195
// read with 7 reads where each block had one. The hash is the file's.
func TestReadBackBatched(t *testing.T) {
	defer func(n, a int) { runBytes, aheadBytes = n, a }(runBytes, aheadBytes)
	const bs, n = 100, 200
	runBytes, aheadBytes = 10*bs, 5*bs
	data := randomBytes(n*bs, 26)
	m := meta("f", data, bs)
	f, _, err := (&Dir{Root: t.TempDir()}).Open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort(false)
	p := f.(*partial)
	for b := uint32(1); b < n; b++ {
		if err := f.WriteBlock(b, data[b*bs:(b+1)*bs]); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteBlock(0, data[:bs]); err != nil {
		t.Fatal(err)
	}
	if sum, err := f.Sum(); err != nil || sum != m.Hash {
		t.Fatalf("Sum = %x, %v; want %x", sum, err, m.Hash)
	}
	if p.reads != 7 {
		t.Fatalf("%d reads of the file to hash the 195 blocks past the gap no memory holds, want 7 (%d at a time)", p.reads, readBatch)
	}
}
