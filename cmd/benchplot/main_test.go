package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"-o", dir, "../../internal/benchplot/testdata/run-29.md"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := []string{"small-messages.svg", "window.svg", "all-to-all.svg", "latency.svg"}
	for i := range want {
		want[i] = filepath.Join(dir, want[i])
	}
	if got := strings.Fields(out.String()); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("files listed %v, want %v", got, want)
	}
	// Run 29 has no one-to-all table: said so, and nothing drawn for it.
	if !strings.Contains(errb.String(), "no report has the one-to-all table") {
		t.Errorf("stderr %q", errb.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "window.svg"))
	if err != nil || len(b) == 0 {
		t.Fatalf("window.svg: %d bytes, %v", len(b), err)
	}
}

func TestRunErrors(t *testing.T) {
	notReport := filepath.Join(t.TempDir(), "notes.md")
	if err := os.WriteFile(notReport, []byte("# Notes\n\nno tables here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no report given"},
		{[]string{"-format", "gif", "x.md"}, 2, `-format "gif": want one of svg, png`},
		{[]string{"missing.md"}, 1, "missing.md: no such file"},
		{[]string{notReport}, 1, "notes.md: no table in it; is it a BenchmarkReport report?"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}
