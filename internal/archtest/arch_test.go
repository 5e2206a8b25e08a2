package archtest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/rbcast/rbcast"

type pkg struct {
	ImportPath string
	Name       string // "main" for a program
	Doc        string // the package comment's first sentence
	Dir        string
	GoFiles    []string
	Imports    []string // direct
	Deps       []string // transitive
	Export     string   // export data file, with go list -export
}

// listed caches listPackages: the tree does not change while the tests
// run.
var listed struct {
	sync.Mutex
	pkgs []pkg
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	listed.Lock()
	defer listed.Unlock()
	if listed.pkgs == nil {
		listed.pkgs = goList(t, module+"/...")
	}
	return listed.pkgs
}

// goList runs go list -json with args and decodes the packages it prints.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
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

// notCores are the packages under reliable/ and dsm/ that drive cores
// rather than being one: the runtimes (over a link, or over Drivers on
// the simulated segment), the runtimes' wall-clock conversion, and the
// cores' simulation-test harness. Examples are not cores either.
var notCores = []string{"reliable", "reliable/clock/wall", "reliable/internal/simtest", "reliable/internal/viewsim", "dsm", "dsm/dsmsim"}

// isCore reports whether p is a protocol core: a package under reliable/
// or dsm/ other than notCores and the examples. The core contract,
// reliable/core, counts as one (and may import less: see check).
func isCore(p string) bool {
	if !under(p, "reliable") && !under(p, "dsm") {
		return false
	}
	rest := p[len(module)+1:]
	return !slices.Contains(notCores, rest) && !under(p, "dsm/examples")
}

// contract is the one core contract every core implements; it may import
// only frame and the cores' clock of ours, so that every core can import
// it.
const contract = "reliable/core"

// forbiddenInCore are standard packages that mean I/O, concurrency, wall
// time or global randomness (DESIGN.md, decision 1), with the packages
// below them (net/http, os/exec, runtime/debug, ...). They may not be
// imported by a core or by any package of ours a core depends on.
var forbiddenInCore = []string{"net", "os", "sync", "syscall", "time", "math/rand", "crypto/rand", "log", "unsafe", "context", "runtime", "io/ioutil", "path/filepath"}

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
			case p.ImportPath == module+"/"+contract && !under(dep, "frame") && dep != module+"/reliable/clock":
				bad = append(bad, fmt.Sprintf("core contract %s imports %s: it imports frame and reliable/clock only", p.ImportPath, dep))
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
		{ImportPath: m("reliable"), Imports: []string{m("link"), "time"}, Deps: []string{m("link")}},
		{ImportPath: m("dsm/dsmsim"), Imports: []string{m("testnet"), "time"}, Deps: []string{m("testnet"), m("link")}},
		{ImportPath: m("reliable/member"), Imports: []string{m("frame"), "os/exec", "context", "path/filepath"}, Deps: []string{m("frame")}},
		{ImportPath: m("reliable/core"), Imports: []string{m("reliable/pbp")}, Deps: []string{m("reliable/pbp"), m("reliable/clock"), m("frame")}},
		{ImportPath: m("reliable/clock")},
	}
	got := strings.Join(check(pkgs), "\n")
	for _, want := range []string{
		"core " + m("reliable/pbp") + " depends on " + m("reliable/pbp") + ", which imports time",
		"core " + m("reliable/seq") + " imports " + m("link"),
		"core " + m("reliable/member") + " depends on " + m("reliable/member") + ", which imports os/exec",
		"core " + m("reliable/member") + " depends on " + m("reliable/member") + ", which imports context",
		"core " + m("reliable/member") + " depends on " + m("reliable/member") + ", which imports path/filepath",
		"core contract " + m("reliable/core") + " imports " + m("reliable/pbp"),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violation not reported: %s\ngot:\n%s", want, got)
		}
	}
	for _, ok := range []string{m("reliable") + " ", m("dsm/dsmsim"), m("reliable/clock"), "core contract " + m("reliable/core") + " imports " + m("frame")} {
		if strings.Contains(got, ok) {
			t.Errorf("reported what is allowed (%s: the runtime and the simulator may use link and time, the contract frame and clock):\n%s", ok, got)
		}
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
// fmt.Errorf, or another package's sentinel, pkg.ErrX, re-exported) and
// the blank identifier: state every core of the process
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

// errorValue reports whether e is errors.New(...) or fmt.Errorf(...), or
// names another package's sentinel (pkg.ErrX).
func errorValue(e ast.Expr) bool {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		_, pkg := sel.X.(*ast.Ident)
		return pkg && strings.HasPrefix(sel.Sel.Name, "Err")
	}
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
func f() { var local int; _ = local }
var ErrC = core.ErrC
var Limit = core.Limit`
	bad, err := packageVars("p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go:6:2: package-level variable AckDiv", "p.go:9:5: package-level variable table",
		"p.go:13:5: package-level variable Limit"}
	if !slices.Equal(bad, want) {
		t.Errorf("got %q, want %q", bad, want)
	}
}

// mapRanges type-checks one package (files, with import path path) and
// returns every range over a map in it, and every range straight over
// maps.Keys, maps.Values or maps.All, which iterate in the map's order. Go
// randomises map iteration order, so a core that ranged over a map could
// send the same inputs' frames in another order on every run, and the
// simulator and pcap-replay, which re-run cores, would not reproduce it.
// A core that needs a map's entries in order keeps its keys in a sorted
// slice beside it (dsm/core keeps segs and keys) or sorts them first
// (slices.Sorted(maps.Keys(m))).
func mapRanges(fset *token.FileSet, path string, files []*ast.File, imp types.Importer) ([]string, error) {
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check(path, fset, files, info)
	if err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", path, err)
	}
	var bad []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			r, ok := n.(*ast.RangeStmt)
			if !ok {
				return true
			}
			if t := info.TypeOf(r.X); rangesMap(t) {
				bad = append(bad, fmt.Sprintf("%s: a range over a map (%s, of type %s)", fset.Position(r.Pos()), types.ExprString(r.X), types.TypeString(t, types.RelativeTo(pkg))))
			} else if fn := mapsIterator(info, r.X); fn != "" {
				bad = append(bad, fmt.Sprintf("%s: a range over maps.%s (%s), in the map's order", fset.Position(r.Pos()), fn, types.ExprString(r.X)))
			}
			return true
		})
	}
	return bad, nil
}

// rangesMap reports whether ranging over a value of type t ranges over a
// map: t's underlying type is a map, or t is a type parameter whose
// constraint allows a map.
func rangesMap(t types.Type) bool {
	if t == nil {
		return false
	}
	if tp, ok := t.(*types.TypeParam); ok {
		iface, _ := tp.Constraint().Underlying().(*types.Interface)
		if iface == nil {
			return false
		}
		for i := range iface.NumEmbeddeds() {
			switch e := iface.EmbeddedType(i).(type) {
			case *types.Union:
				for j := range e.Len() {
					if rangesMap(e.Term(j).Type()) {
						return true
					}
				}
			default:
				if rangesMap(e) {
					return true
				}
			}
		}
		return false
	}
	_, ok := t.Underlying().(*types.Map)
	return ok
}

// mapsIterator returns the name of the function of the standard package
// maps that e calls, if e is a call to maps.Keys, maps.Values or maps.All.
func mapsIterator(info *types.Info, e ast.Expr) string {
	c, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return ""
	}
	var id *ast.Ident
	switch fun := ast.Unparen(c.Fun).(type) {
	case *ast.SelectorExpr:
		id = fun.Sel
	case *ast.IndexExpr: // maps.Keys[M] with explicit type arguments
		if sel, ok := fun.X.(*ast.SelectorExpr); ok {
			id = sel.Sel
		}
	case *ast.IndexListExpr:
		if sel, ok := fun.X.(*ast.SelectorExpr); ok {
			id = sel.Sel
		}
	}
	if id == nil {
		return ""
	}
	fn, ok := info.Uses[id].(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "maps" {
		return ""
	}
	switch fn.Name() {
	case "Keys", "Values", "All":
		return fn.Name()
	}
	return ""
}

// exportImporter returns an importer that reads the compiler's export
// data of patterns and everything they depend on, as go list -export
// -deps builds and lists it (GOROOT ships no export data any more, and
// our packages have none outside the build cache).
func exportImporter(t *testing.T, fset *token.FileSet, patterns ...string) types.Importer {
	t.Helper()
	export := map[string]string{}
	for _, p := range goList(t, append([]string{"-export", "-deps"}, patterns...)...) {
		export[p.ImportPath] = p.Export
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := export[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s from go list -export", path)
		}
		return os.Open(f)
	})
}

func TestCoresRangeOverNoMap(t *testing.T) {
	var cores []pkg
	var paths []string
	for _, p := range listPackages(t) {
		if isCore(p.ImportPath) {
			cores = append(cores, p)
			paths = append(paths, p.ImportPath)
		}
	}
	if len(cores) == 0 {
		t.Fatal("no core packages found")
	}
	fset := token.NewFileSet()
	imp := exportImporter(t, fset, paths...)
	n := 0
	for _, p := range cores {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		bad, err := mapRanges(fset, p.ImportPath, files, imp)
		if err != nil {
			t.Fatal(err)
		}
		n += len(files)
		for _, b := range bad {
			t.Errorf("core %s: %s: Go randomises map order; a core's frames must come in the same order on every run (range over a sorted key slice)", p.ImportPath, b)
		}
	}
	if n == 0 {
		t.Fatal("no core source files found")
	}
}

// TestMapRangesCatches makes sure the check is not vacuous: it catches a
// range over a map (also a named one, behind a type parameter, and through
// maps.Keys) and accepts slices, arrays, strings, ints, a named slice type
// and maps.Keys sorted first.
func TestMapRangesCatches(t *testing.T) {
	src := `package p
import ("maps"; "slices")
type Members []int
type Table map[string]int
func f(m map[uint32]int, s []int, a [4]int, pa *[4]int, str string, ms Members, tb Table) int {
	n := 0
	for k := range m { n += int(k) }
	for i, v := range s { n += i + v }
	for i := range a { n += i }
	for i := range pa { n += i }
	for _, r := range str { n += int(r) }
	for i := range 10 { n += i }
	for _, v := range ms { n += v }
	for _, v := range tb { n += v }
	for _, k := range slices.Sorted(maps.Keys(m)) { n += int(k) }
	for v := range maps.Values(m) { n += v }
	return n
}
func g[M ~map[int]int](x M) {
	for range x {}
}
func h[S ~[]int](x S) {
	for range x {}
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := mapRanges(fset, "p", []*ast.File{f}, exportImporter(t, fset, "maps", "slices"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p.go:7:2: a range over a map (m, of type map[uint32]int)",
		"p.go:14:2: a range over a map (tb, of type Table)",
		"p.go:16:2: a range over maps.Values (maps.Values(m)), in the map's order",
		"p.go:20:2: a range over a map (x, of type M)",
	}
	if !slices.Equal(bad, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
