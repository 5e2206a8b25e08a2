package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestRecvWriteKeepsP: recv's writev (vecWriter.flush) keeps the
// process's one P through the call, as a raw system call: by Syscall the
// runtime's sysmon, woken by the first write after an idle spell, handed
// the P to another thread once the write outlasted its 20 µs look, and
// went on looking every 20 µs (docs/local-api.md, "The data path"). A
// goroutine that counts while it gets the P shows whether the P was
// handed over during a write of 8 MiB into a file; the file holds every
// byte, in order.
func TestRecvWriteKeepsP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vw := newVecWriter(f, false)
	if vw == nil {
		t.Fatal("no vecWriter for a file")
	}
	var count atomic.Uint64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				count.Add(1)
				runtime.Gosched()
			}
		}
	}()
	const piece, pieces, writes = 8 << 10, 1024, 10
	var want bytes.Buffer
	ran := 0
	for w := range writes {
		time.Sleep(time.Millisecond) // the counter runs, and sysmon sees an idle spell
		for i := range pieces {
			d := bytes.Repeat([]byte{byte(w*pieces + i)}, piece)
			vw.add(0, d)
			want.Write(d)
		}
		before := count.Load()
		if err := vw.flush(); err != nil {
			t.Fatal(err)
		}
		// One look of the counter may be under way at the call's start;
		// a P handed over runs it for the rest of the call, many times.
		if d := count.Load() - before; d > 10 {
			ran++
		}
	}
	if ran > 0 {
		t.Errorf("with GOMAXPROCS=1 another goroutine ran during %d of %d writes of %d MiB; want none (the P kept through the call)", ran, writes, piece*pieces>>20)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("the file holds %d bytes, not the %d written in order", len(got), want.Len())
	}
}
