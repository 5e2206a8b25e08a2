// Package archtest checks the import rules of DESIGN.md with `go list
// -deps`: imports point downward only, frame imports nothing of ours, and
// the protocol cores touch no I/O, so the same core runs live, in the
// simulator and in pcap-replay.
package archtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rbcast/rbcast"

type pkg struct {
	ImportPath string
	Imports    []string // direct
	Deps       []string // transitive
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func ours(dep string) bool { return dep == module || strings.HasPrefix(dep, module+"/") }

func under(p, dir string) bool {
	return p == module+"/"+dir || strings.HasPrefix(p, module+"/"+dir+"/")
}

// isCore reports whether p is a protocol core: a package under reliable/
// or dsm/ other than the runtime that drives cores over a link, examples
// and commands.
func isCore(p string) bool {
	if !under(p, "reliable") && !under(p, "dsm") {
		return false
	}
	rest := p[len(module)+1:]
	return rest != "reliable" && rest != "dsm" && !strings.Contains(rest, "runtime") && !strings.Contains(rest, "examples")
}

// forbiddenInCore are standard packages that mean I/O, concurrency, wall
// time or global randomness (DESIGN.md, decision 1). They may not be
// imported by a core or by any package of ours a core depends on.
var forbiddenInCore = []string{"net", "os", "sync", "sync/atomic", "syscall", "time", "math/rand", "math/rand/v2", "crypto/rand", "log", "log/slog", "unsafe"}

// check returns every violation of the import rules among pkgs.
func check(pkgs []pkg) []string {
	byPath := map[string]pkg{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var bad []string
	for _, p := range pkgs {
		for _, dep := range p.Deps {
			if !ours(dep) {
				continue
			}
			switch {
			case under(p.ImportPath, "frame") && !under(dep, "frame"):
				bad = append(bad, fmt.Sprintf("%s imports %s: frame imports nothing of ours", p.ImportPath, dep))
			case under(p.ImportPath, "link") && !under(dep, "link") && !under(dep, "frame"):
				bad = append(bad, fmt.Sprintf("%s imports %s: link sits below everything but frame", p.ImportPath, dep))
			case under(p.ImportPath, "reliable") && (under(dep, "dsm") || under(dep, "cmd")):
				bad = append(bad, fmt.Sprintf("%s imports %s: imports point downward (dsm → reliable → frame)", p.ImportPath, dep))
			case isCore(p.ImportPath) && !under(dep, "frame") && !isCore(dep):
				bad = append(bad, fmt.Sprintf("core %s imports %s: cores import frame (and lower cores) only", p.ImportPath, dep))
			}
		}
		if isCore(p.ImportPath) {
			closure := []string{p.ImportPath}
			for _, dep := range p.Deps {
				if ours(dep) {
					closure = append(closure, dep)
				}
			}
			for _, q := range closure {
				for _, imp := range byPath[q].Imports {
					if slices.Contains(forbiddenInCore, imp) {
						bad = append(bad, fmt.Sprintf("core %s depends on %s, which imports %s: cores do no I/O, no goroutine sync, no wall time, no global randomness", p.ImportPath, q, imp))
					}
				}
			}
		}
	}
	return bad
}

func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	for _, v := range check(pkgs) {
		t.Error(v)
	}
}

// TestCheckCatchesViolations makes sure the checker is not vacuous.
func TestCheckCatchesViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("frame"), Imports: []string{"encoding/binary"}},
		{ImportPath: m("reliable/pbp"), Imports: []string{m("frame"), "time"}, Deps: []string{m("frame")}},
		{ImportPath: m("reliable/seq"), Imports: []string{m("link")}, Deps: []string{m("link"), m("frame")}},
		{ImportPath: m("link"), Imports: []string{"net"}},
		{ImportPath: m("reliable/runtime"), Imports: []string{m("link"), "time"}, Deps: []string{m("link")}},
	}
	got := strings.Join(check(pkgs), "\n")
	for _, want := range []string{
		"core " + m("reliable/pbp") + " depends on " + m("reliable/pbp") + ", which imports time",
		"core " + m("reliable/seq") + " imports " + m("link"),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violation not reported: %s\ngot:\n%s", want, got)
		}
	}
	if strings.Contains(got, "reliable/runtime") {
		t.Errorf("the runtime may use link and time:\n%s", got)
	}
}
