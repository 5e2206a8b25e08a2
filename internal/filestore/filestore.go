// Package filestore is the file core's storage over a directory
// (reliable/files: its Sink, and the Source of a file to send): what
// rbcastd recvfile -dir and run -inbox store into, and sendfile reads.
//
// A received file is written to a partial copy under DIR/.rbcast-partial,
// with the CRC-32C of each block stored beside it as the block is
// written (blocks are gathered and written a run at a time). A restarted
// receiver resumes from the partial copy: Open re-reads each block and
// keeps only those whose checksum still matches, so a block torn by a
// crash, or never written, is fetched again. Once every block is there
// the whole file is hashed; only a file whose hash is its offer's is
// fsynced and renamed to its name (never a partial file under the real
// name), and the directory fsynced.
//
// A file it stored has a record under DIR/.rbcast-partial/stored: its
// hash and the hash's algorithm, and its size, inode and change times as
// stat shows them, so that
// an offer of a file stored already is matched without reading the file
// (an offer without a hash is matched at FileEnd against the recorded
// hash); a file changed since (other times or inode) has no record.
package filestore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
)

// PartialDir is where partial copies live, under the store's root.
const PartialDir = ".rbcast-partial"

// Dir stores received files under Root.
type Dir struct {
	Root string
	// Accept, if set, decides whether to receive a file (false: the core
	// declines it, files.ErrDeclined).
	Accept func(files.Meta) bool
	// KeepFree is the bytes Open leaves free on Root's file system: a
	// file that would leave less is refused for no room (files.ErrNoSpace)
	// before any block of it is sent here.
	KeepFree uint64
	// DropWritten takes a copy's written prefix out of the page cache as
	// the copy is written (dropWritten), so that its writes reuse the
	// pages it gave back: on a guest whose balloon reports free pages to
	// its host, a write into pages not used lately cost the writer 5 to 7
	// times the CPU in loaded runs (docs/protocols.md, "A copy's pages
	// given back as it is written"). Off by default: idle it gained
	// nothing beyond noise and lost at 5 % loss, and a program that reads
	// the file at once finds it in memory; set, it reads all but the last
	// few MiB from the disk.
	DropWritten bool
}

var _ files.Sink = (*Dir)(nil)

// CheckName reports whether name may be stored under a root: a local
// path (no "..", not absolute, not empty), not the root itself (".",
// "a/..": filepath.IsLocal accepts them, and storing one fails only at
// the rename, once the whole file has come), not under PartialDir. Its
// errors wrap files.ErrBadName: Open's refuse such an offer, and the
// sender is told (FileStatus reason 13).
func CheckName(name string) error {
	if !filepath.IsLocal(name) || strings.ContainsRune(name, 0) {
		return refusal(files.ErrBadName, "name %q is not a local relative path", name)
	}
	clean := filepath.ToSlash(filepath.Clean(name))
	if clean == "." {
		return refusal(files.ErrBadName, "name %q names the root itself, not a file under it", name)
	}
	if first, _, _ := strings.Cut(clean, "/"); first == PartialDir {
		return refusal(files.ErrBadName, "name %q is under %s, where partial copies live", name, PartialDir)
	}
	return nil
}

// checkNameLen refuses a name the file system under the root cannot
// store (files.ErrNameTooLong): a component longer than it takes, or a
// path longer than PATH_MAX. Checked at the offer: a partial copy's name
// is a hash, so such a name would otherwise fail only at the rename, once
// every block had come.
func (d *Dir) checkNameLen(name string, fsys *unix.Statfs_t) error {
	max := int(fsys.Namelen)
	if max <= 0 {
		max = 255
	}
	for _, c := range strings.Split(filepath.ToSlash(filepath.Clean(name)), "/") {
		if len(c) > max {
			return refusal(files.ErrNameTooLong, "name %q has a component of %d bytes, more than the %d the file system under %s takes", name, len(c), max, d.Root)
		}
	}
	if n := len(filepath.Join(d.Root, filepath.FromSlash(name))); n >= unix.PathMax {
		return refusal(files.ErrNameTooLong, "name %q makes a path of %d bytes under %s, more than PATH_MAX %d", name, n, d.Root, unix.PathMax-1)
	}
	return nil
}

// checkRoom refuses a file that does not fit the room left on the file
// system under the root, less KeepFree (files.ErrNoSpace): its size less
// what its partial copy at part holds already. Checked at the offer, so
// that a full disk is said to the sender before any block is sent
// rather than as a storage failure mid-file.
func (d *Dir) checkRoom(m files.Meta, part string, fsys *unix.Statfs_t) error {
	need := m.Size
	var st unix.Stat_t
	if unix.Stat(part, &st) == nil {
		need -= min(need, uint64(st.Blocks)*512)
	}
	// Bavail counts fragments (f_frsize, POSIX), which some file systems
	// (FUSE, some network ones) make smaller than Bsize.
	unit := uint64(fsys.Frsize)
	if unit == 0 {
		unit = uint64(fsys.Bsize)
	}
	free := fsys.Bavail * unit
	if need == 0 || unit == 0 || need+d.KeepFree <= free && need+d.KeepFree >= need {
		return nil
	}
	return refusal(files.ErrNoSpace, "%s needs %d bytes more under %s, which has %d free (%d kept free)", m.Name, need, d.Root, free, d.KeepFree)
}

// statfsUp is statfs of dir, or of the nearest directory above it that
// exists (the file system dir will be made on).
func statfsUp(dir string, fsys *unix.Statfs_t) {
	for {
		err := unix.Statfs(dir, fsys)
		up := filepath.Dir(dir)
		if err != unix.ENOENT || up == dir {
			return
		}
		dir = up
	}
}

// partialKey names a transfer's partial copy by what identifies the file
// (not the transfer), so a new offer of the same file resumes it.
//
// An offer whose hash is zeros (the sender sends it in FileEnd) is keyed
// by its sender too, so that two senders' files of one name and size at
// once do not share a copy; another file of the same name and size from
// the same sender resumes the copy, and the hash check at the end finds
// it and fetches every block again.
//
// A file hashed with another algorithm than SHA-256 is keyed by it too
// (a SHA-256 file's key is what it was before algorithms had names).
func partialKey(m files.Meta) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00", m.Name, m.Size, m.BlockSize)
	h.Write(m.Hash[:])
	if m.Hash == ([frame.FileHashLen]byte{}) {
		fmt.Fprintf(h, "\x00sender %d", m.Sender)
	}
	if alg := hashAlg(m.HashAlg); alg != frame.FileHashSHA256 {
		fmt.Fprintf(h, "\x00%v", alg)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// hashAlg is a, 0 being SHA-256 (files.Meta).
func hashAlg(a frame.FileHashAlg) frame.FileHashAlg {
	if a == 0 {
		return frame.FileHashSHA256
	}
	return a
}

// Open opens or resumes the partial copy of m (files.Sink).
func (d *Dir) Open(m files.Meta) (files.SinkFile, []frame.Range, error) {
	if d.Accept != nil && !d.Accept(m) {
		return nil, nil, files.ErrDeclined
	}
	if err := CheckName(m.Name); err != nil {
		return nil, nil, err
	}
	// The root's file system: its longest name and room left. A root not
	// there yet (Open makes it) is on the file system of the nearest
	// directory above it that is; zeros, which check only PATH_MAX and
	// NAME_MAX and no room, if statfs fails otherwise.
	var fsys unix.Statfs_t
	statfsUp(d.Root, &fsys)
	if err := d.checkNameLen(m.Name, &fsys); err != nil {
		return nil, nil, err
	}
	m.HashAlg = hashAlg(m.HashAlg)
	h, err := files.NewHash(m.HashAlg)
	if err != nil {
		return nil, nil, fmt.Errorf("storing %q: %w", m.Name, err)
	}
	final := filepath.Join(d.Root, filepath.FromSlash(m.Name))
	rec := d.recordPath(m.Name)
	if id, ok := statFile(final, m.Size); ok {
		var held []frame.Range
		if n := m.Blocks(); n > 0 {
			held = []frame.Range{{First: 0, Last: n - 1}}
		}
		sum, known := readRecord(rec, m.Name, id, m.HashAlg)
		if m.Hash == ([frame.FileHashLen]byte{}) {
			// The hash comes in FileEnd: the file stored under the name,
			// of the size, is a candidate; the core checks its Sum (the
			// recorded hash, else the file read once) against FileEnd's
			// and opens the transfer again under that hash if they
			// differ.
			return &partial{meta: m, final: final, record: rec, stored: true, sum: sum, summed: known}, held, nil
		}
		if !known {
			var err error
			if sum, err = hashFile(final, m.Size, m.HashAlg); err == nil {
				writeRecord(rec, m.Name, final, m.HashAlg, sum)
			}
			known = err == nil
		}
		if known && sum == m.Hash {
			// Stored already (a restart after the commit, or the file
			// sent again): every block is held, and Commit has nothing
			// to rename.
			return &partial{meta: m, final: final, record: rec, stored: true, sum: sum, summed: true}, held, nil
		}
	}
	if m.Size > math.MaxInt64 {
		return nil, nil, refusal(files.ErrTooBigForFS, "%s is %d bytes, more than any file may hold (2⁶³−1)", m.Name, m.Size)
	}
	dir := filepath.Join(d.Root, PartialDir)
	base := filepath.Join(dir, partialKey(m))
	if err := d.checkRoom(m, base+".part", &fsys); err != nil {
		return nil, nil, err
	}
	made, err := mkdirAll(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("storing %q: %w", m.Name, err)
	}
	p := &partial{meta: m, final: final, record: rec, path: base + ".part", sums: base + sumsSuffix, h: h, held: make([]uint64, (m.Blocks()+63)/64), drop: d.DropWritten}
	_, err = os.Lstat(p.path)
	newCopy := errors.Is(err, fs.ErrNotExist)
	if p.data, err = os.OpenFile(p.path, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, nil, fmt.Errorf("storing %q: %w", m.Name, err)
	}
	if p.hashes, err = os.OpenFile(p.sums, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		p.data.Close()
		return nil, nil, fmt.Errorf("storing %q: %w", m.Name, err)
	}
	// Sizing the copy is the exact check that the file system takes a
	// file this large (its largest file: ext4's 16 TiB, FAT's 4 GiB) and
	// that the process may make one (RLIMIT_FSIZE; Go ignores SIGXFSZ):
	// EFBIG, or EINVAL ("larger than the maximum file size", POSIX).
	if err := p.data.Truncate(int64(m.Size)); err != nil {
		p.close()
		if !errors.Is(err, unix.EFBIG) && !errors.Is(err, unix.EINVAL) {
			return nil, nil, fmt.Errorf("storing %q: sizing its copy %s: %w", m.Name, p.path, err)
		}
		if newCopy { // refused: what this offer made goes
			os.Remove(p.path)
			os.Remove(p.sums)
			for _, m := range made {
				os.Remove(m)
			}
		}
		var lim unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_FSIZE, &lim) == nil && lim.Cur != unix.RLIM_INFINITY && m.Size > lim.Cur {
			return nil, nil, refusal(files.ErrTooBigForFS, "%s is %d bytes, more than this process may write to a file (RLIMIT_FSIZE %d)", m.Name, m.Size, lim.Cur)
		}
		return nil, nil, refusal(files.ErrTooBigForFS, "%s is %d bytes, more than the file system under %s allows a file to be (%v)", m.Name, m.Size, d.Root, err)
	}
	held, err := p.verify()
	if err != nil {
		p.close()
		return nil, nil, err
	}
	return p, held, nil
}

// mkdirAll is os.MkdirAll(dir, 0o755) that also returns the directories
// it made, deepest first: a refused offer removes them (Open), the root
// too where the first offer makes it (an -inbox not there yet).
func mkdirAll(dir string) ([]string, error) {
	var made []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		made = append(made, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	return made, os.MkdirAll(dir, 0o755)
}

// sumsSuffix names the file of per-block checksums beside a partial copy:
// a CRC-32C per block, 4 bytes big-endian, 0 for a block never written.
// (The per-block SHA-256 it replaced, in ".blocks" files, cost as much
// CPU as the rest of the receiver: the whole file's SHA-256 is the
// integrity check, a block's checksum only finds what a crash tore.)
const sumsSuffix = ".crc32c"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockSum is a block's checksum as stored; never 0, which means not
// written.
func blockSum(data []byte) uint32 { return storedSum(crc32.Checksum(data, castagnoli)) }

// storedSum is a block's checksum as stored from its CRC-32C.
func storedSum(crc uint32) uint32 {
	if crc != 0 {
		return crc
	}
	return 1
}

// partial is one file being received.
//
// It hashes the file as it goes (the prefix hash): blocks 0..hashed-1 are
// in h, and each block written at the end of that prefix advances it,
// reading the blocks already held after it (a bounded number per write),
// so that Sum, which the core calls on its event loop once every block is
// there, hashes only what is left. Written blocks' data is pushed to the
// disk in the background every writeBehind bytes, and flushed to it (an
// fdatasync on a goroutine of its own) every flushBehind bytes, so that
// Commit's fsync has little left to write or to flush. Both keep the
// loop from stalling for seconds on a large file (a sender counts a
// silent receiver as failed).
//
// Blocks that arrive in order are gathered in run (up to runBytes) and
// written with one write for the data and one for their checksums: two
// small writes per block cost the receiver more than everything else it
// does (docs/benchmarks-history.md, "Files: the table before the changes,
// machine B idle, 2026-11-28 12:43–13:09 UTC, and where the time went
// (loaded)"). A block is held
// once it is in the run; a crash loses the run, and the resume fetches it
// again.
type partial struct {
	meta         files.Meta
	final        string
	record       string // where the record of the stored file goes
	path, sums   string
	data, hashes *os.File
	// stored: the final file exists, with the offer's hash, or, for an
	// offer without one, of the offer's size (a candidate).
	stored bool
	// sum is the file's hash once known (Sum, or the stored file's).
	sum    [frame.FileHashLen]byte
	summed bool
	buf    []byte

	h      hash.Hash
	hashed uint32 // blocks in the prefix hash, from block 0
	// inH: blocks 0..inH-1 are written into h; blocks inH..hashed-1 of
	// the prefix are in the run, not yet (hashPending writes them with
	// one Write of the run's bytes, before the run is written or h
	// summed). The hash takes a run's bytes in one piece: written a
	// block at a time, BLAKE3 (zeebo's) copied nearly every byte into
	// its own buffer first, blocks not falling on its 8 KiB chunks.
	inH   uint32
	held  []uint64 // blocks written or verified, one bit each
	dirty int64    // bytes written since the last write-behind
	// wroteOut is the prefix (bytes of blocks 0..hashed-1, whose writeback
	// the write-behind started) at the last write-behind, outBefore the
	// one at the write-behind before it; dropFrom, where the last
	// dropWritten's range began. drop: dropWritten on (Dir's DropWritten).
	wroteOut, outBefore, dropFrom int64
	drop                          bool
	writes                        int   // writes to the file and its checksums (tests)
	reads                         int   // reads of the file to advance the prefix hash (tests)
	crcBytes                      int64 // bytes WriteBlock computed a CRC-32C of (tests)

	// unflushed counts the bytes written since the last background flush
	// started; flushing is closed when the one in flight ends (nil: none
	// started), and flushErr is the first error one returned (read once
	// flushing is closed): an error reported to a flush is not reported
	// to Commit's fsync again, so Commit fails on it.
	unflushed int64
	flushing  chan struct{}
	flushErr  error
	flushes   int // background flushes started (tests)

	// run is blocks runFirst..runFirst+runN-1 not written to the file
	// yet, back to back (holes among them zeros); runSums their
	// checksums as stored (a hole's zero).
	run      []byte
	runSums  []byte
	runFirst uint32
	runN     uint32

	// rep is blocks repFirst..repFirst+repN-1, repairs that came behind
	// the run (below runFirst, the run not empty), one after another, not
	// written to the file yet; repSums their checksums. A ring that
	// overflows loses blocks in bursts, and their repairs come in order:
	// each written alone cost two pwrites a block. flush writes rep
	// first; rep holds at most repBytes.
	rep      []byte
	repSums  []byte
	repFirst uint32
	repN     uint32

	// ahead keeps the blocks written past a gap in the prefix hash, so
	// that advance hashes them from memory once the gap is repaired
	// instead of reading each back from the file: block b, if within
	// aheadBytes of the prefix, is in slot b mod len(aheadTag) when
	// aheadTag of that slot is b (made at the first such block).
	ahead    []byte
	aheadTag []uint32
}

// catchUp bounds the held blocks read to advance the prefix hash on one
// write; writeBehind is the bytes written between two write-behinds.
const (
	catchUp     = 256
	writeBehind = 8 << 20
)

// flushBehind is the bytes written between two background flushes of a
// copy (a variable: tests shrink it). A flush makes the disk hold what
// was written so far while the copy is still being written, so that
// Commit's fsync is left with what came since the last one, not with the
// whole file (docs/protocols.md, "A copy flushed as it is written").
var flushBehind int64 = 32 << 20

// datasync flushes f's data to the disk (a variable: tests count it).
var datasync = func(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) {
		for err = unix.Fdatasync(int(fd)); err == unix.EINTR; err = unix.Fdatasync(int(fd)) {
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// runBytes is the most a run gathers before it is written (a variable:
// tests shrink it).
var runBytes = 1 << 20

// repBytes is the most rep (repairs behind the run) gathers before it is
// written: a quarter of a run.
func repBytes() int { return runBytes / 4 }

// bufPool keeps up to max buffers of closed partial copies for the next
// ones. A fresh buffer costs a page fault per 4 KiB page on first touch
// once the Go runtime has given a freed one's pages back to the kernel:
// a 1 MiB run 256 faults a file, about 10 ms on machine D (a PVM guest:
// 40 µs a fault), a 16 MiB ahead up to 4096 a lossy file.
type bufPool struct {
	mu   sync.Mutex
	max  int
	bufs [][]byte
}

// take returns a kept buffer of capacity n or more, emptied, or nil.
func (bp *bufPool) take(n int) []byte {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for i := len(bp.bufs) - 1; i >= 0; i-- {
		if b := bp.bufs[i]; cap(b) >= n {
			bp.bufs = slices.Delete(bp.bufs, i, i+1)
			return b[:0]
		}
	}
	return nil
}

// give keeps b, a closed partial copy's buffer, for take: in a free
// place, or in the place of the smallest kept buffer if b is larger (a
// small file's buffer does not stand in a large one's way).
func (bp *bufPool) give(b []byte) {
	if cap(b) == 0 {
		return
	}
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if len(bp.bufs) < bp.max {
		bp.bufs = append(bp.bufs, b[:0])
		return
	}
	small := -1
	for i, k := range bp.bufs {
		if cap(k) < cap(b) && (small < 0 || cap(k) < cap(bp.bufs[small])) {
			small = i
		}
	}
	if small >= 0 {
		bp.bufs[small] = b[:0]
	}
}

// freeRuns keeps run buffers (partial.run) for as many files as a daemon
// receives at once; freeAheads one buffer of blocks past a gap
// (partial.ahead, up to aheadBytes), which only a lossy file makes.
var (
	freeRuns   = bufPool{max: 4}
	freeAheads = bufPool{max: 1}
	// freeReps keeps buffers of repairs behind the run (partial.rep),
	// which only a lossy file makes.
	freeReps = bufPool{max: 2}
)

// takeRun returns an empty run buffer of capacity n or more: a kept one,
// or a new one.
func takeRun(n int) []byte {
	if b := freeRuns.take(n); b != nil {
		return b
	}
	return make([]byte, 0, n)
}

// aheadBytes bounds the blocks past a gap in the prefix hash that a
// partial keeps in memory (partial.ahead; at most the file's size): at
// 5 % loss the gap at the prefix is repaired a round trip or a few
// later, when a few MB have arrived after it. A variable: tests shrink
// it.
var aheadBytes = 16 << 20

// noBlock tags an empty slot of partial.ahead.
const noBlock = ^uint32(0)

// keepAhead keeps block b, written past the prefix hash, in memory if it
// fits ahead's span; else it makes sure no older copy of b is there.
func (p *partial) keepAhead(b uint32, data []byte) {
	bs := uint64(p.meta.BlockSize)
	if p.aheadTag == nil {
		slots := (min(uint64(aheadBytes), max(p.meta.Size, bs)) + bs - 1) / bs
		if slots == 0 || uint64(b-p.hashed) >= slots {
			return
		}
		if p.ahead = freeAheads.take(int(slots * bs)); p.ahead == nil {
			p.ahead = make([]byte, slots*bs)
		}
		p.ahead = p.ahead[:slots*bs]
		p.aheadTag = make([]uint32, slots)
		for i := range p.aheadTag {
			p.aheadTag[i] = noBlock
		}
	}
	slots := uint32(len(p.aheadTag))
	i := b % slots
	if b-p.hashed >= slots {
		if p.aheadTag[i] == b {
			p.aheadTag[i] = noBlock
		}
		return
	}
	copy(p.ahead[uint64(i)*bs:], data)
	p.aheadTag[i] = b
}

func (p *partial) hold(b uint32) { p.held[b/64] |= 1 << (b % 64) }

func (p *partial) holds(b uint32) bool { return p.held[b/64]&(1<<(b%64)) != 0 }

// advance extends the prefix hash over held blocks, at most n reads of
// the file (a block passed in data is not read).
func (p *partial) advance(n int) error {
	for p.hashed < p.meta.Blocks() && p.holds(p.hashed) && n > 0 {
		n--
		if p.inRun(p.hashed) {
			p.hashed++ // pending: hashed from the run (hashPending)
			continue
		}
		if blk, ok := p.inMemory(p.hashed); ok {
			p.hashNext(blk)
			continue
		}
		// From the file: this block and the held ones after it that no
		// memory holds, up to readBatch, with one read.
		first, k := p.hashed, uint32(1)
		for k < readBatch && n > 0 && first+k < p.meta.Blocks() && p.holds(first+k) && !p.inRun(first+k) {
			if _, ok := p.inMemory(first + k); ok {
				break
			}
			k++
			n--
		}
		bs := uint64(p.meta.BlockSize)
		l := (uint64(k)-1)*bs + uint64(p.meta.BlockLen(first+k-1))
		if uint64(cap(p.buf)) < l {
			p.buf = make([]byte, uint64(min(readBatch, p.meta.Blocks()))*bs)
		}
		p.reads++
		if _, err := p.data.ReadAt(p.buf[:l], int64(first)*int64(bs)); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading the copy of %q: %w", p.meta.Name, err)
		}
		p.hashPending()
		p.h.Write(p.buf[:l])
		p.hashed += k
		p.inH = p.hashed
	}
	return nil
}

// readBatch bounds the held blocks after a gap in the prefix hash that
// advance reads back from the file with one read (those no memory holds:
// past aheadBytes).
const readBatch = 32

// inMemory returns block b's bytes if the run, the repairs gathered
// behind it or the blocks kept past a gap hold it.
func (p *partial) inMemory(b uint32) ([]byte, bool) {
	l := uint64(p.meta.BlockLen(b))
	bs := uint64(p.meta.BlockSize)
	switch {
	case p.inRun(b):
		off := uint64(b-p.runFirst) * bs
		return p.run[off : off+l], true
	case p.repN > 0 && b >= p.repFirst && b-p.repFirst < p.repN:
		off := uint64(b-p.repFirst) * bs
		return p.rep[off : off+l], true
	}
	if n := uint32(len(p.aheadTag)); n > 0 && p.aheadTag[b%n] == b {
		off := uint64(b%n) * bs
		return p.ahead[off : off+l], true
	}
	return nil, false
}

// inRun reports whether block b is in the run.
func (p *partial) inRun(b uint32) bool { return b >= p.runFirst && b-p.runFirst < p.runN }

// hashNext adds data, block hashed, to the prefix hash now, after the
// blocks pending before it.
func (p *partial) hashNext(data []byte) {
	p.hashPending()
	p.h.Write(data)
	p.hashed++
	p.inH = p.hashed
}

// hashPending writes the prefix's blocks still in the run (inH..hashed-1)
// into h, in one piece.
func (p *partial) hashPending() {
	if p.inH >= p.hashed {
		return
	}
	bs := uint64(p.meta.BlockSize)
	from := uint64(p.inH-p.runFirst) * bs
	to := uint64(p.hashed-1-p.runFirst)*bs + uint64(p.meta.BlockLen(p.hashed-1))
	p.h.Write(p.run[from:to])
	p.inH = p.hashed
}

// flush writes the run: its data, then its checksums (a crash between
// the two leaves blocks that no checksum vouches for).
func (p *partial) flush() error {
	if err := p.flushRep(); err != nil {
		return err
	}
	if p.runN == 0 {
		return nil
	}
	p.hashPending()
	first, n := p.runFirst, p.runN
	p.runN = 0
	p.writes += 2
	if _, err := p.data.WriteAt(p.run, int64(first)*int64(p.meta.BlockSize)); err != nil {
		return fmt.Errorf("writing blocks %d..%d of %q: %w", first, first+n-1, p.meta.Name, err)
	}
	if _, err := p.hashes.WriteAt(p.runSums, int64(first)*4); err != nil {
		return fmt.Errorf("writing the checksums of blocks %d..%d of %q: %w", first, first+n-1, p.meta.Name, err)
	}
	p.wrote(len(p.run))
	p.run, p.runSums = p.run[:0], p.runSums[:0]
	return nil
}

// wrote counts n bytes written to the file: every writeBehind bytes it
// starts writing what is dirty, every flushBehind bytes it starts a
// flush on a goroutine (if the one before has ended); it waits for
// neither.
func (p *partial) wrote(n int) {
	if p.dirty += int64(n); p.dirty >= writeBehind {
		p.dirty = 0
		unix.SyncFileRange(int(p.data.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		if p.drop {
			p.dropWritten()
		}
	}
	if p.unflushed += int64(n); p.unflushed < flushBehind || p.flushInFlight() {
		return
	}
	p.unflushed = 0
	p.flushes++
	done, f := make(chan struct{}), p.data
	p.flushing = done
	go func() {
		defer close(done)
		if err := datasync(f); err != nil && p.flushErr == nil {
			p.flushErr = err
		}
	}()
}

// dropWritten takes the prefix written out at the last write-behind out
// of the page cache (POSIX_FADV_DONTNEED), so that the writes after it
// reuse its pages: on a guest whose balloon device reports free pages to
// the host, a write into page-cache pages the guest has not used lately
// waits for the host to back each one (docs/protocols.md, "A copy's
// pages given back as it is written"). The prefix's blocks are
// never written again (but after a hash mismatch, which starts it over)
// nor read (the prefix hash has them): their pages only fill the cache.
//
// It never waits: the kernel drops only the pages that are clean by
// then, their writeback started a write-behind (8 MiB of writes) ago and
// presumably ended; each range is tried at two write-behinds in a row,
// so a page still being written out at the first goes at the second. A
// hint only: the data is on the disk whatever the kernel keeps, and
// Commit fsyncs as before.
func (p *partial) dropWritten() {
	end := p.wroteOut &^ (pageBytes - 1)
	if end > p.dropFrom {
		dropPages(p.data, p.dropFrom, end-p.dropFrom)
	}
	p.dropFrom = p.outBefore &^ (pageBytes - 1)
	p.outBefore = p.wroteOut
	p.wroteOut = int64(p.hashed) * int64(p.meta.BlockSize)
}

// pageBytes is the page cache's page, the unit dropWritten drops.
var pageBytes = int64(os.Getpagesize())

// dropPages asks the kernel to take f's clean pages in off..off+n-1 out
// of the page cache (a variable: tests record the ranges).
var dropPages = func(f *os.File, off, n int64) {
	unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}

// flushInFlight reports whether a background flush has not ended.
func (p *partial) flushInFlight() bool {
	if p.flushing == nil {
		return false
	}
	select {
	case <-p.flushing:
		return false
	default:
		return true
	}
}

// waitFlush waits for the background flush in flight, if any, and
// returns the first error a background flush returned.
func (p *partial) waitFlush() error {
	if p.flushing != nil {
		<-p.flushing
	}
	return p.flushErr
}

// flushRep writes rep, the repairs gathered behind the run: their data,
// then their checksums.
func (p *partial) flushRep() error {
	if p.repN == 0 {
		return nil
	}
	first, n := p.repFirst, p.repN
	p.repN = 0
	p.writes += 2
	if _, err := p.data.WriteAt(p.rep, int64(first)*int64(p.meta.BlockSize)); err != nil {
		return fmt.Errorf("writing blocks %d..%d of %q: %w", first, first+n-1, p.meta.Name, err)
	}
	if _, err := p.hashes.WriteAt(p.repSums, int64(first)*4); err != nil {
		return fmt.Errorf("writing the checksums of blocks %d..%d of %q: %w", first, first+n-1, p.meta.Name, err)
	}
	p.wrote(len(p.rep))
	p.rep, p.repSums = p.rep[:0], p.repSums[:0]
	return nil
}

// behind takes block b, a repair behind the run, into rep: after the
// repairs there if it follows them and rep has room, in place if it is
// one of them; else rep is written first and b starts it again.
func (p *partial) behind(b uint32, data []byte, sum uint32) error {
	bs := int(p.meta.BlockSize)
	if p.repN > 0 && b >= p.repFirst && b < p.repFirst+p.repN {
		i := int(b - p.repFirst)
		copy(p.rep[i*bs:i*bs+len(data)], data)
		binary.BigEndian.PutUint32(p.repSums[4*i:], sum)
		return nil
	}
	if p.repN > 0 && (b != p.repFirst+p.repN || int(p.repN+1)*bs > max(repBytes(), bs)) {
		if err := p.flushRep(); err != nil {
			return err
		}
	}
	if p.repN == 0 {
		if cap(p.rep) == 0 {
			if p.rep = freeReps.take(max(repBytes(), bs)); p.rep == nil {
				p.rep = make([]byte, 0, max(repBytes(), bs))
			}
			p.repSums = make([]byte, 0, 4*(cap(p.rep)/max(1, bs)+1))
		}
		p.repFirst = b
	}
	p.rep = append(p.rep, data...)
	p.repSums = binary.BigEndian.AppendUint32(p.repSums, sum)
	p.repN++
	return nil
}

var _ files.SummedSinkFile = (*partial)(nil)

// verify returns the blocks whose stored checksum matches their bytes.
func (p *partial) verify() ([]frame.Range, error) {
	var held []frame.Range
	rec := make([]byte, 4)
	blk := make([]byte, p.meta.BlockSize)
	for b := range p.meta.Blocks() {
		if _, err := p.hashes.ReadAt(rec, int64(b)*4); err != nil {
			if errors.Is(err, io.EOF) {
				break // never written past here
			}
			return nil, fmt.Errorf("reading the copy of %q: %w", p.meta.Name, err)
		}
		want := binary.BigEndian.Uint32(rec)
		if want == 0 {
			continue
		}
		n := p.meta.BlockLen(b)
		if _, err := p.data.ReadAt(blk[:n], int64(b)*int64(p.meta.BlockSize)); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("reading the copy of %q: %w", p.meta.Name, err)
		}
		if blockSum(blk[:n]) != want {
			continue
		}
		p.hold(b)
		if b == p.hashed {
			p.hashNext(blk[:n])
		}
		if k := len(held); k > 0 && held[k-1].Last+1 == b {
			held[k-1].Last = b
		} else {
			held = append(held, frame.Range{First: b, Last: b})
		}
	}
	return held, nil
}

// WriteBlock writes block b and the checksum beside it: into the run if
// it falls within the run's room, else the run is written first and b
// starts a new one. Blocks skipped on the way (lost, repaired later) are
// holes of the run: zeros with a zero checksum (Open's verification
// counts them missing), filled in place if they come while the run is
// in memory. A block behind the run (a repair that came after its run
// was written) goes into rep, with the repairs just before it if it
// follows them (written together once one does not, rep is full, or the
// run is written), and the run goes on: a repair does not cut the
// pass's run short. Neither is fsynced: a crash may tear them,
// and Open's verification finds it. An error may be a write of earlier
// blocks of the run.
func (p *partial) WriteBlock(b uint32, data []byte) error {
	if p.stored {
		return nil
	}
	p.crcBytes += int64(len(data))
	return p.WriteBlockSum(b, data, crc32.Checksum(data, castagnoli))
}

// WriteBlockSum is WriteBlock with crc, data's CRC-32C, which the core
// took from the frame's (files.SummedSinkFile): the block's checksum
// costs no pass over its bytes. The frame's CRC guards the block from
// the sender's encoder to here; the checksum stored beside the block
// guards what the frame's cannot, the copy on the disk across a crash
// (Open's verification re-reads every block and keeps those that match).
func (p *partial) WriteBlockSum(b uint32, data []byte, crc uint32) error {
	if p.stored {
		return nil
	}
	sum := storedSum(crc)
	p.summed = false
	bs := int(p.meta.BlockSize)
	switch {
	case b < p.hashed:
		if err := p.flush(); err != nil {
			return err
		}
	case p.runN > 0 && b >= p.runFirst && b < p.runFirst+p.runN:
		// A hole of the run, or a block again: in place.
		i := int(b - p.runFirst)
		copy(p.run[i*bs:i*bs+len(data)], data)
		binary.BigEndian.PutUint32(p.runSums[4*i:], sum)
		return p.stored1(b, data)
	case p.runN > 0 && b < p.runFirst:
		if err := p.behind(b, data, sum); err != nil {
			return err
		}
		return p.stored1(b, data)
	case p.runN > 0 && (int(b-p.runFirst)*bs+len(data) > runBytes || p.heldIn(p.runFirst+p.runN, b)):
		if err := p.flush(); err != nil {
			return err
		}
	}
	if p.runN == 0 {
		if cap(p.run) == 0 {
			p.run = takeRun(max(runBytes, bs))
			p.runSums = make([]byte, 0, 4*(cap(p.run)/max(1, bs)+1))
		}
		p.runFirst = b
	}
	if holes := int(b - (p.runFirst + p.runN)); holes > 0 {
		n := len(p.run)
		p.run = slices.Grow(p.run, holes*bs)[:n+holes*bs]
		clear(p.run[n:])
		m := len(p.runSums)
		p.runSums = slices.Grow(p.runSums, 4*holes)[:m+4*holes]
		clear(p.runSums[m:])
		p.runN += uint32(holes)
	}
	p.run = append(p.run, data...)
	p.runSums = binary.BigEndian.AppendUint32(p.runSums, sum)
	p.runN++
	return p.stored1(b, data)
}

// heldIn reports whether a block of [from, to) is held: the run may not
// skip it as a hole (its zeros would overwrite it).
func (p *partial) heldIn(from, to uint32) bool {
	for x := from; x < to; x++ {
		if p.holds(x) {
			return true
		}
	}
	return false
}

// stored1 records block b, written (or in the run), in the prefix hash
// and the held blocks.
func (p *partial) stored1(b uint32, data []byte) error {
	if b < p.hashed {
		// A block written again (the core fetches every block again
		// after a hash mismatch): the prefix hash starts over.
		p.h.Reset()
		p.hashed, p.inH = 0, 0
		p.wroteOut, p.outBefore, p.dropFrom = 0, 0, 0
		for i := range p.aheadTag {
			p.aheadTag[i] = noBlock
		}
	}
	p.hold(b)
	switch {
	case b == p.hashed && p.inRun(b):
		p.hashed++ // pending: hashed from the run (hashPending)
	case b == p.hashed:
		p.hashNext(data)
	default:
		p.keepAhead(b, data)
	}
	return p.advance(catchUp)
}

// Sum hashes the partial copy. A stored file's is its record's, or the
// file is read once (and the record written).
func (p *partial) Sum() ([frame.FileHashLen]byte, error) {
	if p.summed {
		return p.sum, nil
	}
	if p.stored {
		sum, err := hashFile(p.final, p.meta.Size, p.meta.HashAlg)
		if err != nil {
			return sum, fmt.Errorf("hashing the stored %q: %w", p.meta.Name, err)
		}
		writeRecord(p.record, p.meta.Name, p.final, p.meta.HashAlg, sum)
		p.sum, p.summed = sum, true
		return sum, nil
	}
	if err := p.advance(int(p.meta.Blocks())); err != nil {
		return [32]byte{}, err
	}
	if p.hashed == p.meta.Blocks() {
		p.hashPending()
		p.sum, p.summed = [32]byte(p.h.Sum(nil)), true
		return p.sum, nil
	}
	// Not every block is held as far as this copy knows: hash the file.
	if err := p.flush(); err != nil {
		return [32]byte{}, err
	}
	h, err := files.NewHash(p.meta.HashAlg)
	if err != nil {
		return [32]byte{}, err
	}
	if _, err := io.CopyBuffer(h, io.NewSectionReader(p.data, 0, int64(p.meta.Size)), make([]byte, 1<<20)); err != nil {
		return [32]byte{}, fmt.Errorf("hashing %q: %w", p.meta.Name, err)
	}
	p.sum, p.summed = [32]byte(h.Sum(nil)), true
	return p.sum, nil
}

// Commit fsyncs the copy, renames it to its name and fsyncs the
// directory.
func (p *partial) Commit() error {
	if p.stored {
		return nil
	}
	if err := p.flush(); err != nil {
		return err
	}
	if err := p.waitFlush(); err != nil {
		return fmt.Errorf("flushing %q to the disk as it was written: %w", p.meta.Name, err)
	}
	if err := p.data.Sync(); err != nil {
		return fmt.Errorf("fsync of %q: %w", p.meta.Name, err)
	}
	dir := filepath.Dir(p.final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("storing %q: %w", p.meta.Name, err)
	}
	if err := os.Rename(p.path, p.final); err != nil {
		return fmt.Errorf("storing %q: %w", p.meta.Name, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	p.close()
	os.Remove(p.sums)
	if p.summed {
		writeRecord(p.record, p.meta.Name, p.final, p.meta.HashAlg, p.sum)
	}
	return nil
}

// Stored reports whether the copy is a file stored already under its
// name (every block held): for an offer without a hash, a candidate
// that FileEnd's hash confirms or not.
func (p *partial) Stored() bool { return p.stored }

// recordsDir, under PartialDir, holds the records of the files stored:
// one per name.
const recordsDir = "stored"

// fileID is what stat says of a stored file: a record holds for the file
// only while they are the same (a write changes the times, a
// replacement the inode).
type fileID struct {
	size, dev, ino uint64
	mtime, ctime   int64 // ns
}

func (id fileID) String() string {
	return fmt.Sprintf("%d %d %d %d %d", id.size, id.dev, id.ino, id.mtime, id.ctime)
}

// statFile returns the identity of the regular file at path if it has
// size bytes.
func statFile(path string, size uint64) (fileID, bool) {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || uint64(st.Size()) != size {
		return fileID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{size: size, dev: uint64(sys.Dev), ino: sys.Ino, mtime: sys.Mtim.Nano(), ctime: sys.Ctim.Nano()}, true
}

// recordPath is where the record of the file stored as name lives.
func (d *Dir) recordPath(name string) string {
	h := sha256.Sum256([]byte(name))
	return filepath.Join(d.Root, PartialDir, recordsDir, hex.EncodeToString(h[:16]))
}

// recordMagic begins a record: "rbcast-stored 2", the hash as
// "alg:hex" (files.FormatHash), the file's identity (fileID.String),
// then the name (the rest of the file). A record of version 1 (before
// algorithms had names) has the SHA-256 in hex.
const (
	recordMagic   = "rbcast-stored 2\n"
	recordMagicV1 = "rbcast-stored 1\n"
)

// writeRecord records the hash (under alg) of the file stored at final
// as name. A record not written costs a read of the file when it is
// offered again; it is not fsynced (a torn one does not parse). A record
// holds one hash: a file offered under another algorithm is read once,
// and its record rewritten with that one.
func writeRecord(path, name, final string, alg frame.FileHashAlg, sum [frame.FileHashLen]byte) {
	st, err := os.Stat(final)
	if err != nil {
		return
	}
	id, ok := statFile(final, uint64(st.Size()))
	if !ok {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	b := fmt.Appendf(nil, "%s%s\n%v\n%s", recordMagic, files.FormatHash(alg, sum), id, name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil || os.Rename(tmp, path) != nil {
		os.Remove(tmp)
	}
}

// readRecord returns the recorded hash under alg of the file stored as
// name if the record is of that file as it is now (id), and of alg.
func readRecord(path, name string, id fileID, alg frame.FileHashAlg) (sum [frame.FileHashLen]byte, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return sum, false
	}
	recAlg := frame.FileHashSHA256
	rest, found := strings.CutPrefix(string(b), recordMagic)
	if !found {
		if rest, found = strings.CutPrefix(string(b), recordMagicV1); !found {
			return sum, false
		}
	}
	lines := strings.SplitN(rest, "\n", 3)
	if len(lines) != 3 || lines[1] != id.String() || lines[2] != name {
		return sum, false
	}
	if a, hx, ok := strings.Cut(lines[0], ":"); ok {
		if recAlg, ok = frame.ParseFileHashAlg(a); !ok {
			return sum, false
		}
		lines[0] = hx
	}
	if recAlg != alg {
		return sum, false
	}
	h, err := hex.DecodeString(lines[0])
	if err != nil || len(h) != frame.FileHashLen {
		return sum, false
	}
	return [frame.FileHashLen]byte(h), true
}

// Abort gives the copy up; keep leaves it for a resume.
func (p *partial) Abort(keep bool) {
	if p.stored {
		return
	}
	if keep {
		p.flush() // an error: those blocks are fetched again
	}
	p.close()
	if !keep {
		os.Remove(p.path)
		os.Remove(p.sums)
	}
}

func (p *partial) close() {
	p.waitFlush()
	freeRuns.give(p.run)
	freeReps.give(p.rep)
	freeAheads.give(p.ahead)
	p.run, p.runSums = nil, nil
	p.rep, p.repSums = nil, nil
	p.ahead, p.aheadTag = nil, nil
	if p.data != nil {
		p.data.Close()
	}
	if p.hashes != nil {
		p.hashes.Close()
	}
}

// hashFile returns the hash under alg of the file at path if it has size
// bytes.
func hashFile(path string, size uint64, alg frame.FileHashAlg) ([32]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || uint64(st.Size()) != size {
		return [32]byte{}, fs.ErrNotExist
	}
	h, err := files.NewHash(alg)
	if err != nil {
		return [32]byte{}, err
	}
	if _, err := io.Copy(h, f); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

// Source is a file to send: its name as the receivers will store it, its
// size and hash (zeros from OpenSourceHashLater), the hash's algorithm
// (0: SHA-256; the caller may set another for a Source from
// OpenSourceHashLater), and the open file (a files.Source).
type Source struct {
	Name    string
	Size    uint64
	Hash    [frame.FileHashLen]byte
	HashAlg frame.FileHashAlg
	*os.File
}

// OpenSource opens path to send under name (a local relative path) and
// hashes it (SHA-256).
func OpenSource(path, name string) (*Source, error) {
	s, err := OpenSourceHashLater(path, name)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, s.File); err != nil {
		s.Close()
		return nil, fmt.Errorf("hashing %s: %w", path, err)
	}
	s.Hash = [32]byte(h.Sum(nil))
	return s, nil
}

// OpenSourceHashLater opens path to send under name without hashing it:
// its Hash is zeros, so the file core hashes it as its pass reads it and
// sends the hash in FileEnd (files.Outgoing), and the first block goes
// out without a whole pass over the file first.
func OpenSourceHashLater(path, name string) (*Source, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	// O_NONBLOCK: the open of a named pipe does not wait for a writer
	// (it is refused below); a regular file's descriptor is made
	// blocking again.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Source{Name: name, Size: uint64(st.Size), File: os.NewFile(uintptr(fd), path)}, nil
}

// Outgoing is the files.Outgoing of s, to the members to (nil: all).
// Its Source is a files.RunSource: the core reads the pass's blocks a run
// at a time, each straight into the frame it goes out in.
func (s *Source) Outgoing(to []frame.MemberID) files.Outgoing {
	return files.Outgoing{Name: s.Name, Size: s.Size, Hash: s.Hash, HashAlg: s.HashAlg, Source: runSource{s.File}, To: to}
}

// iovMax is what one preadv takes at most (Linux's IOV_MAX).
const iovMax = 1024

// runSource is the files.RunSource of a file: ReadRunAt is a preadv of
// the run into its buffers (the page cache copied once, into the
// frames), raw while the page cache holds it (preadvCached), ReadAt a
// pread.
type runSource struct{ f *os.File }

func (r runSource) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }

func (r runSource) ReadRunAt(ps [][]byte, off int64) (int, error) {
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", r.f.Name(), err)
	}
	total := 0
	for len(ps) > 0 {
		var n int
		var rerr error
		iov := ps[:min(len(ps), iovMax)]
		if err := rc.Read(func(fd uintptr) bool {
			if n = preadvCached(fd, iov, off); n > 0 {
				return true
			}
			for {
				n, rerr = preadv(int(fd), iov, off)
				if rerr != unix.EINTR {
					return true
				}
			}
		}); err != nil {
			return total, fmt.Errorf("reading %s: %w", r.f.Name(), err)
		}
		if rerr != nil {
			return total, fmt.Errorf("reading %s at %d: preadv: %w", r.f.Name(), off, rerr)
		}
		if n == 0 {
			return total, io.EOF
		}
		total, off = total+n, off+int64(n)
		for len(ps) > 0 && n >= len(ps[0]) { // drop the buffers filled
			n -= len(ps[0])
			ps = ps[1:]
		}
		if n > 0 { // a buffer filled in part: go on after its bytes
			ps = append([][]byte{ps[0][n:]}, ps[1:]...)
		}
	}
	return total, nil
}

func (r runSource) Close() error { return r.f.Close() }

// preadv is the blocking read of a run, by Syscall, and rawSyscall6 the
// raw call preadvCached makes (variables: tests count the calls, and
// make the raw one find nothing cached).
var (
	preadv      = unix.Preadv
	rawSyscall6 = unix.RawSyscall6
)

// preadvCached reads into iov (up to 64 buffers) from off what the page
// cache holds, by a raw preadv2(RWF_NOWAIT): it never waits for the
// disk, so it can skip Syscall's entersyscall. With one P (rbcastd) the
// sender's loop waits on its link between bursts, and the first Syscall
// after each wait woke the runtime's sysmon thread, which then looked
// every 20 µs (a millisecond or more on machine D) until the P was idle
// again: a run's preadv was that call (docs/protocols.md, "The file
// path's extra over PBP"). It returns the bytes read, 0 if none (not
// cached, the file's end, or an error: the caller's preadv reads them,
// or reports the error).
func preadvCached(fd uintptr, iov [][]byte, off int64) int {
	var vecs [64]unix.Iovec
	k := 0
	for _, p := range iov {
		if k == len(vecs) {
			break
		}
		if len(p) > 0 {
			vecs[k].Base = &p[0]
			vecs[k].SetLen(len(p))
			k++
		}
	}
	if k == 0 {
		return 0
	}
	n, _, e := rawSyscall6(unix.SYS_PREADV2, fd, uintptr(unsafe.Pointer(&vecs[0])), uintptr(k), uintptr(off), 0, unix.RWF_NOWAIT)
	if e != 0 {
		return 0
	}
	return int(n)
}

// Walk returns the files to send for paths: a file under its base name, a
// directory's regular files recursively under the directory's base name
// and their path within it (what sendfile FILE… sends); the current
// directory as "." (or "a/..") under their path within it only.
// Paths are taken as the file system resolves them, a symlink and a ".."
// after one included, and the paths returned are those it resolved to.
func Walk(paths []string) (paths2, names []string, err error) {
	paths2, _, names, err = WalkAs(paths)
	return paths2, names, err
}

// WalkAs is Walk, with each file's path as given too: the argument, or a
// directory argument joined with the file's path within it, unresolved
// (what a message about the file should name, beside the path it
// resolved to when the two differ: ResolvedElsewhere).
func WalkAs(paths []string) (paths2, given, names []string, err error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, nil, err
		}
		real, err := physical(p)
		if err != nil {
			return nil, nil, nil, err
		}
		if !st.IsDir() {
			paths2, given, names = append(paths2, real), append(given, p), append(names, filepath.Base(p))
			continue
		}
		base, err := dirBase(p, real)
		if err != nil {
			return nil, nil, nil, err
		}
		err = filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(real, path)
			if err != nil {
				return err
			}
			paths2, given, names = append(paths2, path), append(given, joinGiven(p, rel)), append(names, filepath.ToSlash(filepath.Join(base, rel)))
			return nil
		})
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return paths2, given, names, nil
}

// joinGiven is dir's file rel as the user would type it: dir as given,
// not cleaned (filepath.Join would drop "l/.." lexically).
func joinGiven(dir, rel string) string {
	if strings.HasSuffix(dir, string(filepath.Separator)) {
		return dir + rel
	}
	return dir + string(filepath.Separator) + rel
}

// ResolvedElsewhere reports whether real, the path given resolved to
// (Walk), is another than given names lexically: a symlink or a ".."
// after one on the way.
func ResolvedElsewhere(given, real string) bool {
	abs, err := filepath.Abs(given)
	return err != nil || abs != real
}

// physical is the absolute path p resolves to with its symlinks followed:
// what the file system opens. filepath.Clean (and Join, Abs) drops "l/.."
// lexically, which for a symlink l is another directory than the file
// system's; and filepath.WalkDir does not follow a symlink it is given.
func physical(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil || filepath.IsAbs(real) {
		return real, err
	}
	// Leading ".." left: taken from the working directory without links.
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if wd, err = filepath.EvalSymlinks(wd); err != nil {
		return "", err
	}
	return filepath.Join(wd, real), nil
}

// dirBase is the name a directory's files are sent under (Walk): the
// directory's name as given (a symlink's name for a symlink); for a path
// ending in "." or "..", "" if it is the working directory (".", "a/..":
// its files under their path within it), else the name of the directory
// it resolves to, real (its base name was "..",
// which made names no receiver stores, nor the daemon sends: "sendfile
// .." failed).
func dirBase(p, real string) (string, error) {
	wd, err := physical(".")
	if err != nil {
		return "", err
	}
	base := filepath.Base(p)
	if base == "." || base == ".." {
		if real == wd {
			return "", nil
		}
		base = filepath.Base(real)
	}
	if base == string(filepath.Separator) {
		return "", nil
	}
	return base, nil
}
