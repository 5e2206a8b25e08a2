package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/rbcast/rbcast/internal/localapi"
)

// sendfile names a file in its messages by the path typed (a directory
// typed joined with the file's path in it), with the path it resolved
// to beside it when that is elsewhere (a symlink on the way), not by the
// resolved path alone: a daemon's refusal of l/f, where l links to
// real, printed only "/…/real/f".
func TestSendFileNamesTypedPath(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "real", "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	resolved := filepath.Join(realRoot, "real", "f")
	for _, c := range []struct {
		arg, shown string
	}{
		{"real", "real/f"},
		{"real/", "real/f"},
		{"real/f", "real/f"},
		{"l", "l/f (resolved: " + resolved + ")"},
		{"l/f", "l/f (resolved: " + resolved + ")"},
	} {
		paths, shown, names, err := walkFiles([]string{c.arg})
		if err != nil || len(paths) != 1 || paths[0] != resolved || shown[0] != c.shown {
			t.Errorf("walkFiles(%q) = %q, %q, %q, %v; want %q shown as %q", c.arg, paths, shown, names, err, resolved, c.shown)
		}
	}

	// A daemon that refuses the file: the message names it so.
	conn := fakeDaemon(t, func(c *net.UnixConn) {
		buf := make([]byte, 1<<16)
		if _, err := c.Read(buf); err != nil { // SendFile
			return
		}
		c.Write((&localapi.Error{Code: localapi.CodeRefused, Text: "sendfile l/f: open " + resolved + ": too many open files"}).Append(nil))
		c.Read(buf)
	})
	paths, shown, names, err := walkFiles([]string{"l"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if sendFiles(conn, nil, 0, paths, shown, names, &out, &errs, nil) {
		t.Fatal("sendFiles succeeded with the file refused")
	}
	if want := "rbcastd sendfile: l/f (resolved: " + resolved + "): refused: open " + resolved + ": too many open files\n"; errs.String() != want {
		t.Errorf("stderr %q, want %q", errs.String(), want)
	}
}
