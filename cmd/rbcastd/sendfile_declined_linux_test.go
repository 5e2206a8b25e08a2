package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
)

// A daemon with no recvfile client and no -inbox declines a file and
// says so: sendfile names it declined, not silent, as soon as the other
// receiver holds the file, well before the file core's failure timeout,
// and exits 1 as for any receiver that does not hold the file. Three
// daemons over -link udp on loopback (no netns, no privilege): member 1
// stores into its inbox, member 2 has none.
func TestSendFileDeclined(t *testing.T) {
	sock, dir, inbox := udpDaemons(t, 3, 44, func(i int) []string {
		return []string{"-node", fmt.Sprint(i), "-failure-timeout", "2s", "-log-level", "warn"}
	})
	src := filepath.Join(dir, "blob")
	sum := bigRandomFile(t, src, 44, 306*1464) // about 300 blocks at -udp-mtu 1500
	stderr, took := sendHeldByOne(t, sock(0), src, inbox, 306*1464, sum)
	if want := "rbcastd sendfile: blob: member 2 declined it (no recvfile client and no -inbox)\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	fst, shown := filesStatus(t, sock(2))
	if fst.Counters.FilesDeclined != 1 {
		t.Errorf("member 2's status: %+v, want one file declined", fst)
	}
	if !strings.Contains(shown, "declined 1,") {
		t.Errorf("member 2's status does not show the file declined: %q", shown)
	}
	// The sender's status (JSON and text) shows member 2 declined, not
	// failed: the file stays open for its per-file timer.
	r, text := sentTo(t, sock(0), "blob", 2)
	if r.State != "declined" || r.Cause != "declined by the receiver" || !strings.Contains(text, "member 2: declined, 0.0 MB of") {
		t.Errorf("the sender's status shows member 2 %+v:\n%s", r, text)
	}
	t.Logf("sendfile took %v", took)
}

// A daemon that a file is beyond one of the limits of (here: no room, as
// -files-keep-free leaves none) refuses it at its offer and says which:
// sendfile names the limit as soon as the other receiver holds the file,
// well before the failure timeout, and exits 1; the receiver stores
// nothing and counts the file refused, and the sender's status shows it
// refused, with the limit.
func TestSendFileRefusedNoRoom(t *testing.T) {
	inbox2 := filepath.Join(t.TempDir(), "inbox2")
	if err := os.Mkdir(inbox2, 0o755); err != nil {
		t.Fatal(err)
	}
	sock, dir, inbox := udpDaemons(t, 3, 45, func(i int) []string {
		a := []string{"-node", fmt.Sprint(i), "-failure-timeout", "2s", "-log-level", "warn"}
		if i == 2 {
			a = append(a, "-inbox", inbox2, "-files-keep-free", "1e12")
		}
		return a
	})
	src := filepath.Join(dir, "blob")
	size := 306 * 1464
	sum := bigRandomFile(t, src, 45, size)
	stderr, took := sendHeldByOne(t, sock(0), src, inbox, size, sum)
	if want := fmt.Sprintf("rbcastd sendfile: blob: member 2 refused it: no room on its disk (%d bytes, less what it holds of the file; its log says how much room it has)\n", size); stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	notStored(t, "member 2", inbox2, "blob")
	fst, shown := filesStatus(t, sock(2))
	if fst.Counters.FilesRefused != 1 || fst.Counters.BlocksReceived != 0 {
		t.Errorf("member 2's status: %+v, want one file refused, no block received", fst)
	}
	if !strings.Contains(shown, "refused 1,") || !strings.Contains(shown, "receiving blob from member 0: member 2: refused: no room on the receiver's disk") {
		t.Errorf("member 2's status does not show the file refused: %q", shown)
	}
	r, text := sentTo(t, sock(0), "blob", 2)
	if r.State != "refused" || r.Cause != "no room on the receiver's disk" || !strings.Contains(text, "member 2: refused (no room on the receiver's disk), 0.0 MB of") {
		t.Errorf("the sender's status shows member 2 %+v:\n%s", r, text)
	}
	t.Logf("sendfile took %v", took)
}

// sendHeldByOne runs sendfile of src (size bytes of SHA-256 sum) at the
// daemon on sock, of whose receivers only member 1 takes it (into
// inbox): sendfile must exit 1 having printed the file held by member 1,
// well before the failure timeout, and member 1 must hold the file. It
// returns what sendfile said on stderr (why the other did not take it)
// and how long it took.
func sendHeldByOne(t *testing.T, sock, src, inbox string, size int, sum [32]byte) (stderr string, took time.Duration) {
	t.Helper()
	name := filepath.Base(src)
	code, stdout, stderr, took := sendfileRun("-socket", sock, "-hash", "sha256", src)
	if code != exitFail {
		t.Fatalf("sendfile: exit %d, want %d; stdout %q, stderr %q", code, exitFail, stdout, stderr)
	}
	if want := fmt.Sprintf("sha256:%x  %s  %d bytes, held by members 1\n", sum, name, size); stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if limit := time.Duration(daemon.FilesFailureTimeout) / 2; took >= limit {
		t.Errorf("sendfile took %v, want the verdict well before the failure timeout (under %v)", took, limit)
	}
	if got, err := hashOf(t, filepath.Join(inbox, name)); err != nil || got != sum {
		t.Fatalf("member 1 stored a file of SHA-256 %x (%v), want %x", got, err, sum)
	}
	return stderr, took
}

// notStored checks that who, a receiver that refused the file name,
// stored neither it in inbox nor a partial copy.
func notStored(t *testing.T, who, inbox, name string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(inbox, name)); !os.IsNotExist(err) {
		t.Errorf("%s stored the file: %v", who, err)
	}
	if parts, _ := filepath.Glob(filepath.Join(inbox, ".rbcast-partial", "*.part")); len(parts) != 0 {
		t.Errorf("%s made partial copies %v", who, parts)
	}
}

// sentTo is receiver member of the file name sent by the daemon at sock,
// as its status shows it, and the status's files section as text.
func sentTo(t *testing.T, sock, name string, member int) (daemon.FileReceiver, string) {
	t.Helper()
	fst, text := filesStatus(t, sock)
	for _, tr := range fst.Transfers {
		if tr.Sending && tr.Name == name {
			for _, r := range tr.Receivers {
				if r.Member == member {
					return r, text
				}
			}
		}
	}
	t.Fatalf("the sender's status has no receiver %d of %s:\n%s", member, name, text)
	return daemon.FileReceiver{}, ""
}

// sendfileRun runs rbcastd sendfile with args: its exit code, what it
// printed on stdout and stderr, and how long it took.
func sendfileRun(args ...string) (code int, stdout, stderr string, took time.Duration) {
	var out, errs bytes.Buffer
	began := time.Now()
	code = rbcastd(append([]string{"sendfile"}, args...), nil, &out, &errs)
	return code, out.String(), errs.String(), time.Since(began)
}

// filesStatus is the files part of the status of the daemon at sock, and
// it as status prints it.
func filesStatus(t *testing.T, sock string) (*daemon.FilesStatus, string) {
	t.Helper()
	st, err := status(&socketFlags{socket: sock}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files == nil {
		t.Fatalf("the daemon at %s shows no files in its status", sock)
	}
	var text bytes.Buffer
	printFiles(&text, st.Files)
	return st.Files, text.String()
}
