package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// Odd command lines and malformed reports end with a non-zero exit and
// a line naming the flag or the report's line; -h is a success.
func TestOddInputs(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	report, err := os.ReadFile("../../docs/data/run-28.md")
	if err != nil {
		t.Fatal(err)
	}
	good := file("good.md", string(report))
	short := file("short.md", "# r\n| a | b |\n|---|---|\n| 1 |\n")
	noSep := file("nosep.md", "# r\n| a | b |\n")
	notNumber := file("nan.md", strings.Replace(string(report), "| 1 | 1500 |", "| x | 1500 |", 1))
	empty := file("empty.md", "")
	clitest.Runner{Dir: dir}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "usage: benchplot [-o DIR]"},
		{Args: nil, Code: 2, Want: "benchplot: no report given"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"-format", "", good}, Code: 2, Want: `-format "": want one of svg, png`},
		{Args: []string{"-o", "", good}, Code: 2, Want: "-o is empty"},
		{Args: []string{"-o", filepath.Join(dir, "none"), good}, Code: 2, Want: "-o " + filepath.Join(dir, "none") + ": no such file or directory"},
		{Args: []string{"-o", good, good}, Code: 2, Want: "-o " + good + ": not a directory"},
		{Args: []string{"-o", dir, filepath.Join(dir, "missing.md")}, Code: 1, Want: "missing.md: no such file or directory"},
		{Args: []string{"-o", dir, dir}, Code: 1, Want: "is a directory"},
		{Args: []string{"-o", dir, empty}, Code: 1, Want: "empty.md: no table in it"},
		{Args: []string{"-o", dir, short}, Code: 1, Want: "short.md:4: table row has 1 cells, its header has 2"},
		{Args: []string{"-o", dir, noSep}, Code: 1, Want: "nosep.md:2: table header is the last line"},
		{Args: []string{"-o", dir, notNumber}, Code: 1, Want: `cannot read "x" as a number`},
		{Args: []string{"-o", dir, "/dev/zero"}, Code: 1, Want: "/dev/zero:1: line longer than 1048576 bytes"},
	})
}
