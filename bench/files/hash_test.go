package files_test

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
)

// BenchmarkHashCPU hashes with each algorithm of the file core
// (files.NewHash) in writes of one block at MTU 9000 and of 1 MiB, and
// reports GB per CPU-second of this process (cpu-GB/s) beside the wall
// rate (MB/s): on a machine other work shares, the wall rate is the
// scheduler's as much as the hash's.
func BenchmarkHashCPU(b *testing.B) {
	for _, size := range []int{8900, 1 << 20} {
		for _, a := range []frame.FileHashAlg{frame.FileHashSHA256, frame.FileHashBLAKE3} {
			b.Run(fmt.Sprintf("%v/%d", a, size), func(b *testing.B) {
				buf := make([]byte, size)
				for i := range buf {
					buf[i] = byte(i * 7)
				}
				h, err := files.NewHash(a)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				start, n := cpuTime(b), 0
				for b.Loop() {
					h.Write(buf)
					n++
				}
				if d := cpuTime(b) - start; d > 0 {
					b.ReportMetric(float64(n*size)/d.Seconds()/1e9, "cpu-GB/s")
				}
			})
		}
	}
}
