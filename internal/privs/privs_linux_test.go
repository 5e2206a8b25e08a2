package privs

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDrop drops the test process's privileges (this package's test
// binary runs alone, nothing else here needs them) and checks in
// /proc/self/task/*/status that every thread, including ones parked
// with LockOSThread before the drop, has no capability left and
// no_new_privs set; as root (CAP_SETPCAP) the bounding set is empty too.
// Not root, the sets are already empty and it checks that Drop says so
// and still sets no_new_privs.
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
	if root && !d.Bound {
		t.Errorf("Drop as root (before %q) did not empty the bounding set", d.Before)
	}
	if got := Current(); got != "=" {
		t.Errorf("Current() after Drop is %q, want \"=\"", got)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < parked+1 {
		t.Fatalf("found %d threads in /proc/self/task (err %v), want at least %d", len(tasks), err, parked+1)
	}
	want := map[string]string{"CapInh:": "0000000000000000", "CapPrm:": "0000000000000000",
		"CapEff:": "0000000000000000", "CapAmb:": "0000000000000000", "NoNewPrivs:": "1"}
	if d.Bound {
		want["CapBnd:"] = "0000000000000000"
	}
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, "\t")
			if w, ok := want[k]; ok {
				seen++
				if v = strings.TrimSpace(v); v != w {
					t.Errorf("%s: %s %s, want %s", path, k, v, w)
				}
			}
		}
		if seen != len(want) {
			t.Errorf("%s: found %d of the %d fields checked", path, seen, len(want))
		}
	}
}
