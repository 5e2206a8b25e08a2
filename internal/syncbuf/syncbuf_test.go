package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Writers on many goroutines while a reader reads: every write is kept
// whole (run with -race, which would see an unlocked buffer), and Bytes
// is a copy that later writes leave alone.
func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fmt.Fprintf(&b, "g%d line %03d\n", g, i)
			}
		}()
	}
	for range 10 {
		_ = b.String()
	}
	wg.Wait()
	s := b.String()
	if got := strings.Count(s, "\n"); got != 400 {
		t.Fatalf("%d lines, want 400", got)
	}
	for g := range 4 {
		for i := range 100 {
			if l := fmt.Sprintf("g%d line %03d\n", g, i); !strings.Contains(s, l) {
				t.Fatalf("line %q missing", l)
			}
		}
	}
	snap := b.Bytes()
	b.Write([]byte("more"))
	if string(snap) != s {
		t.Errorf("Bytes = %d bytes after a later write, want the %d written before", len(snap), len(s))
	}
	if got := b.String(); got != s+"more" {
		t.Errorf("String ends %q, want the text then \"more\"", got[max(0, len(got)-10):])
	}
}
