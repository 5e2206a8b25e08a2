// Package filestore is the file core's storage over a directory
// (reliable/files: its Sink, and the Source of a file to send): what
// rbcastd recvfile -dir and run -inbox store into, and sendfile reads.
//
// A received file is written to a partial copy under DIR/.rbcast-partial,
// with the SHA-256 of each block stored beside it as the block is
// written. A restarted receiver resumes from the partial copy: Open
// re-reads each block and keeps only those whose hash still matches, so
// a block torn by a crash is fetched again. Once every block is there
// the whole file is hashed; only a file whose hash is its offer's is
// fsynced and renamed to its name (never a partial file under the real
// name), and the directory fsynced.
package filestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
}

var _ files.Sink = (*Dir)(nil)

// CheckName reports whether name may be stored under a root: a local
// path (no "..", not absolute, not empty), not under PartialDir.
func CheckName(name string) error {
	if !filepath.IsLocal(name) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("filestore: name %q is not a local relative path", name)
	}
	if first, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(name)), "/"); first == PartialDir {
		return fmt.Errorf("filestore: name %q is under %s, where partial copies live", name, PartialDir)
	}
	return nil
}

// partialKey names a transfer's partial copy by what identifies the file
// (not the transfer), so a new offer of the same file resumes it.
func partialKey(m files.Meta) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00", m.Name, m.Size, m.BlockSize)
	h.Write(m.Hash[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Open opens or resumes the partial copy of m (files.Sink).
func (d *Dir) Open(m files.Meta) (files.SinkFile, []frame.Range, error) {
	if d.Accept != nil && !d.Accept(m) {
		return nil, nil, files.ErrDeclined
	}
	if err := CheckName(m.Name); err != nil {
		return nil, nil, err
	}
	final := filepath.Join(d.Root, filepath.FromSlash(m.Name))
	if sum, err := hashFile(final, m.Size); err == nil && sum == m.Hash {
		// Stored already (a restart after the commit): every block is
		// held, and Commit has nothing to rename.
		var held []frame.Range
		if n := m.Blocks(); n > 0 {
			held = []frame.Range{{First: 0, Last: n - 1}}
		}
		return &partial{meta: m, final: final, stored: true}, held, nil
	}
	dir := filepath.Join(d.Root, PartialDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("filestore: %w", err)
	}
	base := filepath.Join(dir, partialKey(m))
	p := &partial{meta: m, final: final, path: base + ".part", sums: base + ".blocks", h: sha256.New(), held: make([]uint64, (m.Blocks()+63)/64)}
	var err error
	if p.data, err = os.OpenFile(p.path, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, nil, fmt.Errorf("filestore: %w", err)
	}
	if p.hashes, err = os.OpenFile(p.sums, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		p.data.Close()
		return nil, nil, fmt.Errorf("filestore: %w", err)
	}
	if err := p.data.Truncate(int64(m.Size)); err != nil {
		p.close()
		return nil, nil, fmt.Errorf("filestore: sizing %s: %w", p.path, err)
	}
	held, err := p.verify()
	if err != nil {
		p.close()
		return nil, nil, err
	}
	return p, held, nil
}

// partial is one file being received.
//
// It hashes the file as it goes (the prefix hash): blocks 0..hashed-1 are
// in h, and each block written at the end of that prefix advances it,
// reading the blocks already held after it (a bounded number per write),
// so that Sum, which the core calls on its event loop once every block is
// there, hashes only what is left. Written blocks' data is pushed to the
// disk in the background every writeBehind bytes, so that Commit's fsync
// has little left to write. Both keep the loop from stalling for seconds
// on a large file (a sender counts a silent receiver as failed).
type partial struct {
	meta         files.Meta
	final        string
	path, sums   string
	data, hashes *os.File
	stored       bool // the final file exists with the right hash
	buf          []byte

	h      hash.Hash
	hashed uint32   // blocks in h, from block 0
	held   []uint64 // blocks written or verified, one bit each
	dirty  int64    // bytes written since the last write-behind
}

// catchUp bounds the held blocks read to advance the prefix hash on one
// write; writeBehind is the bytes written between two write-behinds.
const (
	catchUp     = 256
	writeBehind = 8 << 20
)

func (p *partial) hold(b uint32) { p.held[b/64] |= 1 << (b % 64) }

func (p *partial) holds(b uint32) bool { return p.held[b/64]&(1<<(b%64)) != 0 }

// advance extends the prefix hash over held blocks, at most n reads of
// the file (a block passed in data is not read).
func (p *partial) advance(n int) error {
	for p.hashed < p.meta.Blocks() && p.holds(p.hashed) && n > 0 {
		l := p.meta.BlockLen(p.hashed)
		if cap(p.buf) < int(p.meta.BlockSize) {
			p.buf = make([]byte, p.meta.BlockSize)
		}
		blk := p.buf[:l]
		if _, err := p.data.ReadAt(blk, int64(p.hashed)*int64(p.meta.BlockSize)); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("filestore: reading %s: %w", p.path, err)
		}
		p.h.Write(blk)
		p.hashed++
		n--
	}
	return nil
}

var _ files.SinkFile = (*partial)(nil)

// verify returns the blocks whose stored hash matches their bytes.
func (p *partial) verify() ([]frame.Range, error) {
	var held []frame.Range
	rec := make([]byte, sha256.Size)
	blk := make([]byte, p.meta.BlockSize)
	var zero [sha256.Size]byte
	for b := range p.meta.Blocks() {
		if _, err := p.hashes.ReadAt(rec, int64(b)*sha256.Size); err != nil {
			if errors.Is(err, io.EOF) {
				break // never written past here
			}
			return nil, fmt.Errorf("filestore: reading %s: %w", p.sums, err)
		}
		if bytes.Equal(rec, zero[:]) {
			continue
		}
		n := p.meta.BlockLen(b)
		if _, err := p.data.ReadAt(blk[:n], int64(b)*int64(p.meta.BlockSize)); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("filestore: reading %s: %w", p.path, err)
		}
		if sum := sha256.Sum256(blk[:n]); !bytes.Equal(sum[:], rec) {
			continue
		}
		p.hold(b)
		if b == p.hashed {
			p.h.Write(blk[:n])
			p.hashed++
		}
		if k := len(held); k > 0 && held[k-1].Last+1 == b {
			held[k-1].Last = b
		} else {
			held = append(held, frame.Range{First: b, Last: b})
		}
	}
	return held, nil
}

// WriteBlock writes block b and the hash beside it. Neither is fsynced:
// a crash may tear them, and Open's verification finds it.
func (p *partial) WriteBlock(b uint32, data []byte) error {
	if p.stored {
		return nil
	}
	if _, err := p.data.WriteAt(data, int64(b)*int64(p.meta.BlockSize)); err != nil {
		return fmt.Errorf("filestore: writing block %d of %q: %w", b, p.meta.Name, err)
	}
	sum := sha256.Sum256(data)
	if _, err := p.hashes.WriteAt(sum[:], int64(b)*sha256.Size); err != nil {
		return fmt.Errorf("filestore: writing the hash of block %d of %q: %w", b, p.meta.Name, err)
	}
	if b < p.hashed {
		// A block written again (the core fetches every block again
		// after a hash mismatch): the prefix hash starts over.
		p.h.Reset()
		p.hashed = 0
	}
	p.hold(b)
	if b == p.hashed {
		p.h.Write(data)
		p.hashed++
	}
	if err := p.advance(catchUp); err != nil {
		return err
	}
	if p.dirty += int64(len(data)); p.dirty >= writeBehind {
		p.dirty = 0
		// Start writing what is dirty; do not wait for it.
		unix.SyncFileRange(int(p.data.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	return nil
}

// Sum hashes the partial copy.
func (p *partial) Sum() ([frame.FileHashLen]byte, error) {
	if p.stored {
		return p.meta.Hash, nil
	}
	if err := p.advance(int(p.meta.Blocks())); err != nil {
		return [32]byte{}, err
	}
	if p.hashed == p.meta.Blocks() {
		return [32]byte(p.h.Sum(nil)), nil
	}
	// Not every block is held as far as this copy knows: hash the file.
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(p.data, 0, int64(p.meta.Size)), make([]byte, 1<<20)); err != nil {
		return [32]byte{}, fmt.Errorf("filestore: hashing %q: %w", p.meta.Name, err)
	}
	return [32]byte(h.Sum(nil)), nil
}

// Commit fsyncs the copy, renames it to its name and fsyncs the
// directory.
func (p *partial) Commit() error {
	if p.stored {
		return nil
	}
	if err := p.data.Sync(); err != nil {
		return fmt.Errorf("filestore: fsync of %q: %w", p.meta.Name, err)
	}
	dir := filepath.Dir(p.final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	if err := os.Rename(p.path, p.final); err != nil {
		return fmt.Errorf("filestore: storing %q: %w", p.meta.Name, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	p.close()
	os.Remove(p.sums)
	return nil
}

// Abort gives the copy up; keep leaves it for a resume.
func (p *partial) Abort(keep bool) {
	if p.stored {
		return
	}
	p.close()
	if !keep {
		os.Remove(p.path)
		os.Remove(p.sums)
	}
}

func (p *partial) close() {
	if p.data != nil {
		p.data.Close()
	}
	if p.hashes != nil {
		p.hashes.Close()
	}
}

// hashFile returns the SHA-256 of the file at path if it has size bytes.
func hashFile(path string, size uint64) ([32]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || uint64(st.Size()) != size {
		return [32]byte{}, fs.ErrNotExist
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

// Source is a file to send: its name as the receivers will store it, its
// size and hash, and the open file (a files.Source).
type Source struct {
	Name string
	Size uint64
	Hash [frame.FileHashLen]byte
	*os.File
}

// OpenSource opens path to send under name (a local relative path) and
// hashes it.
func OpenSource(path, name string) (*Source, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("filestore: %s is not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("filestore: hashing %s: %w", path, err)
	}
	return &Source{Name: name, Size: uint64(st.Size()), Hash: [32]byte(h.Sum(nil)), File: f}, nil
}

// Outgoing is the files.Outgoing of s, to the members to (nil: all).
func (s *Source) Outgoing(to []frame.MemberID) files.Outgoing {
	return files.Outgoing{Name: s.Name, Size: s.Size, Hash: s.Hash, Source: s.File, To: to}
}

// Walk returns the files to send for paths: a file under its base name, a
// directory's regular files recursively under the directory's base name
// and their path within it (what sendfile FILE… sends).
func Walk(paths []string) (paths2, names []string, err error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("filestore: %w", err)
		}
		if !st.IsDir() {
			paths2, names = append(paths2, p), append(names, filepath.Base(p))
			continue
		}
		base := filepath.Base(filepath.Clean(p))
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(p, path)
			if err != nil {
				return err
			}
			paths2, names = append(paths2, path), append(names, filepath.ToSlash(filepath.Join(base, rel)))
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("filestore: %w", err)
		}
	}
	return paths2, names, nil
}
