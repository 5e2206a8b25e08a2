package filestore

import (
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/reliable/files"
)

// The store's refusals and errors read as the daemon's: the file and the
// reason, with no Go package's prefix ("filestore: ", or the sentinel's
// "files: …" after it), and each is still its sentinel (errors.Is), by
// which the core tells the sender the reason. They reached users so:
// sendfile printed "refused: filestore: open …", rbcastd's log
// "filestore: name … : files: name not a local file path".
func TestErrorTexts(t *testing.T) {
	root := t.TempDir()
	d := &Dir{Root: root, KeepFree: math.MaxUint64 / 2}
	missing := filepath.Join(root, "missing")
	_, _, errOpen := d.Open(meta("big.bin", make([]byte, 10), 5))
	_, errSrc := OpenSourceHashLater(missing, "missing")
	_, errBadSrc := OpenSourceHashLater(missing, "../x")
	_, _, errWalk := Walk([]string{missing})
	long := strings.Repeat("n", 300)
	_, _, errLong := (&Dir{Root: root}).Open(meta(long, make([]byte, 10), 5))
	for _, c := range []struct {
		err  error
		want string
		is   error
	}{
		{CheckName("../up"), `name "../up" is not a local relative path`, files.ErrBadName},
		{CheckName("a/.."), `name "a/.." names the root itself, not a file under it`, files.ErrBadName},
		{CheckName(PartialDir + "/x"), `name ".rbcast-partial/x" is under .rbcast-partial, where partial copies live`, files.ErrBadName},
		{errLong, `name "` + long + `" has a component of 300 bytes, more than the 255 the file system under ` + root + ` takes`, files.ErrNameTooLong},
		{errOpen, "", files.ErrNoSpace},
		{errBadSrc, `name "../x" is not a local relative path`, files.ErrBadName},
		{errSrc, "open " + missing + ": no such file or directory", fs.ErrNotExist},
		{errWalk, "stat " + missing + ": no such file or directory", fs.ErrNotExist},
	} {
		if c.err == nil {
			t.Errorf("no error, want %q", c.want)
			continue
		}
		if got := c.err.Error(); c.want != "" && got != c.want || strings.Contains(got, "filestore:") || strings.Contains(got, "files:") {
			t.Errorf("error %q, want %q (no package's prefix)", got, c.want)
		}
		if !errors.Is(c.err, c.is) {
			t.Errorf("error %q is not %v", c.err, c.is)
		}
	}
	if got := errOpen.Error(); !strings.HasPrefix(got, "big.bin needs 10 bytes more under "+root+", which has ") {
		t.Errorf("no room: %q, want it to name the file, what it needs and where", got)
	}
}
