package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// On a terminal, sendfile shows each file's multicast and each
// receiver's progress (bytes, rate, time left), redrawn in place every
// second and erased at the end; anywhere else its stderr holds none of
// it. Two daemons over -link udp on loopback (no netns, no privilege),
// the file pass paced at 4 MB/s so that an 8 MB file takes two of the
// progress's seconds.
func TestSendFileProgressOnTerminal(t *testing.T) {
	sock, dir, inbox := udpDaemons(t, 2, 43, func(i int) []string {
		return []string{"-node", fmt.Sprint(i), "-failure-timeout", "2s", "-log-level", "warn", "-file-rate", "4"}
	})
	const size = 8 << 20
	for k, term := range []bool{true, false} {
		t.Run(fmt.Sprintf("terminal=%v", term), func(t *testing.T) {
			name := fmt.Sprintf("blob%d", k) // a new file: one sent again is held already, with no pass to show
			src := filepath.Join(dir, name)
			sum := bigRandomFile(t, src, byte(43+k), size)
			stderr, shown := stderrFor(t, term, filepath.Join(dir, name+".stderr"))
			var stdout bytes.Buffer
			began := time.Now()
			code := rbcastd([]string{"sendfile", "-socket", sock(0), "-hash", "sha256", src}, nil, &stdout, stderr)
			took := time.Since(began)
			stderr.Close()
			text := shown()
			if code != exitOK {
				t.Fatalf("sendfile: exit %d, stdout %q, stderr %q", code, stdout.String(), text)
			}
			if want := fmt.Sprintf("sha256:%x  %s", sum, name); !strings.HasPrefix(stdout.String(), want) {
				t.Errorf("sendfile printed %q, want %q first", stdout.String(), want)
			}
			if got, err := hashOf(t, filepath.Join(inbox, name)); err != nil || got != sum {
				t.Fatalf("the stored file's SHA-256 is %x (%v), want %x", got, err, sum)
			}
			fileLine := name + ": "
			receiverLine := "member 1: "
			switch {
			case term && took < 1500*time.Millisecond:
				t.Skipf("the file took %v, too short for a progress line (one a second): the -file-rate pacing did not hold", took)
			case term && (!strings.Contains(text, fileLine) || !strings.Contains(text, "multicast ") || !strings.Contains(text, receiverLine) ||
				!strings.Contains(text, " MB/s, ") || !strings.Contains(text, " of 8.4 MB") || !strings.Contains(text, " left")):
				t.Fatalf("on a terminal, no per-file and per-receiver progress in %v: %q", took, text)
			case term && !strings.Contains(text, "\x1b[1A\x1b[2K"):
				t.Fatalf("on a terminal, the progress was not erased: %q", text)
			case !term && (strings.Contains(text, receiverLine) || strings.Contains(text, "multicast ") || strings.Contains(text, "\x1b[")):
				t.Fatalf("off a terminal, stderr holds progress: %q", text)
			}
		})
	}
}
