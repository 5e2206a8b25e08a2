package daemon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// A SendFile beyond the bound on the files queued at the daemon and not
// yet judged is refused, naming the bound and what it is derived from,
// instead of failing in the open with EMFILE; the connection goes on.
// RLIMIT_NOFILE stands at 258 for daemon 0 (its nofile), leaving room
// for 2 files: 258 less 64 (MaxOpen), 128 (2 × MaxReceiving) and 64; at
// 100 kB/s the file of 1 MB is far from its verdict, the one of 300 kB
// has it after about 3 s.
//
// A client of local API version 6 is refused with CodeQueuedBound and,
// once a place frees (here: b's verdict), sent a FileRoom, though none
// of its own files is queued (before version 6 it could only try again
// a while later); one of version 5 gets CodeRefused with the same text,
// as before, and no FileRoom (it would not decode it).
func TestSendFileQueuedBound(t *testing.T) {
	ds := startFileGroupPrepared(t, rtnet.New(t, 63), 2, nil, []string{"", t.TempDir()}, 100_000, nil, func(i int, d *Daemon) {
		if i == 0 {
			d.files.nofile = 258
		}
	})
	dir := t.TempDir()
	owner, _ := dial(t, ds[0].socket, true)
	for k, f := range []struct {
		name string
		size int
	}{{"a", 1_000_000}, {"b", 300_000}} {
		p := filepath.Join(dir, f.name)
		writeRandom(t, p, f.size, uint64(70+k))
		owner.Write(&localapi.SendFile{Name: f.name, Path: p})
		if q, ok := readMsg(t, owner).(*localapi.FileQueued); !ok || q.Name != f.name {
			t.Fatalf("SendFile %s answered %+v, want FileQueued", f.name, q)
		}
	}
	p := filepath.Join(dir, "c")
	writeRandom(t, p, 10, 72)
	const want = "sendfile c: 2 files are queued at this daemon and not yet judged, its bound (2: of its RLIMIT_NOFILE, 258, 64 kept for files still open after their verdict, 128 for files it receives, 64 for the rest); send it again after a verdict"
	v6, w := dial(t, ds[0].socket, true)
	if w.Version != 6 {
		t.Fatalf("welcomed in version %d, want 6", w.Version)
	}
	for range 2 { // the connection goes on
		v6.Write(&localapi.SendFile{Name: "c", Path: p})
		if e := readErr(t, v6); e.Code != localapi.CodeQueuedBound || e.Text != want {
			t.Fatalf("the third SendFile (version 6) answered %q, code %v; want %q, code %v", e.Text, e.Code, want, localapi.CodeQueuedBound)
		}
	}
	v5 := dialVersion(t, ds[0].socket, 5)
	v5.Write(&localapi.SendFile{Name: "c", Path: p})
	e := readErr(t, v5)
	if e.Code != localapi.CodeRefused || e.Text != want {
		t.Fatalf("the third SendFile (version 5) answered %q, code %v; want %q, code %v", e.Text, e.Code, want, localapi.CodeRefused)
	}
	if !IsQueuedBound(e.Text, "c") { // what rbcastd sendfile of version 5 sends again
		t.Fatalf("IsQueuedBound(%q, c) is false", e.Text)
	}
	if m := readMsg(t, v6); m.Type() != localapi.TFileRoom {
		t.Fatalf("the refused client of version 6 read %v, want FileRoom once b is judged", m.Type())
	}
	v6.Write(&localapi.SendFile{Name: "c", Path: p})
	if q, ok := readMsg(t, v6).(*localapi.FileQueued); !ok || q.Name != "c" {
		t.Fatalf("SendFile c after FileRoom answered %+v, want FileQueued", q)
	}
	// a and c are queued: full again. The version-5 client's next
	// message is the refusal, no FileRoom before it.
	v5.Write(&localapi.SendFile{Name: "c", Path: p})
	if m, err := v5.Read(); m != nil || err == nil || err.(*localapi.Error).Code != localapi.CodeRefused {
		t.Fatalf("SendFile c again (version 5) answered %v, %v; want the refusal", m, err)
	}
}

// dialVersion says Hello in the given local API version.
func dialVersion(t *testing.T, socket string, version uint16) *localapi.Conn {
	t.Helper()
	c, err := localapi.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := c.Write(&localapi.Hello{Version: version, Flags: localapi.HelloWaitReady}); err != nil {
		t.Fatal(err)
	}
	if w, ok := readMsg(t, c).(*localapi.Welcome); !ok || w.Version != version {
		t.Fatalf("Hello in version %d answered with %+v", version, w)
	}
	return c
}

// A client of version 6 refused for the bound that goes away leaves
// the connections waiting for a place: one that connects, is refused
// and leaves, again and again while every place is held, grows nothing.
func TestSendFileQueuedBoundGoneForgotten(t *testing.T) {
	ds := startFileGroupPrepared(t, rtnet.New(t, 64), 2, nil, []string{"", t.TempDir()}, 100_000, nil, func(i int, d *Daemon) {
		if i == 0 {
			d.files.nofile = 258
		}
	})
	dir := t.TempDir()
	owner, _ := dial(t, ds[0].socket, true)
	for k, name := range []string{"a", "b"} {
		p := filepath.Join(dir, name)
		writeRandom(t, p, 3_000_000, uint64(80+k)) // 30 s at 100 kB/s: held through the test
		owner.Write(&localapi.SendFile{Name: name, Path: p})
		if q, ok := readMsg(t, owner).(*localapi.FileQueued); !ok || q.Name != name {
			t.Fatalf("SendFile %s answered %+v, want FileQueued", name, q)
		}
	}
	p := filepath.Join(dir, "c")
	writeRandom(t, p, 10, 82)
	for i := range 5 {
		v6, _ := dial(t, ds[0].socket, true)
		v6.Write(&localapi.SendFile{Name: "c", Path: p})
		if e := readErr(t, v6); e.Code != localapi.CodeQueuedBound {
			t.Fatalf("SendFile c (client %d) answered %q, code %v; want code %v", i, e.Text, e.Code, localapi.CodeQueuedBound)
		}
		v6.Close()
	}
	// The daemon sees each close when its read of the connection ends.
	deadline := time.Now().Add(10 * time.Second)
	n := ds[0].d.files.roomsWaiting()
	for n > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		n = ds[0].d.files.roomsWaiting()
	}
	if n != 0 {
		t.Fatalf("%d connections gone after their refusal still wait for a place, want 0", n)
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
