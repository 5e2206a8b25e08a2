package files

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// passOut runs a sender's pass of data (blocks of 10 bytes, three frames
// a step) to the end and returns the data of its FileData frames in the
// order sent, and its verdict's error, if any.
func passOut(t *testing.T, data []byte, src Source) (blocks [][]byte, seqs []uint32, verdictErr error) {
	t.Helper()
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Burst = 3; c.Rate = 3 * 100_000 })
	if _, err := s.Send(2, Outgoing{Name: "x", Size: uint64(len(data)), Hash: sha256.Sum256(data), Source: src}); err != nil {
		t.Fatal(err)
	}
	for now := Time(Millisecond); s.passing() != nil || len(s.queue) > 0; now += Time(Millisecond) {
		if now > Time(10*Second) {
			t.Fatal("the pass did not end")
		}
		s.Tick(now)
		for _, r := range s.Reports() {
			if r.Kind == Verdict {
				verdictErr = r.Err
			}
		}
		_, vs := sent(t, s)
		for _, v := range vs {
			if v.Type() != frame.FileData {
				continue
			}
			if v.FileID() != 1 {
				t.Fatalf("block %d of file %d, want file 1", v.Seq(), v.FileID())
			}
			blocks, seqs = append(blocks, slices.Clone(v.FileBlock())), append(seqs, v.Seq())
		}
	}
	return blocks, seqs, verdictErr
}

// TestPassReadsRuns: the pass reads a RunSource a run at a time, each
// block straight into its frame (one ReadRunAt for a file under
// runBytes, no ReadAt), over several steps of the pacer, and the frames
// carry the file's bytes in order.
func TestPassReadsRuns(t *testing.T) {
	data := randomData(245, 3) // 25 blocks, the last of 5 bytes
	src := &memSource{data: data, bs: 10, fail: -1}
	blocks, seqs, err := passOut(t, data, src)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(blocks, nil); !bytes.Equal(got, data) {
		t.Fatalf("the pass sent %d bytes that are not the file's %d (blocks %v)", len(got), len(data), seqs)
	}
	if want := [][2]int{{0, 25}}; !slices.Equal(src.runs, want) || src.reads != 0 {
		t.Fatalf("runs read %v and %d ReadAt, want %v and none", src.runs, src.reads, want)
	}
}

// TestPassShortRun: a run the source ends short, without an error,
// keeps the blocks read whole; the pass reads the rest from the first
// block it lacks.
func TestPassShortRun(t *testing.T) {
	data := randomData(245, 4)
	src := &memSource{data: data, bs: 10, fail: -1, shortRun: 10}
	blocks, _, err := passOut(t, data, src)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(blocks, nil); !bytes.Equal(got, data) {
		t.Fatal("the pass sent other bytes than the file's")
	}
	if want := [][2]int{{0, 25}, {10, 15}, {20, 5}}; !slices.Equal(src.runs, want) {
		t.Fatalf("runs read %v, want %v", src.runs, want)
	}
}

// TestPassRunFails: a read that fails within a run sends the blocks
// before the failing one, then aborts the file with the source's error.
func TestPassRunFails(t *testing.T) {
	data := randomData(245, 5)
	src := &memSource{data: data, bs: 10, fail: 7}
	blocks, seqs, err := passOut(t, data, src)
	if err == nil || !strings.Contains(err.Error(), `files: reading "x": disk error at block 7`) {
		t.Fatalf("verdict error %v, want the disk error at block 7", err)
	}
	if !slices.Equal(seqs, []uint32{0, 1, 2, 3, 4, 5, 6}) || !bytes.Equal(bytes.Join(blocks, nil), data[:70]) {
		t.Fatalf("sent blocks %v before the abort, want 0..6 with the file's bytes", seqs)
	}
	if want := [][2]int{{0, 25}, {7, 18}}; !slices.Equal(src.runs, want) {
		t.Fatalf("runs read %v, want %v", src.runs, want)
	}
}

// TestPassBlockSource: a Source that is no RunSource is read a block per
// ReadAt, each into its frame.
func TestPassBlockSource(t *testing.T) {
	data := randomData(245, 6)
	m := &memSource{data: data, bs: 10, fail: -1}
	blocks, _, err := passOut(t, data, blockSource{m})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.Join(blocks, nil), data) || m.reads != 25 {
		t.Fatalf("%d ReadAt, want 25, and the file's bytes", m.reads)
	}
}

func randomData(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
