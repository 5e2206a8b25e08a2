package filestore

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCheckName: a name off the wire (a FileOffer's) that CheckName
// accepts is stored strictly inside the root, never the root itself,
// and not under PartialDir.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"a", "a/b.img", "dir/.hidden", "../up", "/etc/passwd", ".rbcast-partial/x", "a/../.rbcast-partial", "./b", "a//b/"} {
		f.Add(s)
	}
	const root = "/srv/inbox"
	f.Fuzz(func(t *testing.T, name string) {
		if CheckName(name) != nil {
			return
		}
		rel, err := filepath.Rel(root, filepath.Join(root, filepath.FromSlash(name)))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("CheckName accepts %q, stored at %q under the root (%v)", name, rel, err)
		}
		if first, _, _ := strings.Cut(rel, "/"); first == PartialDir {
			t.Fatalf("CheckName accepts %q, under %s", name, PartialDir)
		}
	})
}
