package main

import (
	"os"
	"strings"
	"testing"
)

// capture runs fn with stdout and stderr sent to a file and returns both.
func capture(t *testing.T, fn func() int) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = f, f
	code := fn()
	os.Stdout, os.Stderr = stdout, stderr
	b, _ := os.ReadFile(f.Name())
	return code, string(b)
}

func TestRunSmallGroup(t *testing.T) {
	code, out := capture(t, func() int { return run([]string{"-members", "4", "-messages", "200", "-q"}) })
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"pbp2 group of 4 members", "exactly once, in order: 2400 messages", "repaired:", "determinism: replay of seed 1", "verification passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out = capture(t, func() int { return run([]string{"-members", "3", "-messages", "100", "-mode", "pbp1", "-q"}) })
	if code != 0 || !strings.Contains(out, "pbp1 group of 3 members") {
		t.Fatalf("pbp1: exit %d:\n%s", code, out)
	}
}

func TestRunSmallRawScenario(t *testing.T) {
	code, out := capture(t, func() int { return run([]string{"-raw", "-members", "4", "-frames", "200", "-q"}) })
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"4 members", "integrity:", "corruption:", "determinism: replay of seed 1", "verification passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestHelpAndBadFlags(t *testing.T) {
	code, out := capture(t, func() int { return run([]string{"-h"}) })
	if code != 0 || !strings.Contains(out, "usage: rbcast-sim") || !strings.Contains(out, "-members") {
		t.Fatalf("-h: exit %d\n%s", code, out)
	}
	code, out = capture(t, func() int { return run([]string{"-members", "x"}) })
	if code != 2 || !strings.Contains(out, `invalid value "x" for flag -members`) {
		t.Fatalf("bad flag: exit %d\n%s", code, out)
	}
	code, out = capture(t, func() int { return run([]string{"extra"}) })
	if code != 2 || !strings.Contains(out, `unexpected argument "extra"`) {
		t.Fatalf("extra arg: exit %d\n%s", code, out)
	}
	code, out = capture(t, func() int { return run([]string{"-mode", "pbp3"}) })
	if code != 2 || !strings.Contains(out, `-mode "pbp3": want pbp2 or pbp1`) {
		t.Fatalf("bad mode: exit %d\n%s", code, out)
	}
	code, out = capture(t, func() int { return run([]string{"-raw", "-h"}) })
	if code != 0 || !strings.Contains(out, "usage: rbcast-sim -raw") || !strings.Contains(out, "-frames") {
		t.Fatalf("-raw -h: exit %d\n%s", code, out)
	}
	code, out = capture(t, func() int { return run([]string{"-raw", "-payload", "5000", "-q"}) })
	if code != 2 || !strings.Contains(out, "payload of 5000 bytes does not fit one frame") {
		t.Fatalf("oversized payload: exit %d\n%s", code, out)
	}
}
