package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/link/ring"
)

func TestFileCommandsHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"sendfile", "recvfile"}},
		{[]string{"sendfile", "--help"}, []string{"usage: rbcastd sendfile [-socket PATH] [-to IDS] [-hash blake3|sha256] FILE...", "recursively", "right hash", "-to", "-hash", "b3sum", "terminal"}},
		{[]string{"recvfile", "-h"}, []string{"usage: rbcastd recvfile [-socket PATH] -dir DIR [-count N]", "sha256sum", "b3sum -c", "blake3:", ".rbcast-partial", "-count", "-inbox"}},
		{[]string{"run", "-h"}, []string{"-inbox", "-files-group", "-file-rate", "-files", "-files-drop-written", "-files-ring-mb"}},
	} {
		code, out, errOut := runMain(c.args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: help lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

func TestFileCommandsUsageErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sendfile"}, "no FILE given"},
		{[]string{"sendfile", "-to", "1,x", "f"}, `-to: "x" is not a member id`},
		{[]string{"sendfile", "-hash", "md5", "f"}, `-hash "md5": want blake3 or sha256`},
		{[]string{"recvfile"}, "-dir DIR is required"},
		{[]string{"recvfile", "-dir", "/tmp", "-count", "-1"}, "-count is -1, want 0 or more"},
		{[]string{"recvfile", "-dir", "/tmp", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-inbox", "/nonexistent/inbox"}, "-inbox: stat /nonexistent/inbox: no such file or directory"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-inbox", file}, "-inbox: " + file + " is not a directory"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files=false", "-inbox", "/tmp"}, "-inbox, -files-group, -files-keep-free, -files-drop-written, -files-max-size, -files-max-receiving and -files-ring-mb need -files"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files-group", "1"}, "-files-group 1 is the message group's id"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files-group", "x"}, `-files-group is "x"`},
		{[]string{"run", "-i", "rbnone0", "-group", "2147483648"}, "-group 2147483648 flipped is 0"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-file-rate", "0"}, "-file-rate is 0 MB/s"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files-keep-free", "-1"}, "-files-keep-free is -1 MB, want 0..1e12"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files=false", "-files-keep-free", "10"}, "need -files"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files=false", "-files-drop-written"}, "need -files"},
		{[]string{"run", "-i", "rbnone0", "-group", "1", "-files=false", "-files-ring-mb", "64"}, "need -files"},
		{[]string{"run", "-group", "1", "-link", "udp", "-udp-peers", "127.0.0.1:7000,127.0.0.1:65535"}, "files over -link udp use each port + 1, and the -udp-peers/-udp-seed address 127.0.0.1:65535 has port 65535"},
		{[]string{"run", "-group", "1", "-link", "udp", "-udp-group", "239.1.1.1:65535", "-i", "rbnone0"}, "-udp-group 239.1.1.1:65535 has port 65535"},
	} {
		code, _, errOut := runMain(c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

func TestFileCommandsFailures(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "none.sock")
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	unreadable := filepath.Join(dir, "secret")
	os.WriteFile(unreadable, []byte("x"), 0o000)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sendfile", "-socket", sock, filepath.Join(dir, "missing")}, "missing: no such file or directory"},
		{[]string{"sendfile", "-socket", sock, empty}, "empty: no regular files under the directory"},
		{[]string{"sendfile", "-socket", sock, file}, "no daemon socket at " + sock},
		{[]string{"recvfile", "-socket", sock, "-dir", filepath.Join(dir, "nodir")}, "-dir " + filepath.Join(dir, "nodir") + ": no such file or directory"},
		{[]string{"recvfile", "-socket", sock, "-dir", file}, "not a directory"},
		{[]string{"recvfile", "-socket", sock, "-dir", dir}, "no daemon socket at " + sock},
	} {
		code, _, errOut := runMain(c.args...)
		if code != exitFail || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", c.args, code, errOut, c.want)
		}
	}
	if os.Geteuid() != 0 { // root reads every file
		code, _, errOut := runMain("sendfile", "-socket", sock, unreadable)
		if code != exitFail || !strings.Contains(errOut, "secret: permission denied") {
			t.Errorf("unreadable file: exit %d, stderr %q", code, errOut)
		}
	}
}

func TestPrintFiles(t *testing.T) {
	var b strings.Builder
	printFiles(&b, &daemon.FilesStatus{Group: 0x80000007, Running: true, Self: 1, Inbox: "/srv/in",
		Transfers: []daemon.FileTransfer{
			{Sender: 1, ID: 2, Name: "disk.img", Size: 100e6, Blocks: 68306, Sending: true, State: "multicasting", Held: 34153,
				Receivers: []daemon.FileReceiver{{Member: 3, InSnapshot: true, State: "receiving", Bytes: 40e6, BytesPerSec: 80e6, ETASeconds: 0.75}}},
			{Sender: 2, ID: 1, Name: "b.txt", Size: 10e6, Blocks: 6831, State: "receiving", Bytes: 5e6, BytesPerSec: 1e6, ETASeconds: -1},
		},
		Recent: []daemon.FileEvent{{At: "10:00", Kind: "sent", Name: "a", Size: 5, SHA256: "00112233445566778899", Missing: []string{"4: silent past the failure timeout (0 of 1 blocks)"}},
			{At: "10:01", Kind: "received", Name: "b", Size: 6, Hash: "blake3:8899aabbccddeeff00112233"}}})
	out := b.String()
	for _, w := range []string{"stored in /srv/in (-inbox)", "sending disk.img: multicasting, multicast 50.0 MB of 100.0 MB",
		"member 3: receiving, 40.0 MB of 100.0 MB, 80.0 MB/s, 1s left", "receiving b.txt from member 2: member 1: receiving, 5.0 MB of 10.0 MB, 1.0 MB/s, time left unknown",
		"sent a (5 bytes, sha256:0011223344556677…); missing 4: silent", "received b (6 bytes, blake3:8899aabbccddeeff…)"} {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}
}

// status prints the files' key mismatch and unauthenticated frames on
// lines of their own.
func TestPrintFilesKeyLines(t *testing.T) {
	var b strings.Builder
	printFiles(&b, &daemon.FilesStatus{Group: 0x80000007, Running: true, Self: 1,
		KeyMismatch:     "key mismatch: frames of the files' group dropped: 3 under a key id of neither accepted key (unknown_key), 0 with the other algorithm (-encrypt differs)",
		Unauthenticated: "unauthenticated: 5 frames of the files' group carried no authentication tag and were dropped (their sender has no key: a member without -key-file, or a station that is no member)"})
	out := b.String()
	for _, w := range []string{"\n  key mismatch: frames of the files' group dropped: 3 under", "\n  unauthenticated: 5 frames of the files' group carried no authentication tag"} {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}
}

// -files-drop-written reaches the daemon's file configuration (and so the
// store, filestore.Dir.DropWritten); by default received files' written
// pages stay in the page cache.
func TestFilesDropWrittenFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-files-drop-written"}, true},
		{[]string{"-files-drop-written=false"}, false},
	} {
		_, dc, err := checkFileFlags(t, c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if dc.Files == nil || dc.Files.DropWritten != c.want {
			t.Errorf("%v: Files %+v, want DropWritten %v", c.args, dc.Files, c.want)
		}
	}
}

// -files-ring-mb sizes the files' link's receive ring (ring.Config.RingBytes,
// a V3 ring): 16 MiB by default, link/ring's default; out of range is a
// clear error.
func TestFilesRingFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		want    int
		wantErr string
	}{
		{nil, 16 << 20, ""},
		{[]string{"-files-ring-mb", "64"}, 64 << 20, ""},
		{[]string{"-files-ring-mb", "16"}, 16 << 20, ""},
		{[]string{"-files-ring-mb", "4095"}, 4095 << 20, ""},
		{[]string{"-files-ring-mb", "0"}, 0, "-files-ring-mb is 0 MiB, want 1..4095"},
		{[]string{"-files-ring-mb", "4096"}, 0, "-files-ring-mb is 4096 MiB, want 1..4095"},
	} {
		f, _, err := checkFileFlags(t, c.args)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		rc := filesRingConfig(0x88B5, []uint32{7}, f.ringMB)
		if rc.RingBytes != c.want || rc.Version != ring.V3 || rc.BlockCount != 0 {
			t.Errorf("%v: ring config %+v, want a V3 ring of %d bytes", c.args, rc, c.want)
		}
	}
}

// checkFileFlags parses args as run's file flags and checks them for
// group 1 over the ring link, as run does.
func checkFileFlags(t *testing.T, args []string) (*fileFlags, *daemon.Config, error) {
	t.Helper()
	var f fileFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	dc := &daemon.Config{}
	dc.Group.Group = 1
	return &f, dc, f.check(&runFlags{}, dc)
}
