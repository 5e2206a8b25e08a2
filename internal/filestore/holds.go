package filestore

import (
	"encoding/binary"
	"os"
	"path/filepath"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
)

var _ files.HoldingSink = (*Dir)(nil)

// Holds reports whether Open(m) would return every block of m held
// (files.HoldingSink): the file stored under m.Name, of m.Size bytes,
// whose record says m.Hash, or a partial copy of m whose checksums say
// every block is written. It reads no block and opens no copy, so the
// core asks it of an offer that comes while as many files as it takes at
// once are being received: such a file is judged at once instead of
// waiting for one of them to end. A file stored without a record (or
// changed since it was recorded) is not held here, and is judged when it
// opens (Open reads it); a block torn in a copy is found by Open.
func (d *Dir) Holds(m files.Meta) bool {
	if m.Hash == ([frame.FileHashLen]byte{}) || d.Accept != nil && !d.Accept(m) || CheckName(m.Name) != nil {
		return false
	}
	m.HashAlg = hashAlg(m.HashAlg)
	final := filepath.Join(d.Root, filepath.FromSlash(m.Name))
	if id, ok := statFile(final, m.Size); ok {
		if sum, known := readRecord(d.recordPath(m.Name), m.Name, id, m.HashAlg); known && sum == m.Hash {
			return true
		}
	}
	n := m.Blocks()
	if n == 0 {
		return false
	}
	base := filepath.Join(d.Root, PartialDir, partialKey(m))
	if st, err := os.Stat(base + ".part"); err != nil || !st.Mode().IsRegular() || uint64(st.Size()) != m.Size {
		return false
	}
	sums, err := os.ReadFile(base + sumsSuffix)
	if err != nil || len(sums) < 4*int(n) {
		return false
	}
	for b := range int(n) {
		if binary.BigEndian.Uint32(sums[4*b:]) == 0 {
			return false
		}
	}
	return true
}
