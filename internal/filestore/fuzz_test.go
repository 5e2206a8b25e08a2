package filestore

import (
	"bytes"
	"crypto/sha256"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/reliable/files"
)

// FuzzCheckName: a name off the wire (a FileOffer's) that CheckName
// accepts is stored strictly inside the root, never the root itself,
// and not under PartialDir.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"a", "a/b.img", "dir/.hidden", "../up", "/etc/passwd", ".rbcast-partial/x", "a/../.rbcast-partial", "./b", "a//b/"} {
		f.Add(s)
	}
	const root = "/srv/inbox"
	f.Fuzz(func(t *testing.T, name string) {
		if CheckName(name) != nil {
			return
		}
		rel, err := filepath.Rel(root, filepath.Join(root, filepath.FromSlash(name)))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("CheckName accepts %q, stored at %q under the root (%v)", name, rel, err)
		}
		if first, _, _ := strings.Cut(rel, "/"); first == PartialDir {
			t.Fatalf("CheckName accepts %q, under %s", name, PartialDir)
		}
	})
}

// FuzzPartial writes a file's blocks into a partial copy in an arbitrary
// order, some again, some with other bytes than the file's (a corrupt
// block a repair replaces), and kills the receiver (the run lost, a byte
// of the copy torn) or gives the copy up to resume it, at arbitrary
// points, with arbitrary sizes of run and of blocks kept ahead. A
// resumed copy holds only blocks with bytes once written to them; once
// every block is held, Sum is the hash of the blocks' last bytes, and
// Commit stores exactly those bytes.
//
// The input: block size, blocks, bytes short of the last block, run and
// ahead sizes in blocks, then two bytes an operation (kind, block).
func FuzzPartial(f *testing.F) {
	f.Add([]byte{7, 9, 3, 2, 2, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8})
	f.Add([]byte{3, 20, 0, 1, 3, 0, 5, 0, 9, 0, 2, 6, 0, 0, 0, 4, 7, 0, 12, 0, 1})
	f.Add([]byte{15, 12, 14, 5, 0, 0, 11, 0, 3, 4, 3, 0, 3, 7, 0, 0, 0, 6, 40, 0, 7})
	defer func(r, a int) { runBytes, aheadBytes = r, a }(runBytes, aheadBytes)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 5 {
			return
		}
		bs := 1 + uint32(in[0]%16)
		nb := 1 + uint32(in[1]%24)
		size := uint64(nb)*uint64(bs) - uint64(uint32(in[2])%bs)
		runBytes, aheadBytes = int(bs)*(1+int(in[3]%6)), int(bs)*(1+int(in[4]%6))
		in = in[5:]
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + 1)
		}
		m := files.Meta{Sender: 1, Incarnation: 1, ID: 1, Name: "f", Size: size, BlockSize: bs, Hash: sha256.Sum256(data)}
		d := &Dir{Root: t.TempDir()}
		written := make([][][]byte, nb) // every content written to each block
		last := make([][]byte, nb)      // each held block's content
		buf := make([]byte, bs)         // the frame the core lends: reused
		var p *partial
		open := func() {
			sf, held, err := d.Open(m)
			if err != nil {
				t.Fatal(err)
			}
			p = sf.(*partial)
			disk, err := os.ReadFile(p.path)
			if err != nil {
				t.Fatal(err)
			}
			clear(last)
			next := uint32(0)
			for _, r := range held {
				if r.First < next || r.Last < r.First || r.Last >= nb {
					t.Fatalf("Open holds %v: not ascending, disjoint ranges of the %d blocks", held, nb)
				}
				next = r.Last + 2
				for b := r.First; b <= r.Last; b++ {
					on := disk[int(b)*int(bs) : int(b)*int(bs)+m.BlockLen(b)]
					if !slices.ContainsFunc(written[b], func(w []byte) bool { return bytes.Equal(w, on) }) {
						t.Fatalf("the resumed copy holds block %d as % x, never written to it", b, on)
					}
					last[b] = slices.Clone(on)
				}
			}
		}
		write := func(b uint32, other bool, summed bool) {
			blk := buf[:m.BlockLen(b)]
			copy(blk, data[int(b)*int(bs):])
			if other {
				for i := range blk {
					blk[i] ^= byte(0x5a + len(written[b]))
				}
			}
			written[b] = append(written[b], slices.Clone(blk))
			last[b] = slices.Clone(blk)
			var err error
			if summed {
				err = p.WriteBlockSum(b, blk, crc32.Checksum(blk, castagnoli))
			} else {
				err = p.WriteBlock(b, blk)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range blk {
				blk[i] = 0xee // the frame's buffer, reused for the next
			}
		}
		open()
		for ; len(in) >= 2; in = in[2:] {
			b := uint32(in[1]) % nb
			switch in[0] % 8 {
			case 0, 1, 2:
				write(b, false, false)
			case 3:
				write(b, false, true)
			case 4:
				write(b, true, in[1]&0x80 != 0)
			case 5: // killed: the run is lost; a byte of the copy torn
				p.close()
				if in[1]&0x80 != 0 && size > 0 {
					f, err := os.OpenFile(p.path, os.O_RDWR, 0)
					if err != nil {
						t.Fatal(err)
					}
					at := int64(in[1]) * 5 % int64(size)
					f.WriteAt([]byte{data[at] ^ 0x33}, at)
					f.Close()
				}
				open()
			case 6: // given up, kept for a resume
				p.Abort(true)
				open()
			case 7:
				if !slices.ContainsFunc(last, func(b []byte) bool { return b == nil }) {
					checkSum(t, p, last)
				}
			}
		}
		for b := range nb {
			if last[b] == nil {
				write(b, false, false)
			}
		}
		checkSum(t, p, last)
		if err := p.Commit(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(d.Root, "f"))
		if want := bytes.Join(last, nil); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("stored % x (%v), want % x", got, err, want)
		}
	})
}

// checkSum fails t unless p's Sum is the hash of the blocks' contents.
func checkSum(t *testing.T, p *partial, blocks [][]byte) {
	t.Helper()
	sum, err := p.Sum()
	if want := sha256.Sum256(bytes.Join(blocks, nil)); err != nil || sum != want {
		t.Fatalf("Sum = %x (%v), want %x, the hash of the blocks held", sum, err, want)
	}
}
