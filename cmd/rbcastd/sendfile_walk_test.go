package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rbcast/rbcast/internal/filestore"
)

// A walk that fails under a directory names the path that failed, as
// typed (under the directory as given, a symlink's name kept), not the
// directory alone: before, a sub-directory sendfile could not read,
// photos/2019/raw, was reported as "photos: permission denied". As root
// permissions do not stop the walk, so the walk is made to fail where a
// directory of mode 0 would make it (filestore.WalkAs's error: the
// resolved path, wrapped); as another user a real one does too.
func TestSendFileWalkErrorNamesSubPath(t *testing.T) {
	root := t.TempDir()
	raw := filepath.Join(root, "photos", "2019", "raw")
	if err := os.MkdirAll(raw, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "photos", "a.jpg"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("photos", filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func(w func([]string) ([]string, []string, []string, error)) { walkAs = w }(walkAs)
	for _, c := range []struct {
		arg, failed, want string
	}{
		{"photos", "photos/2019/raw", "photos/2019/raw: permission denied"},
		{"photos/", "photos/2019/raw", "photos/2019/raw: permission denied"},
		{"l", "photos/2019/raw", "l/2019/raw: permission denied"},
		{"photos", "photos", "photos: permission denied"},
		{"photos", "elsewhere/x", "photos: " + filepath.Join(realRoot, "elsewhere/x") + ": permission denied"},
	} {
		walkAs = func([]string) ([]string, []string, []string, error) {
			return nil, nil, nil, fmt.Errorf("filestore: %w", &fs.PathError{Op: "open", Path: filepath.Join(realRoot, c.failed), Err: syscall.EACCES})
		}
		if _, _, _, err := walkFiles([]string{c.arg}); err == nil || err.Error() != c.want {
			t.Errorf("walkFiles(%q) failing at %s: %v, want %q", c.arg, c.failed, err, c.want)
		}
	}
	walkAs = filestore.WalkAs
	if os.Geteuid() == 0 {
		t.Log("as root a directory of mode 0 is read: the real walk's part is skipped")
		return
	}
	if err := os.Chmod(raw, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(raw, 0o755)
	if _, _, _, err := walkFiles([]string{"photos"}); err == nil || err.Error() != "photos/2019/raw: permission denied" {
		t.Errorf("walkFiles(photos) with photos/2019/raw of mode 0: %v, want %q", err, "photos/2019/raw: permission denied")
	}
}
