package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	stderr, took := sendHeldByOne(t, sock(0), big, inbox, 300001, bigSum)
	// (The blocks: of what fills a UDP datagram at -udp-mtu 1500.)
	var blocks int
	if n, err := fmt.Sscanf(stderr, "rbcastd sendfile: big: member 2 refused it: larger than it takes (300001 bytes in %d blocks: more than its run -files-max-size, or than the most blocks it keeps track of)\n", &blocks); n != 1 || err != nil || blocks < 206 || blocks > 300 {
		t.Errorf("stderr %q, want member 2 refused it, larger than it takes (%v)", stderr, err)
	}
	notStored(t, "member 2", inbox2, "big")
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
