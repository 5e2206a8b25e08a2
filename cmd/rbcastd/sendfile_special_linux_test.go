package main

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sendfile given a named pipe says it is not a regular file, naming it as
// typed: before, walkFiles opened it to see that it is readable, and the
// open of a pipe without a writer never returned (sendfile hung).
func TestSendFileNamedPipe(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := unix.Mkfifo("pipe", 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("pipe")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, _, err := walkFiles([]string{"pipe"})
		done <- err
	}()
	select {
	case err := <-done:
		if want := "pipe: not a regular file (a named pipe)"; err == nil || err.Error() != want {
			t.Errorf("walkFiles(pipe) = %v, want %q", err, want)
		}
	case <-time.After(10 * time.Second):
		unix.Open(abs, unix.O_WRONLY|unix.O_NONBLOCK, 0) // a writer, so the open returns
		t.Fatal("walkFiles(pipe) did not return (it opened the pipe, waiting for a writer)")
	}
	if _, _, _, err := walkFiles([]string{"/dev/null"}); err == nil || err.Error() != "/dev/null: not a regular file (a character device)" {
		t.Errorf("walkFiles(/dev/null) = %v, want it named not a regular file", err)
	}
}
