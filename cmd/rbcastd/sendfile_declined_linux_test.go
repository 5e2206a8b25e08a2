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
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := rbcastd([]string{"sendfile", "-socket", sock(0), "-hash", "sha256", src}, nil, &stdout, &stderr)
	took := time.Since(began)
	if code != exitFail {
		t.Fatalf("sendfile: exit %d, want %d; stdout %q, stderr %q", code, exitFail, stdout.String(), stderr.String())
	}
	if want := fmt.Sprintf("sha256:%x  blob  %d bytes, held by members 1\n", sum, 306*1464); stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	if want := "rbcastd sendfile: blob: member 2 declined it (no recvfile client and no -inbox)\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if limit := time.Duration(daemon.FilesFailureTimeout) / 2; took >= limit {
		t.Errorf("sendfile took %v, want the verdict well before the failure timeout (under %v)", took, limit)
	}
	if got, err := hashOf(t, filepath.Join(inbox, "blob")); err != nil || got != sum {
		t.Fatalf("member 1 stored a file of SHA-256 %x (%v), want %x", got, err, sum)
	}
	st, err := status(&socketFlags{socket: sock(2)}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files == nil || st.Files.Counters.FilesDeclined != 1 {
		t.Errorf("member 2's status: %+v, want one file declined", st.Files)
	}
	var shown bytes.Buffer
	printFiles(&shown, st.Files)
	if !strings.Contains(shown.String(), "declined 1,") {
		t.Errorf("member 2's status does not show the file declined: %q", shown.String())
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
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := rbcastd([]string{"sendfile", "-socket", sock(0), "-hash", "sha256", src}, nil, &stdout, &stderr)
	took := time.Since(began)
	if code != exitFail {
		t.Fatalf("sendfile: exit %d, want %d; stdout %q, stderr %q", code, exitFail, stdout.String(), stderr.String())
	}
	if want := fmt.Sprintf("sha256:%x  blob  %d bytes, held by members 1\n", sum, size); stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	if want := fmt.Sprintf("rbcastd sendfile: blob: member 2 refused it: no room on its disk (%d bytes, less what it holds of the file; its log says how much room it has)\n", size); stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if limit := time.Duration(daemon.FilesFailureTimeout) / 2; took >= limit {
		t.Errorf("sendfile took %v, want the verdict well before the failure timeout (under %v)", took, limit)
	}
	if got, err := hashOf(t, filepath.Join(inbox, "blob")); err != nil || got != sum {
		t.Fatalf("member 1 stored a file of SHA-256 %x (%v), want %x", got, err, sum)
	}
	if parts, _ := filepath.Glob(filepath.Join(inbox2, ".rbcast-partial", "*.part")); len(parts) != 0 {
		t.Errorf("member 2 made partial copies %v", parts)
	}
	if _, err := os.Stat(filepath.Join(inbox2, "blob")); !os.IsNotExist(err) {
		t.Errorf("member 2 stored the file: %v", err)
	}
	st, err := status(&socketFlags{socket: sock(2)}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files == nil || st.Files.Counters.FilesRefused != 1 || st.Files.Counters.BlocksReceived != 0 {
		t.Errorf("member 2's status: %+v, want one file refused, no block received", st.Files)
	}
	var shown bytes.Buffer
	printFiles(&shown, st.Files)
	if !strings.Contains(shown.String(), "refused 1,") || !strings.Contains(shown.String(), "receiving blob from member 0: member 2: refused: no room on the receiver's disk") {
		t.Errorf("member 2's status does not show the file refused: %q", shown.String())
	}
	r, text := sentTo(t, sock(0), "blob", 2)
	if r.State != "refused" || r.Cause != "no room on the receiver's disk" || !strings.Contains(text, "member 2: refused (no room on the receiver's disk), 0.0 MB of") {
		t.Errorf("the sender's status shows member 2 %+v:\n%s", r, text)
	}
	t.Logf("sendfile took %v", took)
}

// sentTo is receiver member of the file name sent by the daemon at sock,
// as its status shows it, and the status's files section as text.
func sentTo(t *testing.T, sock, name string, member int) (daemon.FileReceiver, string) {
	t.Helper()
	st, err := status(&socketFlags{socket: sock}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	printFiles(&text, st.Files)
	for _, tr := range st.Files.Transfers {
		if tr.Sending && tr.Name == name {
			for _, r := range tr.Receivers {
				if r.Member == member {
					return r, text.String()
				}
			}
		}
	}
	t.Fatalf("the sender's status has no receiver %d of %s:\n%s", member, name, text.String())
	return daemon.FileReceiver{}, ""
}
