package filestore

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A SendFile of a named pipe is refused as not a regular file: before,
// OpenSourceHashLater opened it first, and the open waited for a writer
// (the daemon's connection hung, and the file it counted as opening for
// its bound on queued files stayed counted).
func TestOpenSourcePipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pipe")
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, open := range []func(string, string) (*Source, error){OpenSourceHashLater, OpenSource} {
		done := make(chan error, 1)
		go func() {
			s, err := open(p, "pipe")
			if s != nil {
				s.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if want := p + " is not a regular file"; err == nil || err.Error() != want {
				t.Errorf("opening a named pipe: %v, want %q", err, want)
			}
		case <-time.After(10 * time.Second):
			unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK, 0) // a writer, so the open returns
			t.Fatal("opening a named pipe did not return (it waited for a writer)")
		}
	}
}
