package filestore

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rbcast/rbcast/reliable/files"
)

// stubDatasync replaces datasync for a test with f.
func stubDatasync(t *testing.T, f func() error) {
	t.Helper()
	old := datasync
	t.Cleanup(func() { datasync = old })
	datasync = func(*os.File) error { return f() }
}

// flushBlock is the flush tests' block size: runs of 4 blocks, a flush
// every 8.
const flushBlock = 1000

// flushCopy opens the partial copy of a file of n random blocks in a
// directory of its own, runs of 4 blocks and a flush every 8 for the
// test.
func flushCopy(t *testing.T, n int, seed uint64) (*partial, files.Meta, []byte) {
	t.Helper()
	oldRun, oldFlush := runBytes, flushBehind
	t.Cleanup(func() { runBytes, flushBehind = oldRun, oldFlush })
	runBytes, flushBehind = 4*flushBlock, 8*flushBlock
	data := randomBytes(n*flushBlock, seed)
	m := meta("f", data, flushBlock)
	f, _, err := (&Dir{Root: t.TempDir()}).Open(m)
	if err != nil {
		t.Fatal(err)
	}
	return f.(*partial), m, data
}

// writeBlocks writes blocks [from, to) of data to p.
func writeBlocks(t *testing.T, p *partial, data []byte, from, to uint32) {
	t.Helper()
	for b := from; b < to; b++ {
		if err := p.WriteBlock(b, data[int(b)*flushBlock:min(len(data), int(b+1)*flushBlock)]); err != nil {
			t.Fatal(err)
		}
	}
}

// A copy is flushed to the disk while it is written, every flushBehind
// bytes, one flush at a time, not only by Commit's fsync: a flush still
// in flight when the next flushBehind bytes are written is not joined by
// a second, and Commit waits for it.
func TestFlushedAsWritten(t *testing.T) {
	p, m, data := flushCopy(t, 100, 31)
	var mu sync.Mutex
	block := make(chan struct{})
	calls, inFlight, most := 0, 0, 0
	stubDatasync(t, func() error {
		mu.Lock()
		calls++
		inFlight++
		most = max(most, inFlight)
		first := calls == 1
		mu.Unlock()
		if first {
			<-block // the first flush lasts until half the file is written
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})

	half := m.Blocks() / 2
	writeBlocks(t, p, data, 0, half)
	if p.flushes != 1 {
		t.Fatalf("half the file written with the first flush in flight: %d flushes started, want 1", p.flushes)
	}
	close(block)
	p.waitFlush()
	writeBlocks(t, p, data, half, m.Blocks())
	// 100 blocks, 25 runs written: flushes start at 8 blocks and, the
	// first one ended at 50, at 52 and every 8 after while none is in
	// flight.
	if p.flushes < 2 {
		t.Fatalf("the file written: %d flushes started, want 2 or more", p.flushes)
	}
	if _, err := p.Sum(); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if inFlight != 0 {
		t.Fatalf("%d flushes in flight after Commit", inFlight)
	}
	if most != 1 || calls != p.flushes {
		t.Fatalf("%d flushes in flight at once (want 1), %d run of %d started", most, calls, p.flushes)
	}
	got, err := os.ReadFile(p.final)
	if err != nil || string(got) != string(data) {
		t.Fatalf("the stored file: %d bytes, %v", len(got), err)
	}
}

// An error a background flush met (a writeback error, which the kernel
// reports once per open file) fails Commit even though its own fsync
// succeeds: the file is not stored under its name.
func TestFlushErrorFailsCommit(t *testing.T) {
	p, m, data := flushCopy(t, 40, 32)
	defer p.Abort(false)
	var mu sync.Mutex
	calls := 0
	stubDatasync(t, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 1 {
			return syscall.EIO
		}
		return nil
	})
	writeBlocks(t, p, data, 0, m.Blocks())
	if _, err := p.Sum(); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "to the disk as it was written") {
		t.Fatalf("Commit = %v, want the flush's EIO, named as the flush's", err)
	}
	if _, err := os.Stat(p.final); !os.IsNotExist(err) {
		t.Fatalf("the file is stored under its name after a failed flush: %v", err)
	}
}
