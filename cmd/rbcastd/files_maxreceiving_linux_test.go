package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/reliable/files"
)

// Daemons that receive one file at a time (run -files-max-receiving 1)
// take two directories of 30 files each, sent at once by two members
// (at 20 MB/s, so that the passes overlap),
// whole: the offers that come while a file is being received wait and
// are taken as the files before them are stored, none is refused or
// named missing, and both sendfiles exit 0. Three daemons over -link udp
// on loopback; members 0 and 1 send to member 2 (-to 2: member 0 has no
// -inbox).
func TestSendFileMaxReceiving(t *testing.T) {
	inbox2 := filepath.Join(t.TempDir(), "inbox2")
	if err := os.Mkdir(inbox2, 0o755); err != nil {
		t.Fatal(err)
	}
	sock, dir, _ := udpDaemons(t, 3, 48, func(i int) []string {
		a := []string{"-node", fmt.Sprint(i), "-failure-timeout", "2s", "-log-level", "warn", "-file-rate", "20"}
		if i > 0 {
			a = append(a, "-files-max-receiving", "1")
		}
		if i == 2 {
			a = append(a, "-inbox", inbox2)
		}
		return a
	})
	const n = 30
	want := map[string][]byte{}
	for _, d := range []string{"zero", "one"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			name := fmt.Sprintf("%s/f%02d", d, i)
			data := bytes.Repeat([]byte(name), 10000+997*i) // 70 to 300 kB
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
			want[name] = data
		}
	}
	type result struct {
		code           int
		stdout, stderr string
	}
	results := make(chan result, 2)
	for m, d := range []string{"zero", "one"} {
		go func() {
			code, stdout, stderr, _ := sendfileRun("-socket", sock(m), "-hash", "sha256", "-to", "2", filepath.Join(dir, d))
			results <- result{code, stdout, stderr}
		}()
	}
	for range 2 {
		r := <-results
		if r.code != exitOK || r.stderr != "" || strings.Count(r.stdout, "\n") != n || strings.Contains(r.stdout, "held by no") {
			t.Errorf("sendfile: exit %d, stderr %q, stdout:\n%s\nwant exit 0, nothing on stderr, %d files held", r.code, r.stderr, r.stdout, n)
		}
	}
	for name, data := range want {
		for _, in := range []string{inbox2} {
			if got, err := os.ReadFile(filepath.Join(in, name)); err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s holds %d bytes of %s (%v), want the %d sent", in, len(got), name, err, len(data))
			}
		}
	}
	fst, _ := filesStatus(t, sock(2))
	if k := fst.Counters; k.FilesReceived != 2*n || k.FilesRefused != 0 || k.FilesIncomplete != 0 || k.FilesDeferred == 0 {
		t.Errorf("member 2's counters %+v, want %d files received, none refused or incomplete, some waited", k, 2*n)
	}
	t.Logf("member 2: %d offers waited for room", fst.Counters.FilesDeferred)
}

// run -files-max-receiving takes 1..65536, and no more than
// RLIMIT_NOFILE has 4 descriptors a file for; 0 is the file core's
// default, fewer where RLIMIT_NOFILE is low. A limit below 4 takes no
// file at all: an error that says to raise it (it said "take at most 0
// files at once", and the default took 1).
func TestFilesMaxReceivingFlag(t *testing.T) {
	for _, c := range []struct {
		n      int
		nofile uint64
		want   int
		err    string
	}{
		{0, 1 << 20, 64, ""},
		{0, 0, 64, ""},
		{0, 100, 25, ""},
		{0, 4, 1, ""},
		{0, 3, 0, "RLIMIT_NOFILE is 3, too low to receive files at all (each takes 4 descriptors): raise it (ulimit -n, LimitNOFILE=) to 4 or more, or run with -files=false"},
		{1, 3, 0, "RLIMIT_NOFILE is 3, too low to receive files at all"},
		{256, 1024, 256, ""},
		{257, 1024, 0, "-files-max-receiving 257 wants 1028 descriptors (4 a file), more than RLIMIT_NOFILE's 1024: raise it (ulimit -n, LimitNOFILE=) or take at most 256 files at once"},
		{-1, 1024, 0, "-files-max-receiving is -1, want 1..65536 (0: 64, fewer if RLIMIT_NOFILE is low)"},
		{65537, 0, 0, "-files-max-receiving is 65537, want 1..65536"},
	} {
		got, err := filesMaxReceiving(c.n, c.nofile)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("filesMaxReceiving(%d, %d) = %d, %v; want the error %q", c.n, c.nofile, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("filesMaxReceiving(%d, %d) = %d, %v; want %d", c.n, c.nofile, got, err, c.want)
		}
	}
	code, _, errOut := runMain("run", "-i", "rbnone0", "-group", "1", "-files-max-receiving", "-5")
	if want := "-files-max-receiving is -5, want 1..65536"; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("-files-max-receiving -5: exit %d, stderr %q; want exit %d and %q", code, errOut, exitUsage, want)
	}
	if filesMaxReceivingDefault != files.DefaultMaxReceiving {
		t.Errorf("run's default %d is not the file core's %d", filesMaxReceivingDefault, files.DefaultMaxReceiving)
	}
}
