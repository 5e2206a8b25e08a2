package replay

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead feeds arbitrary bytes to the reader and every analysis: they
// must return errors, never panic.
func FuzzRead(f *testing.F) {
	dir := f.TempDir()
	run := runLossy(f, filepath.Join(dir, "seed.pcapng"), 1, 2, 3, 0.2)
	data, err := os.ReadFile(run.path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	c, err := Parse("seed", data, ReadOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(writePcap(f, Frames(c, false), false))
	f.Add(writePcap(f, Frames(c, false), true))
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Gzip inputs decompress into megabytes of frames, which is slow
		// rather than wrong; the decompressed bytes take the same path.
		if len(data) > 1<<16 || (len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
			return
		}
		c, err := Parse("fuzz", data, ReadOptions{Partial: true})
		if c == nil {
			if err == nil {
				t.Fatal("no capture and no error")
			}
			return
		}
		WriteTimeline(io.Discard, c)
		WriteSummary(io.Discard, c)
		Check(c, CheckOptions{})
		if len(c.Interfaces) > 0 {
			if res, err := Simulate(c, SimOptions{Node: 1, Iface: 0}); err == nil {
				res.Write(io.Discard, c, false)
			}
		}
	})
}
