package filestore

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
)

// offerTo steps receiver r (pair's member 2) with member 1's offer of a
// file name of size bytes, and returns the one report r sends back.
func offerTo(t *testing.T, r *files.Core, name string, size uint64) frame.FileStatusBody {
	t.Helper()
	b, err := frame.Append(nil, &frame.Header{Group: 3, Sender: 1, Incarnation: 1},
		&frame.FileOfferBody{ID: 5, Size: size, BlockSize: 1000, Stamp: 7, Name: []byte(name)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := frame.ParseGroup(b, 3)
	if err != nil {
		t.Fatal(err)
	}
	r.Step(10, pair[0].MAC, pair[1].MAC, v)
	var reps []frame.FileStatusBody
	for _, f := range r.Ready().Frames {
		_, body, _ := frame.SplitEthernet(f, frame.EtherType)
		v, err := frame.ParseGroup(body, 3)
		if err != nil {
			t.Fatal(err)
		}
		if v.Type() == frame.FileStatus {
			reps = append(reps, v.FileStatus())
		}
	}
	r.Advance()
	if len(reps) != 1 {
		t.Fatalf("offer of %q, %d bytes: %d reports, want 1", name, size, len(reps))
	}
	return reps[0]
}

// fsizeChild is set in the child that TestOpenTooBigForFS runs in.
const fsizeChild = "RBCAST_FILESTORE_FSIZE_CHILD"

// A file larger than a file may be where it would be stored is refused
// at its offer (files.ErrTooBigForFS; the core tells the sender reason
// 12), found by sizing the partial copy: here the process's
// RLIMIT_FSIZE, lowered to 1 MiB for the test (Go ignores SIGXFSZ, so
// ftruncate fails with EFBIG), as a FAT file system's 4 GiB or ext4's
// 16 TiB would. What the refused offer made is removed; a file of the
// limit's size is taken. A size no file can have (over 2⁶³−1) is refused
// before anything is made. It was a storage failure (reason 1) before.
//
// The limit is the whole process's: lowered in the test binary itself, it
// also failed the writes of `go test`'s own log of the tests' file
// operations (testlog.txt, past 1 MiB by then: "can't write testlog.txt:
// file too large", the package FAIL after every test passed). So the test
// runs in a child test binary of its own, with the limit lowered there.
func TestOpenTooBigForFS(t *testing.T) {
	if os.Getenv(fsizeChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestOpenTooBigForFS$", "-test.v")
		cmd.Env = append(os.Environ(), fsizeChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the test in a child process: %v\n%s", err, out)
		}
		if bytes.Contains(out, []byte("--- SKIP")) {
			t.Skipf("in a child process:\n%s", out)
		}
		if !bytes.Contains(out, []byte("--- PASS: TestOpenTooBigForFS")) {
			t.Fatalf("the child process ran no TestOpenTooBigForFS:\n%s", out)
		}
		return
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20
	if old.Cur != unix.RLIM_INFINITY && old.Cur < limit {
		t.Skipf("RLIMIT_FSIZE is %d already, under the test's %d", old.Cur, limit)
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_FSIZE, &old)

	root := t.TempDir()
	data := randomBytes(limit+1, 5)
	_, _, err := (&Dir{Root: root}).Open(meta("big.bin", data, 1000))
	if !errors.Is(err, files.ErrTooBigForFS) || !strings.Contains(err.Error(), "big.bin is 1048577 bytes, more than this process may write to a file (RLIMIT_FSIZE 1048576)") {
		t.Fatalf("Open of a file over RLIMIT_FSIZE: %v, want ErrTooBigForFS naming the limit", err)
	}
	if _, err := os.Stat(filepath.Join(root, PartialDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused file left the partial directory: %v", err)
	}
	// Nor does it leave a root it made (an -inbox made at its first file).
	top := t.TempDir()
	_, _, err = (&Dir{Root: filepath.Join(top, "inbox", "new")}).Open(meta("big.bin", data, 1000))
	if !errors.Is(err, files.ErrTooBigForFS) {
		t.Fatalf("Open of a file over RLIMIT_FSIZE under a root not there yet: %v, want ErrTooBigForFS", err)
	}
	if ents, err := os.ReadDir(top); err != nil || len(ents) != 0 {
		t.Errorf("a refused file under a root not there yet left %v (%v)", ents, err)
	}
	f, _, err := (&Dir{Root: root}).Open(meta("fits.bin", data[:limit], 1000))
	if err != nil {
		t.Fatalf("Open of a file of RLIMIT_FSIZE's size: %v", err)
	}
	f.Abort(false)

	m := meta("huge.bin", nil, 1000)
	m.Size = math.MaxInt64 + 1
	if _, _, err := (&Dir{Root: t.TempDir()}).Open(m); !errors.Is(err, files.ErrTooBigForFS) || !strings.Contains(err.Error(), "more than any file may hold") {
		t.Fatalf("Open of a file of 2⁶³ bytes: %v, want ErrTooBigForFS", err)
	}

	// The core refuses it and tells the sender which limit.
	r := pairCore(t, 2, &Dir{Root: root})
	if st := offerTo(t, r, "big.bin", limit+1); st.State != frame.FileFailed || st.Reason != frame.FileTooBigForFS {
		t.Fatalf("the receiver reported %+v, want failed, %v", st, frame.FileTooBigForFS)
	}
	if st := r.Stats().Detail.(files.Stats); st.FilesRefused != 1 {
		t.Errorf("stats %+v, want one file refused", st)
	}
}

// The same for a file system's own largest file, where root may mount
// one: ext4 with 1 KiB blocks and no extents (block maps, as ext2 and
// ext3 made them) holds files of up to about 16 GiB. On an 18 GiB such
// file system (a sparse image, loop-mounted), a file of 16.5 GiB fits
// the room left and is refused as larger than the file system allows.
func TestOpenTooBigForExt4(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a loop file system")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("no mkfs.ext4")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "rbfs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 18<<30); err != nil {
		t.Skipf("no sparse image of 18 GiB: %v", err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-b", "1024", "-O", "^extent,^64bit,^huge_file", "-E", "lazy_itable_init=1,lazy_journal_init=1", "-N", "1024", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("no loop mount here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	m := meta("big.img", nil, 1000)
	m.Size = 33 << 29 // 16.5 GiB
	_, _, err = (&Dir{Root: mnt}).Open(m)
	if !errors.Is(err, files.ErrTooBigForFS) || !strings.Contains(err.Error(), "more than the file system under "+mnt+" allows a file to be (truncate") {
		t.Fatalf("Open of a file of 16.5 GiB on ext4 with block maps: %v, want ErrTooBigForFS", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, PartialDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused file left the partial directory: %v", err)
	}
	m.Size = 15 << 30
	f, _, err := (&Dir{Root: mnt}).Open(m)
	if err != nil {
		t.Fatalf("Open of a file of 15 GiB there: %v", err)
	}
	f.Abort(false)
}

// A name that is not a local file path under the directory (absolute,
// climbing out with "..", the directory itself, under PartialDir) is
// refused at its offer with its own reason (13), and nothing is made,
// in the directory or above it. rbcastd's sender never offers one (its
// source is opened under CheckName), so this is the defence against a
// sender that does: another program on the library, a foreign or
// hostile station. (A NUL in a name, or an empty one, never reaches the
// sink: the frame decoder drops such an offer.) It was a storage failure
// (reason 1) before.
func TestOfferNotLocalName(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "in")
	for _, name := range []string{"/etc/passwd", "../up", "a/../../up", ".", "a/..", "./", PartialDir + "/x"} {
		r := pairCore(t, 2, &Dir{Root: root})
		if st := offerTo(t, r, name, 10_000); st.State != frame.FileFailed || st.Reason != frame.FileBadName {
			t.Errorf("offer of %q: the receiver reported %+v, want failed, %v", name, st, frame.FileBadName)
		}
		if _, _, err := (&Dir{Root: root}).Open(meta(name, nil, 1000)); !errors.Is(err, files.ErrBadName) {
			t.Errorf("Open of %q: %v, want files.ErrBadName", name, err)
		}
		if _, err := OpenSourceHashLater(filepath.Join(top, "none"), name); !errors.Is(err, files.ErrBadName) {
			t.Errorf("a source to send as %q: %v, want files.ErrBadName before the file is opened", name, err)
		}
	}
	if ents, err := os.ReadDir(top); err != nil || len(ents) != 0 {
		t.Errorf("the refused offers made %v (%v)", ents, err)
	}
}
