package hops

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runtime-probes.patch applies to the tree it sits in: the runtime and
// the ring move under it (docs/local-api.md, breakdown.py). Skipped
// outside a git checkout.
func TestRuntimeProbesPatchApplies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: cannot check that runtime-probes.patch applies")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): cannot check that runtime-probes.patch applies", err)
	}
	patch, err := filepath.Abs("runtime-probes.patch")
	if err != nil {
		t.Fatal(err)
	}
	root := strings.TrimSpace(string(top))
	if !sameFile(filepath.Join(root, "internal", "hops", "runtime-probes.patch"), patch) {
		t.Skipf("the checkout at %s is not this module's (a copy inside another repository): cannot check that runtime-probes.patch applies", root)
	}
	cmd := exec.Command("git", "apply", "--check", patch)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("internal/hops/runtime-probes.patch no longer applies (regenerate it: apply its hunks by hand, then git diff link/ring/ring_linux.go reliable/group.go): %v\n%s", err, out)
	}
}

// sameFile reports whether a and b name one existing file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
