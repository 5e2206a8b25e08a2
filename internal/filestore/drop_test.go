package filestore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/reliable/files"
)

// dropRange is one dropPages call's range.
type dropRange struct{ off, n int64 }

// recordDrops replaces dropPages for a test with one that records the
// ranges (and still drops them).
func recordDrops(t *testing.T) *[]dropRange {
	t.Helper()
	old := dropPages
	t.Cleanup(func() { dropPages = old })
	var got []dropRange
	dropPages = func(f *os.File, off, n int64) {
		got = append(got, dropRange{off, n})
		old(f, off, n)
	}
	return &got
}

// writeAll writes every block of data to f, in order.
func writeAll(t *testing.T, f files.SinkFile, m files.Meta, data []byte) {
	t.Helper()
	for b := range m.Blocks() {
		off := int(b) * int(m.BlockSize)
		if err := f.WriteBlock(b, data[off:off+m.BlockLen(b)]); err != nil {
			t.Fatal(err)
		}
	}
}

// A copy written in order gives its written prefix back to the page cache
// as it goes (dropWritten): the ranges asked to be dropped are whole pages
// of the prefix written out a write-behind before, one after another from
// the file's start, each page asked twice (a page still being written out
// the first time goes the second), up to two write-behinds and a run short
// of the end; none without Dir.DropWritten. Without dropWritten, none.
func TestWrittenPrefixDropRanges(t *testing.T) {
	data := randomBytes(48<<20, 5)
	m := meta("big", data, 8964)
	for _, keep := range []bool{false, true} {
		drops := recordDrops(t)
		f, _, err := (&Dir{Root: t.TempDir(), DropWritten: !keep}).Open(m)
		if err != nil {
			t.Fatal(err)
		}
		writeAll(t, f, m, data)
		if keep {
			if len(*drops) != 0 {
				t.Errorf("without DropWritten: %d ranges dropped, want none", len(*drops))
			}
		} else {
			if len(*drops) < 3 {
				t.Fatalf("%d ranges dropped of a 48 MiB copy, want 3 or more: %v", len(*drops), *drops)
			}
			asked := map[int64]int{} // page → times asked
			for i, r := range *drops {
				if r.off%pageBytes != 0 || r.n%pageBytes != 0 || r.n <= 0 {
					t.Errorf("range %d (%d, %d) is not whole pages", i, r.off, r.n)
				}
				if i == 0 && r.off != 0 {
					t.Errorf("the first range starts at %d, want 0", r.off)
				}
				if i > 0 && r.off > (*drops)[i-1].off+(*drops)[i-1].n {
					t.Errorf("range %d starts at %d, past the one before's end %d", i, r.off, (*drops)[i-1].off+(*drops)[i-1].n)
				}
				for pg := r.off; pg < r.off+r.n; pg += pageBytes {
					asked[pg]++
				}
			}
			last := (*drops)[len(*drops)-1]
			end := last.off + last.n
			if want := int64(len(data)) - 2*writeBehind - int64(runBytes) - 2*8964; end < want {
				t.Errorf("dropped up to %d of %d bytes, want %d or more", end, len(data), want)
			}
			if end > int64(len(data)) {
				t.Errorf("dropped up to %d, past the file's %d bytes", end, len(data))
			}
			prev := (*drops)[len(*drops)-2]
			for pg := int64(0); pg < prev.off+prev.n; pg += pageBytes {
				if asked[pg] != 2 {
					t.Fatalf("page at %d asked %d times, want 2 (every page behind the last range)", pg, asked[pg])
				}
			}
		}
		if sum, err := f.Sum(); err != nil || sum != librarySum(hashAlg(m.HashAlg), data) {
			t.Fatalf("Sum = %x, %v", sum, err)
		}
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// resident counts the pages of the file at path in the page cache.
func resident(t *testing.T, path string, size int) (in, all int) {
	t.Helper()
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	mem, err := unix.Mmap(int(fd.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal("mincore:", errno)
	}
	for _, v := range vec {
		in += int(v & 1)
	}
	return in, len(vec)
}

// The kernel takes the pages: of a 48 MiB copy written in order, fewer
// than half of its pages are in the page cache once it is stored (about
// all of them without Dir.DropWritten, and without dropWritten). The stored
// file is the data either way.
func TestWrittenPrefixDropped(t *testing.T) {
	root := t.TempDir()
	var fsys unix.Statfs_t
	if err := unix.Statfs(root, &fsys); err != nil {
		t.Fatal(err)
	}
	if fsys.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs: its pages are the file")
	}
	data := randomBytes(48<<20, 6)
	for _, keep := range []bool{false, true} {
		m := meta("big", data, 8964)
		d := &Dir{Root: t.TempDir(), DropWritten: !keep}
		f, _, err := d.Open(m)
		if err != nil {
			t.Fatal(err)
		}
		writeAll(t, f, m, data)
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(d.Root, "big")
		in, all := resident(t, path, len(data))
		t.Logf("DropWritten %v: %d of the file's %d pages in the page cache", !keep, in, all)
		if !keep && in > all/2 {
			t.Errorf("%d of %d pages resident, want at most half", in, all)
		}
		if keep && in < all*3/4 {
			t.Errorf("without DropWritten: %d of %d pages resident, want three quarters or more", in, all)
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the stored file differs from the data (%v)", err)
		}
	}
}

// A file that arrives with gaps, repaired later, past several
// write-behinds (the prefix dropped while blocks after it are still
// missing, repairs landing beside dropped pages), aborted and resumed,
// stores the file's bytes.
func TestWrittenPrefixDroppedLossy(t *testing.T) {
	drops := recordDrops(t)
	d := &Dir{Root: t.TempDir(), DropWritten: true}
	data := randomBytes(40<<20, 77)
	m := meta("lossy", data, 8964)
	block := func(b uint32) []byte {
		return data[int(b)*int(m.BlockSize) : int(b)*int(m.BlockSize)+m.BlockLen(b)]
	}
	f, _, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	// The pass: every 7th block lost, each repaired 300 blocks (2.6 MB)
	// later; the last third of the file only after an abort and a resume.
	n := m.Blocks()
	var lost []uint32
	for b := range n * 2 / 3 {
		if b%7 == 3 {
			lost = append(lost, b)
		} else if err := f.WriteBlock(b, block(b)); err != nil {
			t.Fatal(err)
		}
		for len(lost) > 0 && lost[0]+300 <= b {
			if err := f.WriteBlock(lost[0], block(lost[0])); err != nil {
				t.Fatal(err)
			}
			lost = lost[1:]
		}
	}
	if len(*drops) == 0 {
		t.Fatal("nothing dropped before the abort")
	}
	f.Abort(true)
	f, held, err := d.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	var have uint32
	for _, r := range held {
		have += r.Last - r.First + 1
	}
	if want := n*2/3 - uint32(len(lost)); have != want {
		t.Fatalf("the resume holds %d blocks, want %d", have, want)
	}
	for _, b := range lost {
		if err := f.WriteBlock(b, block(b)); err != nil {
			t.Fatal(err)
		}
	}
	for b := n * 2 / 3; b < n; b++ {
		if err := f.WriteBlock(b, block(b)); err != nil {
			t.Fatal(err)
		}
	}
	if sum, err := f.Sum(); err != nil || sum != librarySum(hashAlg(m.HashAlg), data) {
		t.Fatalf("Sum = %x, %v", sum, err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(d.Root, "lossy")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the stored file differs from the data (%v)", err)
	}
}
