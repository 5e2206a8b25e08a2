package daemon

import (
	"path/filepath"
	"testing"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// A SendFile beyond the bound on the files queued at the daemon and not
// yet judged is refused, naming the bound and what it is derived from,
// instead of failing in the open with EMFILE; the connection goes on.
// RLIMIT_NOFILE stands at 258 for daemon 0 (its nofile), leaving room
// for 2 files: 258 less 64 (MaxOpen), 128 (2 × MaxReceiving) and 64; at
// 100 kB/s the two files of 1 MB are far from their verdicts.
func TestSendFileQueuedBound(t *testing.T) {
	ds := startFileGroupPrepared(t, rtnet.New(t, 63), 2, nil, []string{"", t.TempDir()}, 100_000, nil, func(i int, d *Daemon) {
		if i == 0 {
			d.files.nofile = 258
		}
	})
	dir := t.TempDir()
	c, _ := dial(t, ds[0].socket, true)
	for k, name := range []string{"a", "b"} {
		p := filepath.Join(dir, name)
		writeRandom(t, p, 1_000_000, uint64(70+k))
		c.Write(&localapi.SendFile{Name: name, Path: p})
		if q, ok := readMsg(t, c).(*localapi.FileQueued); !ok || q.Name != name {
			t.Fatalf("SendFile %s answered %+v, want FileQueued", name, q)
		}
	}
	p := filepath.Join(dir, "c")
	writeRandom(t, p, 10, 72)
	const want = "sendfile c: 2 files are queued at this daemon and not yet judged, its bound (2: of its RLIMIT_NOFILE, 258, 64 kept for files still open after their verdict, 128 for files it receives, 64 for the rest); send it again after a verdict (refused)"
	for range 2 { // the connection goes on
		c.Write(&localapi.SendFile{Name: "c", Path: p})
		e := readErr(t, c)
		if e.Code != localapi.CodeRefused || e.Error() != want {
			t.Fatalf("the third SendFile answered %q, want %q", e.Error(), want)
		}
		if !IsQueuedBound(e.Text, "c") { // what rbcastd sendfile sends again
			t.Fatalf("IsQueuedBound(%q, c) is false", e.Text)
		}
	}
}

// IsQueuedBound tells the bound's refusal from another that holds its
// phrase in a name or path.
func TestIsQueuedBound(t *testing.T) {
	for _, c := range []struct {
		text, name string
		want       bool
	}{
		{"sendfile c: 2 files are " + QueuedBoundText + ", its bound (2: ...); send it again after a verdict", "c", true},
		{"sendfile c: 2 files are " + QueuedBoundText + ", its bound (2: ...); send it again after a verdict", "d", false},
		{"sendfile " + QueuedBoundText + ": open /x/" + QueuedBoundText + ": permission denied", QueuedBoundText, false},
		{"sendfile a: 2 files are " + QueuedBoundText + ", its bound (", "a: 2 files are " + QueuedBoundText + ", its bound (", false},
		{"sendfile c: files are " + QueuedBoundText + ", its bound (2)", "c", false},
	} {
		if got := IsQueuedBound(c.text, c.name); got != c.want {
			t.Errorf("IsQueuedBound(%q, %q) = %v, want %v", c.text, c.name, got, c.want)
		}
	}
}
