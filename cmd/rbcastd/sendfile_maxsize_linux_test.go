package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
)

// A daemon run with -files-max-size takes a file up to that size and
// refuses a larger one at its offer, saying so: sendfile names the limit
// as soon as the other receiver holds the file, well before the failure
// timeout, and exits 1; the receiver stores nothing of it and counts it
// refused, and the sender's status shows it refused, larger than it
// takes. Three daemons over -link udp on loopback (no netns, no
// privilege); member 2 takes files of up to 0.3 MB.
func TestSendFileRefusedMaxSize(t *testing.T) {
	inbox2 := filepath.Join(t.TempDir(), "inbox2")
	if err := os.Mkdir(inbox2, 0o755); err != nil {
		t.Fatal(err)
	}
	sock, dir, inbox := udpDaemons(t, 3, 46, func(i int) []string {
		a := []string{"-node", fmt.Sprint(i), "-failure-timeout", "2s", "-log-level", "warn"}
		if i == 2 {
			a = append(a, "-inbox", inbox2, "-files-max-size", "0.3")
		}
		return a
	})
	small, big := filepath.Join(dir, "small"), filepath.Join(dir, "big")
	smallSum := bigRandomFile(t, small, 46, 300_000) // the limit exactly
	bigSum := bigRandomFile(t, big, 47, 300_001)
	if code, stdout, stderr, _ := sendfileRun("-socket", sock(0), "-hash", "sha256", small); code != exitOK {
		t.Fatalf("sendfile of a file of the limit's size: exit %d; stdout %q, stderr %q", code, stdout, stderr)
	}
	if got, err := hashOf(t, filepath.Join(inbox2, "small")); err != nil || got != smallSum {
		t.Fatalf("member 2 stored a file of SHA-256 %x (%v), want %x", got, err, smallSum)
	}
	code, stdout, stderr, took := sendfileRun("-socket", sock(0), "-hash", "sha256", big)
	if code != exitFail {
		t.Fatalf("sendfile: exit %d, want %d; stdout %q, stderr %q", code, exitFail, stdout, stderr)
	}
	if want := fmt.Sprintf("sha256:%x  big  300001 bytes, held by members 1\n", bigSum); stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	// (The blocks: of what fills a UDP datagram at -udp-mtu 1500.)
	var blocks int
	if n, err := fmt.Sscanf(stderr, "rbcastd sendfile: big: member 2 refused it: larger than it takes (300001 bytes in %d blocks: more than its run -files-max-size, or than the most blocks it keeps track of)\n", &blocks); n != 1 || err != nil || blocks < 206 || blocks > 300 {
		t.Errorf("stderr %q, want member 2 refused it, larger than it takes (%v)", stderr, err)
	}
	if limit := time.Duration(daemon.FilesFailureTimeout) / 2; took >= limit {
		t.Errorf("sendfile took %v, want the verdict well before the failure timeout (under %v)", took, limit)
	}
	if got, err := hashOf(t, filepath.Join(inbox, "big")); err != nil || got != bigSum {
		t.Fatalf("member 1 stored a file of SHA-256 %x (%v), want %x", got, err, bigSum)
	}
	if _, err := os.Stat(filepath.Join(inbox2, "big")); !os.IsNotExist(err) {
		t.Errorf("member 2 stored the file: %v", err)
	}
	if parts, _ := filepath.Glob(filepath.Join(inbox2, ".rbcast-partial", "*.part")); len(parts) != 0 {
		t.Errorf("member 2 made partial copies %v", parts)
	}
	fst, shown := filesStatus(t, sock(2))
	if fst.Counters.FilesRefused != 1 || fst.Counters.FilesReceived != 1 {
		t.Errorf("member 2's status: %+v, want one file received, one refused", fst)
	}
	if !strings.Contains(shown, "receiving big from member 0: member 2: refused: larger than the receiver takes") {
		t.Errorf("member 2's status does not show the file refused: %q", shown)
	}
	r, text := sentTo(t, sock(0), "big", 2)
	if r.State != "refused" || r.Cause != "larger than the receiver takes" || !strings.Contains(text, "member 2: refused (larger than the receiver takes), 0.0 MB of") {
		t.Errorf("the sender's status shows member 2 %+v:\n%s", r, text)
	}
	t.Logf("sendfile took %v", took)
}
