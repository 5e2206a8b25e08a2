package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A directory of more files than the sending daemon's RLIMIT_NOFILE
// arrives whole: sendfile keeps at most its window queued, the daemon
// refuses files beyond its own bound (here 96: RLIMIT_NOFILE 256 less 64
// for files open after their verdict, 32 for the 16 files it receives
// at once, -files-max-receiving, and 64 for the rest; the window, 256,
// would run out of descriptors) and sendfile sends those again after a verdict. Before, the
// daemon opened a descriptor for each of the 400 SendFiles written at
// once and refused the files beyond its limit, "too many open files"
// (issue 20). Two daemons over -link udp on loopback; daemon 0's limit
// is lowered once it runs (prlimit on the pid its socket's peer
// credentials name).
func TestSendFileMoreFilesThanDescriptors(t *testing.T) {
	const files, nofile = 400, 256
	sock, dir, inbox := udpDaemons(t, 2, 48, func(i int) []string {
		return []string{"-node", fmt.Sprint(i), "-failure-timeout", "2s", "-log-level", "warn", "-files-max-receiving", "16"}
	})
	lowerNoFile(t, sock(0), nofile)
	src := filepath.Join(dir, "many")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(48, 0))
	want := map[string][]byte{}
	for i := range files {
		name := fmt.Sprintf("f%03d", i)
		data := make([]byte, 1+rnd.IntN(3000))
		for k := range data {
			data[k] = byte(rnd.Uint32())
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = data
	}
	code, stdout, stderr, took := sendfileRun("-socket", sock(0), "-hash", "sha256", src)
	if code != exitOK {
		t.Fatalf("sendfile: exit %d; stderr %q", code, stderr)
	}
	if n := strings.Count(stdout, ", held by members 1\n"); n != files || stderr != "" {
		t.Errorf("sendfile printed %d files held by member 1, want %d; stderr %q", n, files, stderr)
	}
	for name, data := range want {
		if got, err := os.ReadFile(filepath.Join(inbox, "many", name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("member 1 stored %d bytes as many/%s (%v), want the %d sent", len(got), name, err, len(data))
		}
	}
	t.Logf("sendfile of %d files took %v", files, took)
}

// lowerNoFile sets RLIMIT_NOFILE of the daemon serving sock to n (soft
// and hard), the daemon named by its socket's peer credentials.
func lowerNoFile(t *testing.T, sock string, n uint64) {
	t.Helper()
	c, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *unix.Ucred
	rc.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prlimit(int(cred.Pid), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		t.Fatalf("lowering the daemon's RLIMIT_NOFILE to %d: %v", n, err)
	}
}
