package privs

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDrop drops the test process's privileges (this package's test
// binary runs alone, nothing else here needs them) in Drop's and
// DropBound's two steps and checks in /proc/self/task/*/status that
// every thread, including ones parked with LockOSThread before the drop,
// has after Drop no capability but CAP_SETPCAP (as root) and
// no_new_privs set, its bounding set untouched, and after DropBound no
// capability left and, as root, an empty bounding set. Not root, the
// sets are already empty and it checks that Drop says so and still sets
// no_new_privs.
func TestDrop(t *testing.T) {
	// Several OS threads that exist before Drop: capabilities are per
	// thread, so a plain capset(2) would leave them privileged.
	const parked = 4
	ready, release := make(chan struct{}), make(chan struct{})
	for range parked {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready <- struct{}{}
			<-release
		}()
	}
	for range parked {
		<-ready
	}
	defer close(release)

	root := os.Geteuid() == 0
	d, err := Drop()
	if err != nil {
		t.Fatal(err)
	}
	if root && !d.Kept {
		t.Errorf("Drop as root (before %q) did not keep CAP_SETPCAP for DropBound", d.Before)
	}
	const setpcap = "0000000000000100" // CAP_SETPCAP, bit 8
	want := map[string]string{"CapInh:": "0000000000000000", "CapPrm:": "0000000000000000",
		"CapEff:": "0000000000000000", "CapAmb:": "0000000000000000", "NoNewPrivs:": "1"}
	if d.Kept {
		want["CapPrm:"], want["CapEff:"] = setpcap, setpcap
		if got := Current(); got != "cap_setpcap=ep" {
			t.Errorf("Current() after Drop is %q, want \"cap_setpcap=ep\"", got)
		}
		// The bounding set is left for DropBound.
		if b := threadFields(t, "CapBnd:")["CapBnd:"]; b == "0000000000000000" {
			t.Errorf("CapBnd emptied by Drop already")
		}
	}
	checkThreads(t, parked, want)

	bound, err := d.DropBound()
	if err != nil {
		t.Fatal(err)
	}
	if bound != d.Kept {
		t.Errorf("DropBound emptied the bounding set: %v, want %v (Drop kept CAP_SETPCAP: %v)", bound, d.Kept, d.Kept)
	}
	if got := Current(); got != "=" {
		t.Errorf("Current() after DropBound is %q, want \"=\"", got)
	}
	want["CapPrm:"], want["CapEff:"] = "0000000000000000", "0000000000000000"
	if bound {
		want["CapBnd:"] = "0000000000000000"
	}
	checkThreads(t, parked, want)
}

// checkThreads checks the fields want of every thread's status, of which
// there are at least parked+1.
func checkThreads(t *testing.T, parked int, want map[string]string) {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < parked+1 {
		t.Fatalf("found %d threads in /proc/self/task (err %v), want at least %d", len(tasks), err, parked+1)
	}
	for _, path := range tasks {
		got := fields(t, path)
		for k, w := range want {
			if v, ok := got[k]; !ok {
				t.Errorf("%s: no %s", path, k)
			} else if v != w {
				t.Errorf("%s: %s %s, want %s", path, k, v, w)
			}
		}
	}
}

// threadFields returns this thread's status fields named.
func threadFields(t *testing.T, names ...string) map[string]string {
	t.Helper()
	got := fields(t, "/proc/thread-self/status")
	out := map[string]string{}
	for _, n := range names {
		out[n] = got[n]
	}
	return out
}

// fields reads the "Name:\tvalue" lines of a status file.
func fields(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
