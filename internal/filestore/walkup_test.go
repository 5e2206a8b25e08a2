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
	if b, err := dirBase("/", "/"); b != "" || err != nil {
		t.Errorf("the root's files are sent under %q (%v), want their paths only", b, err)
	}
}

// A path through a symlink is walked as the file system resolves it: a
// symlink to a directory sends the directory's files under the link's
// name (WalkDir, given the link, found nothing, and sendfile said "no
// regular files under the directory"), and "l/.." for a symlink l is the
// directory above l's target, not the one above l (filepath.Join had
// dropped "l/.." and the walk failed: "open sub: no such file or
// directory"). A directory named explicitly keeps its name even when it
// is the working directory.
func TestWalkSymlink(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(top, "tree", "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(sub, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("tree", "sub"), filepath.Join(top, "l")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(top)
	for _, c := range []struct {
		arg  string
		want string
	}{
		{"l", "l/f"},
		{"l/", "l/f"},
		{"l/..", "tree/sub/f"},
		{"l/../sub/f", "f"},
		{"l/../..", "tree/sub/f"},
	} {
		paths, names, err := Walk([]string{c.arg})
		if err != nil || !slices.Equal(names, []string{c.want}) || !slices.Equal(paths, []string{f}) {
			t.Errorf("Walk(%q): %q of %q (%v), want %q of %q", c.arg, names, paths, err, c.want, f)
		}
	}
	t.Chdir(sub)
	if _, names, err := Walk([]string{"../sub"}); err != nil || !slices.Equal(names, []string{"sub/f"}) {
		t.Errorf("Walk(\"../sub\") in sub: %q (%v), want [\"sub/f\"]", names, err)
	}
}
