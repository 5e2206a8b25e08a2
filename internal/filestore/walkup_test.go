package filestore

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A directory given as ".." (or ending in it) is sent under the name of
// the directory it is, and the file system's root under its files' paths
// only: Walk made names starting with ".." or "/" from them, which the
// daemon refuses to send (CheckName), so "sendfile .." failed.
func TestWalkUp(t *testing.T) {
	top := t.TempDir()
	sub := filepath.Join(top, "tree", "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	for _, c := range []struct {
		arg  string
		want string
	}{
		{"..", "tree/sub/f"},
		{"../..", filepath.Base(top) + "/tree/sub/f"},
		{".", "f"},
		{"../../tree/..", filepath.Base(top) + "/tree/sub/f"},
	} {
		_, names, err := Walk([]string{c.arg})
		if err != nil || !slices.Equal(names, []string{c.want}) {
			t.Errorf("Walk(%q): %q (%v), want %q", c.arg, names, err, c.want)
			continue
		}
		if err := CheckName(names[0]); err != nil {
			t.Errorf("Walk(%q): %v", c.arg, err)
		}
	}
	if b, err := dirBase("/"); b != "" || err != nil {
		t.Errorf("the root's files are sent under %q (%v), want their paths only", b, err)
	}
}
