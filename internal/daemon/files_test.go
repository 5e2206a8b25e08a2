package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// startFileGroup starts n daemons with files on, each on one simulated
// link shared by the message group and the file group (link/mux, as one
// interface carries both), with inboxes[i] as daemon i's inbox.
func startFileGroup(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, inboxes []string) []*running {
	t.Helper()
	return startFileGroupRate(t, r, n, imp, inboxes, 50_000_000)
}

func startFileGroupRate(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, inboxes []string, rate int64) []*running {
	t.Helper()
	return startFileGroupWith(t, r, n, imp, inboxes, rate, nil)
}

// fileLinks attaches daemon i of a file group to r, with imp[i] on what
// it receives (if imp has one), and muxes its link: the link, and the
// links of group 7 and of its files group.
func fileLinks(t *testing.T, r *rtnet.Net, imp []testnet.Impairment, i int) (l *rtnet.Link, group, fileGroup link.Link) {
	t.Helper()
	ep := testnet.EndpointConfig{}
	if i < len(imp) {
		ep.In = imp[i]
	}
	l = r.Attach(t, ep)
	m, err := mux.New(l, mux.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if group, err = m.Open(7); err != nil {
		t.Fatal(err)
	}
	if fileGroup, err = m.Open(FilesGroup(7)); err != nil {
		t.Fatal(err)
	}
	return l, group, fileGroup
}

// startFileGroupWith is startFileGroupRate with tune, if set, adjusting
// each daemon's configuration.
func startFileGroupWith(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, inboxes []string, rate int64, tune func(i int, c *Config)) []*running {
	t.Helper()
	return startFileGroupPrepared(t, r, n, imp, inboxes, rate, tune, nil)
}

// startFileGroupPrepared is startFileGroupWith with prepare, if set,
// called on daemon i before it runs (startDaemonWith).
func startFileGroupPrepared(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, inboxes []string, rate int64, tune func(i int, c *Config), prepare func(i int, d *Daemon)) []*running {
	t.Helper()
	dir := t.TempDir()
	out := make([]*running, n)
	for i := range n {
		l, ml, fl := fileLinks(t, r, imp, i)
		fc := &FilesConfig{Link: fl, Rate: rate}
		if i < len(inboxes) {
			fc.Inbox = inboxes[i]
		}
		cfg := Config{Logger: quiet, Group: reliable.Config{Group: 7, Size: n, Server: i == 0, FailureTimeout: testFailureTimeout}, Files: fc}
		if tune != nil {
			tune(i, &cfg)
		}
		var prep func(d *Daemon)
		if prepare != nil {
			prep = func(d *Daemon) { prepare(i, d) }
		}
		out[i] = startDaemonWith(t, ml, filepath.Join(dir, fmt.Sprintf("d%d.sock", i)), cfg, prep)
		out[i].link = l
	}
	for _, x := range out {
		x.self(t)
	}
	return out
}

func writeRandom(t *testing.T, path string, n int, seed uint64) []byte {
	t.Helper()
	data := randomBytes(seed, n)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

// readErr reads the next message within 30 s, which must be an Error.
func readErr(t *testing.T, c *localapi.Conn) *localapi.Error {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	m, err := c.Read()
	e, ok := err.(*localapi.Error)
	if !ok {
		t.Fatalf("read %v, %v; want an Error", m, err)
	}
	return e
}

// readMsg reads the next message within 30 s.
func readMsg(t *testing.T, c *localapi.Conn) localapi.Message {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	m, err := c.Read()
	if err != nil {
		t.Fatalf("reading from the daemon: %v", err)
	}
	return m
}

// A file sent through one daemon's local API reaches the others' inboxes
// under loss, and the sender's client gets the verdict naming both;
// status shows the file in its recent list.
func TestSendFileToInboxes(t *testing.T) {
	r := rtnet.New(t, 11)
	in1, in2 := t.TempDir(), t.TempDir()
	ds := startFileGroup(t, r, 3, []testnet.Impairment{{}, {Loss: 0.05}, {Loss: 0.1}}, []string{"", in1, in2})
	src := filepath.Join(t.TempDir(), "img.bin")
	data := writeRandom(t, src, 800_000, 3)

	c, _ := dial(t, ds[0].socket, true)
	if err := c.Write(&localapi.SendFile{Name: "boot/img.bin", Path: src}); err != nil {
		t.Fatal(err)
	}
	q, ok := readMsg(t, c).(*localapi.FileQueued)
	if !ok {
		t.Fatalf("SendFile answered with %v, want FileQueued", q)
	}
	// A client of version 3: the daemon hashes the file as it sends it,
	// and the verdict (FileSent) has the hash, FileQueued none.
	if q.Size != uint64(len(data)) || q.Hash != ([32]byte{}) || q.Name != "boot/img.bin" {
		t.Fatalf("FileQueued %+v does not describe the file (with no hash)", q)
	}
	v, ok := readMsg(t, c).(*localapi.FileVerdict)
	if !ok {
		t.Fatalf("then %T, want FileVerdict", v)
	}
	if v.ID != q.ID || len(v.Done) != 2 || len(v.Missing) != 0 || v.Text != "" || v.Hash != sha256.Sum256(data) || v.Type() != localapi.TFileSent {
		t.Fatalf("verdict %+v, want both receivers done and the file's hash", v)
	}
	for _, dir := range []string{in1, in2} {
		got, err := os.ReadFile(filepath.Join(dir, "boot", "img.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: the stored file differs from the one sent", dir)
		}
	}
	st := ds[0].d.Status()
	if st.Files == nil || !st.Files.Running || len(st.Files.Recent) != 1 || st.Files.Recent[0].Kind != "sent" {
		t.Fatalf("sender's files status %+v, want the file sent in recent", st.Files)
	}
	// The receivers' status says how many bytes they stored.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := ds[1].d.Status()
		if st.Files.Counters.FilesReceived == 1 && st.Files.Counters.StoredBytes == uint64(len(data)) && len(st.Files.Recent) == 1 &&
			st.Files.Recent[0].Received == uint64(len(data)) {
			break
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(st.Files)
			t.Fatalf("receiver's files status %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Metrics have the files' counters.
	rec := httptest.NewRecorder()
	ds[1].d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`rbcastd_files_total{group="7",kind="files_received"} 1`, fmt.Sprintf(`rbcastd_files_stored_bytes_total{group="7"} %d`, len(data))} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// recvfile's request: a client's directory takes the files (before the
// inbox), and the client gets a FileReport for each.
func TestReceiveFilesClient(t *testing.T) {
	r := rtnet.New(t, 12)
	inbox := t.TempDir()
	ds := startFileGroup(t, r, 2, nil, []string{"", inbox})
	dir := t.TempDir()
	rc, _ := dial(t, ds[1].socket, true)
	if err := rc.Write(&localapi.ReceiveFiles{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if m, ok := readMsg(t, rc).(*localapi.ReceivingFiles); !ok || m.Dir != dir {
		t.Fatalf("ReceiveFiles answered with %+v", m)
	}
	src := filepath.Join(t.TempDir(), "a.txt")
	data := writeRandom(t, src, 5000, 4)
	c, _ := dial(t, ds[0].socket, true)
	c.Write(&localapi.SendFile{To: []uint16{uint16(ds[1].self(t))}, Name: "a.txt", Path: src})
	readMsg(t, c)
	rep, ok := readMsg(t, rc).(*localapi.FileReport)
	if !ok || rep.Kind != localapi.FileReceived || rep.Name != "a.txt" || rep.Hash != sha256.Sum256(data) || rep.Size != 5000 {
		t.Fatalf("report %+v, want a.txt received", rep)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the client's directory holds %d bytes (%v), want the file", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(inbox, "a.txt")); err == nil {
		t.Fatal("the file was stored in the inbox too")
	}
}

// A file sent with BLAKE3 (SendFileAlg, local API version 4) is hashed
// so: the sender's verdict (FileSentAlg) and the receiving client's
// report (FileReportAlg) carry its BLAKE3, the library's Sum256 of the
// bytes, and name the algorithm; status shows it as blake3:hex.
func TestSendFileBLAKE3(t *testing.T) {
	r := rtnet.New(t, 14)
	ds := startFileGroup(t, r, 2, []testnet.Impairment{{}, {Loss: 0.05}}, nil)
	dir := t.TempDir()
	rc, _ := dial(t, ds[1].socket, true)
	if err := rc.Write(&localapi.ReceiveFiles{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	readMsg(t, rc)
	src := filepath.Join(t.TempDir(), "b.bin")
	data := writeRandom(t, src, 300_000, 5)
	c, _ := dial(t, ds[0].socket, true)
	c.Write(&localapi.SendFile{Name: "b.bin", Path: src, HashAlg: localapi.FileHashBLAKE3})
	if q, ok := readMsg(t, c).(*localapi.FileQueued); !ok || q.Hash != ([32]byte{}) {
		t.Fatalf("SendFile answered %+v, want FileQueued without a hash", q)
	}
	want := blake3.Sum256(data)
	v, ok := readMsg(t, c).(*localapi.FileVerdict)
	if !ok || len(v.Done) != 1 || v.Hash != want || v.HashAlg != localapi.FileHashBLAKE3 || v.Type() != localapi.TFileSentAlg {
		t.Fatalf("verdict %+v, want the receiver done and the file's BLAKE3", v)
	}
	rep, ok := readMsg(t, rc).(*localapi.FileReport)
	if !ok || rep.Kind != localapi.FileReceived || rep.Hash != want || rep.HashAlg != localapi.FileHashBLAKE3 {
		t.Fatalf("report %+v, want b.bin received with its BLAKE3", rep)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "b.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the client's directory holds %d bytes (%v), want the file", len(got), err)
	}
	if ev := ds[0].d.Status().Files.Recent; len(ev) != 1 || ev[0].Hash != fmt.Sprintf("blake3:%x", want) || ev[0].SHA256 != "" {
		t.Fatalf("sender's recent files %+v, want the file as blake3:hex", ev)
	}
	// An algorithm the daemon does not know is refused.
	c.Write(&localapi.SendFile{Name: "b.bin", Path: src, HashAlg: 9})
	if e := readErr(t, c); e.Code != localapi.CodeRefused || !strings.Contains(e.Text, "hash algorithm hash(9) is unknown to this daemon") {
		t.Fatalf("SendFile with algorithm 9 answered %+v", e)
	}
}

// Bad file requests are refused with a reason, and the connection goes on.
func TestFileRequestErrors(t *testing.T) {
	r := rtnet.New(t, 13)
	ds := startFileGroup(t, r, 2, nil, nil)
	c, _ := dial(t, ds[0].socket, true)
	self := uint16(ds[0].self(t))
	file := filepath.Join(t.TempDir(), "f")
	writeRandom(t, file, 10, 1)
	for _, x := range []struct {
		m    localapi.Message
		want string
	}{
		{&localapi.SendFile{Name: "f", Path: "relative/f"}, `the path "relative/f" is not absolute`},
		{&localapi.SendFile{Name: "f", Path: "/nonexistent/f"}, "no such file or directory"},
		{&localapi.SendFile{Name: "../f", Path: file}, "is not a local relative path"},
		{&localapi.SendFile{Name: "f", Path: file, To: []uint16{99}}, "member 99 is not in the group"},
		{&localapi.SendFile{Name: "f", Path: file, To: []uint16{self}}, "is this daemon itself"},
		{&localapi.SendFile{Name: "f", Path: filepath.Dir(file)}, "is not a regular file"},
	} {
		if err := c.Write(x.m); err != nil {
			t.Fatal(err)
		}
		e := readErr(t, c)
		if e.Code != localapi.CodeRefused || !strings.Contains(e.Text, x.want) {
			t.Errorf("%+v answered %+v, want a refusal containing %q", x.m, e, x.want)
		}
	}
	rc, _ := dial(t, ds[0].socket, true)
	rc.Write(&localapi.ReceiveFiles{Dir: file})
	if e := readErr(t, rc); !strings.Contains(e.Text, "is not a directory") {
		t.Errorf("ReceiveFiles of a file answered %+v", e)
	}
}

// A daemon without files refuses file requests, saying so.
func TestFilesOff(t *testing.T) {
	r := rtnet.New(t, 14)
	ds := startGroup(t, r, 1, nil, nil)
	c, _ := dial(t, ds[0].socket, true)
	c.Write(&localapi.SendFile{Name: "f", Path: "/etc/hostname"})
	if e := readErr(t, c); !strings.Contains(e.Text, "carries no files") {
		t.Fatalf("answered %+v", e)
	}
	// A ReceiveFiles refused says why without the request's name, which
	// rbcastd recvfile puts before it.
	rc, _ := dial(t, ds[0].socket, true)
	rc.Write(&localapi.ReceiveFiles{Dir: t.TempDir()})
	if e := readErr(t, rc); !strings.HasPrefix(e.Text, "this daemon carries no files") {
		t.Fatalf("ReceiveFiles answered %+v", e)
	}
	if st := ds[0].d.Status(); st.Files != nil {
		t.Fatalf("status has files %+v", st.Files)
	}
}

// While a file is under way, both ends' status show it: the receiver's
// bytes held, rate and time left; the sender's receivers with theirs;
// and the metrics a receiver's held bytes.
func TestFileProgressInStatus(t *testing.T) {
	r := rtnet.New(t, 15)
	inbox := t.TempDir()
	ds := startFileGroupRate(t, r, 2, nil, []string{"", inbox}, 1_000_000)
	src := filepath.Join(t.TempDir(), "slow.bin")
	writeRandom(t, src, 4_000_000, 5)
	c, _ := dial(t, ds[0].socket, true)
	c.Write(&localapi.SendFile{Name: "slow.bin", Path: src})
	readMsg(t, c)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rs, ss := ds[1].d.Status().Files, ds[0].d.Status().Files
		var rt, st *FileTransfer
		for i := range rs.Transfers {
			if !rs.Transfers[i].Sending {
				rt = &rs.Transfers[i]
			}
		}
		for i := range ss.Transfers {
			if ss.Transfers[i].Sending {
				st = &ss.Transfers[i]
			}
		}
		if rt != nil && st != nil && len(st.Receivers) == 1 && rt.Bytes > 0 && rt.Bytes < 4_000_000 && rt.BytesPerSec > 0 && rt.ETASeconds > 0 &&
			st.Receivers[0].Bytes > 0 && st.Receivers[0].BytesPerSec > 0 && st.Receivers[0].ETASeconds > 0 && rt.Dir == inbox {
			if rt.Name != "slow.bin" || rt.Size != 4_000_000 || st.Receivers[0].Member != ds[1].self(t) || !st.Receivers[0].InSnapshot && st.State != "multicasting" {
				t.Fatalf("receiver's transfer %+v, sender's %+v", rt, st)
			}
			rec := httptest.NewRecorder()
			ds[1].d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if body, _ := io.ReadAll(rec.Body); !strings.Contains(string(body), `rbcastd_file_held_bytes{file="1",group="7",receiver="`) {
				t.Fatalf("metrics lack the file's held bytes:\n%s", body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress with a rate shown: receiver %+v, sender %+v", rs.Transfers, ss.Transfers)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A client of local API version 2 gets the file's hash in FileQueued (the
// daemon hashes it before it sends it, as before version 3) and a
// FileVerdict without one.
func TestSendFileVersion2(t *testing.T) {
	r := rtnet.New(t, 12)
	in1 := t.TempDir()
	ds := startFileGroup(t, r, 2, []testnet.Impairment{{}, {}}, []string{"", in1})
	src := filepath.Join(t.TempDir(), "v2.bin")
	data := writeRandom(t, src, 100_000, 4)
	c, err := localapi.Dial(ds[0].socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := c.Write(&localapi.Hello{Version: 2, Flags: localapi.HelloWaitReady}); err != nil {
		t.Fatal(err)
	}
	if w, ok := readMsg(t, c).(*localapi.Welcome); !ok || w.Version != 2 {
		t.Fatalf("Hello in version 2 answered with %+v", w)
	}
	if err := c.Write(&localapi.SendFile{Name: "v2.bin", Path: src}); err != nil {
		t.Fatal(err)
	}
	q, ok := readMsg(t, c).(*localapi.FileQueued)
	if !ok || q.Hash != sha256.Sum256(data) {
		t.Fatalf("SendFile answered with %+v, want FileQueued with the file's hash", q)
	}
	v, ok := readMsg(t, c).(*localapi.FileVerdict)
	if !ok || v.Type() != localapi.TFileVerdict || len(v.Done) != 1 || v.Hash != ([32]byte{}) {
		t.Fatalf("then %+v, want a FileVerdict without a hash, member 1 done", v)
	}
	if got, err := os.ReadFile(filepath.Join(in1, "v2.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want the file", len(got), err)
	}
}

// A receiver restarted between two sends of the same file (the offers
// without a hash, as to a client of version 3) does not receive it
// again: it holds it, the stored file untouched; a changed file of the
// same name and size is received again and replaces it. Each send runs
// on daemons started anew on the same inbox.
func TestSendFileAgainAfterRestart(t *testing.T) {
	inbox := t.TempDir()
	src := filepath.Join(t.TempDir(), "img.bin")
	round := func(seed uint64, data []byte) (FileEvent, FileCounters) {
		t.Helper()
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ds := startFileGroup(t, rtnet.New(t, seed), 2, []testnet.Impairment{{}, {Loss: 0.05}}, []string{"", inbox})
		defer func() {
			for _, x := range ds {
				x.stop(t)
			}
		}()
		c, _ := dial(t, ds[0].socket, true)
		if err := c.Write(&localapi.SendFile{Name: "img.bin", Path: src}); err != nil {
			t.Fatal(err)
		}
		if q, ok := readMsg(t, c).(*localapi.FileQueued); !ok || q.Hash != ([32]byte{}) {
			t.Fatalf("SendFile answered with %+v, want FileQueued without a hash", q)
		}
		v, ok := readMsg(t, c).(*localapi.FileVerdict)
		if !ok || len(v.Done) != 1 || len(v.Missing) != 0 || v.Hash != sha256.Sum256(data) {
			t.Fatalf("verdict %+v, want the receiver done", v)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if st := ds[1].d.Status(); st.Files != nil && len(st.Files.Recent) == 1 {
				return st.Files.Recent[0], st.Files.Counters
			}
			if time.Now().After(deadline) {
				t.Fatal("the receiver's status shows no file received")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	data := randomBytes(21, 600_000)
	stored := filepath.Join(inbox, "img.bin")
	check := func(what string, ev FileEvent, k FileCounters, want []byte, received uint64, detail string, held, mismatches uint64) {
		t.Helper()
		if ev.Kind != "received" || ev.Received != received || !strings.Contains(ev.Detail, detail) {
			t.Fatalf("%s: %+v, want received with %d bytes written, %q", what, ev, received, detail)
		}
		if k.FilesHeld != held || k.HeldMismatches != mismatches || k.FilesReceived != 1 {
			t.Fatalf("%s: counters %+v, want %d held, %d held mismatches", what, k, held, mismatches)
		}
		if got, err := os.ReadFile(stored); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: the inbox holds %d bytes (%v), not the file sent", what, len(got), err)
		}
	}
	ev, k := round(31, data)
	check("first send", ev, k, data, uint64(len(data)), "", 0, 0)
	before, err := os.Stat(stored)
	if err != nil {
		t.Fatal(err)
	}
	ev, k = round(32, data)
	check("the same file again", ev, k, data, 0, "held already", 1, 0)
	if after, err := os.Stat(stored); err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("the stored file was replaced, though the receiver held it")
	}
	changed := bytes.Clone(data)
	changed[300_000] ^= 0xff
	ev, k = round(33, changed)
	check("a changed file of the same name and size", ev, k, changed, uint64(len(changed)), "replaced another file", 0, 1)
}

// A client the daemon told it is ready (Welcome after HelloWaitReady) can
// send a file at once: the daemon starts its file core on a membership
// before it makes the membership its group. It started it after, and a
// SendFile in between was refused as if the daemon were joining the group
// again (seen on a loaded machine). Daemon 0's file core, as it starts,
// waits for the client's answer if the daemon already says it is ready:
// with the old order the client's SendFile always came in between.
func TestSendFileAsSoonAsReady(t *testing.T) {
	inbox := t.TempDir()
	src := filepath.Join(t.TempDir(), "first.bin")
	data := writeRandom(t, src, 20_000, 61)
	answered := make(chan struct{})
	var d0 *Daemon // set by prepare, before daemon 0 runs
	ds := startFileGroupPrepared(t, rtnet.New(t, 61), 2, nil, []string{"", inbox}, 50_000_000, func(i int, c *Config) {
		if i != 0 {
			return
		}
		c.Files.Tune = func(*reliable.FilesConfig) {
			if d0.isReady() {
				<-answered
			}
		}
	}, func(i int, d *Daemon) {
		if i == 0 {
			d0 = d
		}
	})
	var once sync.Once
	answer := func() { once.Do(func() { close(answered) }) }
	t.Cleanup(answer) // before the daemons stop (cleanups run last first)
	c, _ := dial(t, ds[0].socket, true)
	if err := c.Write(&localapi.SendFile{Name: "first.bin", Path: src}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Read()
	answer()
	if _, ok := m.(*localapi.FileQueued); !ok || err != nil {
		t.Fatalf("SendFile right after the Welcome answered %v, %v; want FileQueued", m, err)
	}
	if v, ok := readMsg(t, c).(*localapi.FileVerdict); !ok || len(v.Done) != 1 || len(v.Missing) != 0 || v.Text != "" {
		t.Fatalf("verdict %+v, want the receiver done", v)
	}
	if got, err := os.ReadFile(filepath.Join(inbox, "first.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the inbox holds %d bytes (%v), not the file sent", len(got), err)
	}
}

// A file's verdict can be ready before the SendFile that sent it has its
// FileQueued answer (a small file; on a loaded machine a file every
// receiver held already): the client still gets FileQueued first, as it
// learns the file's id from it. The verdict was written from a goroutine
// of its own as soon as it was ready, and came first now and then
// ("SendFile answered with <nil>" in TestSendFileAgainAfterRestart). Here
// daemon 0 holds the FileQueued back until the verdict is out (in its
// recent files) and the client has a packet waiting, or a while longer:
// with the old order the client read the verdict first.
func TestSendFileQueuedBeforeVerdict(t *testing.T) {
	inbox := t.TempDir()
	src := filepath.Join(t.TempDir(), "small.bin")
	data := writeRandom(t, src, 5_000, 62)
	var c *localapi.Conn
	ready := make(chan struct{})
	ds := startFileGroupPrepared(t, rtnet.New(t, 62), 2, nil, []string{"", inbox}, 50_000_000, nil, func(i int, d *Daemon) {
		if i != 0 {
			return
		}
		s := d.files
		s.queuedHook = func() {
			<-ready
			sent := func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return slices.ContainsFunc(s.recent, func(e FileEvent) bool { return e.Kind == "sent" })
			}
			for !sent() {
				runtime.Gosched()
			}
			for k := 0; k < 10_000 && !c.Pending(); k++ {
				runtime.Gosched()
			}
		}
	})
	c, _ = dial(t, ds[0].socket, true)
	close(ready)
	if err := c.Write(&localapi.SendFile{Name: "small.bin", Path: src}); err != nil {
		t.Fatal(err)
	}
	q, ok := readMsg(t, c).(*localapi.FileQueued)
	if !ok {
		t.Fatalf("SendFile answered with %+v, want FileQueued before the verdict", q)
	}
	if v, ok := readMsg(t, c).(*localapi.FileVerdict); !ok || v.ID != q.ID || len(v.Done) != 1 || v.Text != "" {
		t.Fatalf("then %+v, want the verdict of file %d, the receiver done", v, q.ID)
	}
	if got, err := os.ReadFile(filepath.Join(inbox, "small.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the inbox holds %d bytes (%v), not the file sent", len(got), err)
	}
}
