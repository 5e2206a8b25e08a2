package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
)

// Full replication and the channel mode give the sequential result on
// the lossy simulator. With channels a process applies no update of the
// big segments (each has one member: no channel, nothing on the wire),
// only those of the small gathering ones; with full replication every
// process applies the others' segments.
func TestVerifyOnLossySimulator(t *testing.T) {
	applied := regexp.MustCompile(` total .*applied=(\d+)`)
	for _, channels := range []bool{false, true} {
		args := []string{"-segs", "8", "-mib", "1", "-sim", "-procs", "4", "-loss", "0.05", "-verify"}
		if channels {
			args = append(args, "-channels")
		}
		ok, out, err := harness.Verified("memory", setup, args...)
		if err != nil || ok != 4 {
			t.Fatalf("%v: %d lines verify=ok, error %v; output:\n%s", args, ok, err, out)
		}
		m := applied.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no total line with applied=:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		// 8 segments of 1024 one-KiB locations, one location a message:
		// each process applies the 6 segments of the 3 others.
		if channels && n > 100 || !channels && n < 4*6*1000 {
			t.Fatalf("channels=%v: %d update messages applied in all:\n%s", channels, n, out)
		}
	}
}

func TestBadGeometry(t *testing.T) {
	_, out, err := harness.Verified("memory", setup, "-segs", "3", "-mib", "1", "-sim", "-procs", "4")
	want := "memory needs at least one segment per rank and a location per segment: -segs 3, -procs 4"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want …%s; output:\n%s", err, want, out)
	}
}
