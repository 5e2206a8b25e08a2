// Package syncbuf is a bytes.Buffer that goroutines or a child process
// write while a test reads it: a log a group or daemon writes, a capture
// file a Writer's goroutine fills. It is for tests.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer that keeps what is written, under a lock. The
// zero Buffer is empty and ready to use; it must not be copied after
// first use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what has been written so far: later writes do
// not change it.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
