package filestore

import (
	"crypto/sha256"
	"hash"
	"runtime"
	"testing"

	"github.com/rbcast/rbcast/reliable/files"
)

// asyncSHA gives crypto/sha256's sum whatever the writes' sizes (within
// a chunk, across chunks, more chunks than in flight), after a Reset,
// and for writes after a Sum.
func TestAsyncSHA(t *testing.T) {
	data := randomBytes(5*hashChunkBytes+12345, 3)
	for _, step := range []int{1, 8964, hashChunkBytes - 1, hashChunkBytes, 3 * hashChunkBytes} {
		a := newAsyncSHA()
		write := func(b []byte) {
			for len(b) > 0 {
				k := min(step, len(b))
				if n, err := a.Write(b[:k]); n != k || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", k, n, err)
				}
				b = b[k:]
			}
		}
		write(data)
		if got, want := a.Sum(nil), sha256.Sum256(data); string(got) != string(want[:]) {
			t.Fatalf("step %d: Sum %x, want %x", step, got[:8], want[:8])
		}
		write([]byte("more"))
		if got, want := a.Sum(nil), sha256.Sum256(append(data[:len(data):len(data)], "more"...)); string(got) != string(want[:]) {
			t.Fatalf("step %d: Sum after a Sum and a write %x, want %x", step, got[:8], want[:8])
		}
		a.Reset()
		write(data[:hashChunkBytes+7])
		if got, want := a.Sum(nil), sha256.Sum256(data[:hashChunkBytes+7]); string(got) != string(want[:]) {
			t.Fatalf("step %d: Sum after Reset %x, want %x", step, got[:8], want[:8])
		}
	}
	var src files.Source = (&Source{}).Outgoing(nil).Source
	if _, ok := src.(files.SourceHasher); !ok {
		t.Fatalf("a Source's files.Source %T supplies no hash (files.SourceHasher)", src)
	}
	if a := newAsyncSHA(); a.Size() != sha256.Size || a.BlockSize() != sha256.BlockSize {
		t.Fatalf("Size %d, BlockSize %d", a.Size(), a.BlockSize())
	}
}

// BenchmarkPassHash is the sender's hash of a file offered without its
// hash, written a block of MTU 9000 at a time as the pass sends it, to
// Sum: crypto/sha256 on the caller (the core's own, before
// files.SourceHasher) against asyncSHA. ns/op is the wall time per
// block, loop-cpu-ns/block the CPU of the caller's thread (the core's
// event loop), waits not counted.
func BenchmarkPassHash(b *testing.B) {
	for name, newHash := range map[string]func() hash.Hash{"sha256": sha256.New, "async": func() hash.Hash { return newAsyncSHA() }} {
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			const bs = 8964
			data := randomBytes(bs*128, 6)
			h := newHash()
			b.SetBytes(bs)
			b.ResetTimer()
			cpu0 := threadCPU(b)
			for i := range b.N {
				off := (i % 128) * bs
				h.Write(data[off : off+bs])
			}
			h.Sum(nil)
			b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(b.N), "loop-cpu-ns/block")
		})
	}
}
