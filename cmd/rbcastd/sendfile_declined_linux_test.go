package main

import (
	"bytes"
	"fmt"
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
	t.Logf("sendfile took %v", took)
}
