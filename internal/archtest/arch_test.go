// Package archtest checks the import rules of DESIGN.md with `go list
// -deps`: imports point downward only, frame imports nothing of ours, and
// the protocol cores touch no I/O, so the same core runs live, in the
// simulator and in pcap-replay.
package archtest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rbcast/rbcast"

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
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
// time or global randomness (DESIGN.md, decision 1), with the packages
// below them (net/http, os/exec, runtime/debug, ...). They may not be
// imported by a core or by any package of ours a core depends on.
var forbiddenInCore = []string{"net", "os", "sync", "syscall", "time", "math/rand", "crypto/rand", "log", "unsafe", "context", "runtime"}

// forbidden reports whether the standard package imp is forbiddenInCore.
func forbidden(imp string) bool {
	for _, f := range forbiddenInCore {
		if imp == f || strings.HasPrefix(imp, f+"/") {
			return true
		}
	}
	return false
}

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
					if forbidden(imp) {
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
		{ImportPath: m("reliable/member"), Imports: []string{m("frame"), "os/exec", "context"}, Deps: []string{m("frame")}},
	}
	got := strings.Join(check(pkgs), "\n")
	for _, want := range []string{
		"core " + m("reliable/pbp") + " depends on " + m("reliable/pbp") + ", which imports time",
		"core " + m("reliable/seq") + " imports " + m("link"),
		"core " + m("reliable/member") + " depends on " + m("reliable/member") + ", which imports os/exec",
		"core " + m("reliable/member") + " depends on " + m("reliable/member") + ", which imports context",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violation not reported: %s\ngot:\n%s", want, got)
		}
	}
	if strings.Contains(got, "reliable/runtime") {
		t.Errorf("the runtime may use link and time:\n%s", got)
	}
}

// concurrency returns, for one file's source, every goroutine, channel
// and select in it: a core needs no import for those, so the import rules
// alone would not catch a core that started a goroutine or waited on a
// channel (DESIGN.md, decision 1).
func concurrency(name string, src any) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		var what string
		switch n.(type) {
		case *ast.GoStmt:
			what = "a go statement"
		case *ast.ChanType:
			what = "a channel type"
		case *ast.SelectStmt:
			what = "a select statement"
		case *ast.SendStmt:
			what = "a channel send"
		case *ast.UnaryExpr:
			if n.(*ast.UnaryExpr).Op == token.ARROW {
				what = "a channel receive" // of a channel some function returned
			}
		}
		if what != "" {
			bad = append(bad, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
		}
		return true
	})
	return bad, nil
}

// checkCoreFiles runs check on every (non-test) source file of every
// core and reports what it finds with why.
func checkCoreFiles(t *testing.T, check func(name string, src any) ([]string, error), why string) {
	t.Helper()
	n := 0
	for _, p := range listPackages(t) {
		if !isCore(p.ImportPath) {
			continue
		}
		for _, f := range p.GoFiles {
			bad, err := check(filepath.Join(p.Dir, f), nil)
			if err != nil {
				t.Fatal(err)
			}
			n++
			for _, b := range bad {
				t.Errorf("core %s: %s: %s", p.ImportPath, b, why)
			}
		}
	}
	if n == 0 {
		t.Fatal("no core source files found")
	}
}

func TestCoresStartNoGoroutines(t *testing.T) {
	checkCoreFiles(t, concurrency, "cores are stepped by their caller, they start and wait on nothing")
}

// TestConcurrencyCatches makes sure the source check is not vacuous.
func TestConcurrencyCatches(t *testing.T) {
	src := `package p
func f(c chan int) {
	go func() {}()
	select {
	case c <- 1:
	default:
	}
}`
	bad, err := concurrency("p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(bad, "\n")
	for _, want := range []string{"p.go:2:10: a channel type", "p.go:3:2: a go statement", "p.go:4:2: a select statement", "p.go:5:7: a channel send"} {
		if !strings.Contains(got, want) {
			t.Errorf("not reported: %s\ngot:\n%s", want, got)
		}
	}
	if bad, _ := concurrency("r.go", "package r\nfunc h(x interface{ Done() <-chan struct{} }) {\n\t<-x.Done()\n}"); !slices.Contains(bad, "r.go:3:2: a channel receive") {
		t.Errorf("receive from a returned channel not reported: %v", bad)
	}
	if bad, _ := concurrency("q.go", "package q\nfunc g(m map[int]int) int { return len(m) }"); len(bad) != 0 {
		t.Errorf("clean source reported: %v", bad)
	}
}

// packageVars returns, for one file's source, every package-level
// variable other than an error sentinel (a value made by errors.New or
// fmt.Errorf) and the blank identifier: state every core of the process
// would share, which the simulator (many cores in one process, seeds run
// in any order) and pcap-replay could not reproduce. A core keeps its
// state in its own struct; constants and error values are fine.
func packageVars(name string, src any) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if id.Name == "_" || (i < len(vs.Values) && errorValue(vs.Values[i])) {
					continue
				}
				bad = append(bad, fmt.Sprintf("%s: package-level variable %s", fset.Position(id.Pos()), id.Name))
			}
		}
	}
	return bad, nil
}

// errorValue reports whether e is errors.New(...) or fmt.Errorf(...).
func errorValue(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && (pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf")
}

func TestCoresHaveNoPackageState(t *testing.T) {
	checkCoreFiles(t, packageVars, "a core's state lives in its own struct, not in the package (DESIGN.md, decision 1)")
}

// TestPackageVarsCatches makes sure the check is not vacuous.
func TestPackageVarsCatches(t *testing.T) {
	src := `package p
import ("errors"; "fmt")
var ErrA = errors.New("a")
var (
	ErrB = fmt.Errorf("b: %d", 1)
	AckDiv = 2
	_ = 3
)
var table [4]int
const ok = 1
func f() { var local int; _ = local }`
	bad, err := packageVars("p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go:6:2: package-level variable AckDiv", "p.go:9:5: package-level variable table"}
	if !slices.Equal(bad, want) {
		t.Errorf("got %q, want %q", bad, want)
	}
}
