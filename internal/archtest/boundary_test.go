package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The boundaries between the layers, beyond the direction of imports:
// who may reach the cores, who may touch a link, what the shipped
// programs link, and that every package says what it is.

// coreDrivers are the packages outside reliable/ that may import the
// packages under it (the cores, their contract and clock) rather than
// reliable's API: they re-run a core by hand. internal/replay steps one
// member's core on a capture's frames (pcap-replay simulate and check).
// Everything else above reliable — dsm, the daemon, the commands, the
// simulators — uses package reliable, which re-exports what they need
// (reliable/export.go; reliable.Files runs the file core). internal/filestore
// implements the file core's Sink and Source over a directory
// (reliable/files): it builds the core's own types (ranges, hashes,
// sources) and is no runtime.
var coreDrivers = []string{"internal/replay", "internal/filestore"}

// checkCoreImports returns every package outside reliable/ that imports a
// package under it other than reliable itself, unless it is one of
// coreDrivers.
func checkCoreImports(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		if under(p.ImportPath, "reliable") || named(p.ImportPath, coreDrivers) {
			continue
		}
		for _, imp := range p.Imports {
			if under(imp, "reliable") && imp != module+"/reliable" {
				bad = append(bad, fmt.Sprintf("%s imports %s: above reliable, use reliable's API (re-export what is missing in reliable/export.go), or name the package in coreDrivers if it must step a core itself", p.ImportPath, imp))
			}
		}
	}
	return bad
}

// linkUsers are the packages that may import link or a package under it
// (besides those under link/ and the programs under cmd/ and bench/,
// which wire links to the rest): the runtime, the links and decorators of
// DESIGN.md (capture, the simulated segment), and the packages that are
// the body of a program (the daemon, linkbench, pcap-replay's inject, the
// simulator demo, the DSM examples' harness), and the cores' simulation
// tests' harness (it reads a simulated endpoint). dsm and orca are here
// for Join's parameter only (TestJoinersUseLinkOnlyInJoin).
var linkUsers = []string{
	"reliable", "reliable/internal/simtest", "reliable/internal/viewsim", "capture", "testnet", "testnet/rtnet", "dsm", "dsm/dsmsim", "orca", "collective",
	"internal/daemon", "internal/linkbench", "internal/replay", "internal/simdemo", "dsm/examples/internal/harness",
	"orca/examples/internal/harness",
}

// joiners are the packages above reliable that take a link.Link in their
// Join and hand it to reliable.Join (or to link/mux's New, whose views go
// to reliable.Join or JoinLoop: dsm's per-segment channels, on one event
// loop), doing nothing else with links.
var joiners = []string{"dsm", "orca"}

// checkLinkImports returns every package that imports link (or a package
// under it) without being allowed to.
func checkLinkImports(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		if under(p.ImportPath, "link") || under(p.ImportPath, "cmd") || under(p.ImportPath, "bench") || named(p.ImportPath, linkUsers) {
			continue
		}
		for _, imp := range p.Imports {
			// link/netyield touches no link: it is the yield the ring's
			// poll and the local API's polls share.
			if under(imp, "link") && imp != module+"/link/netyield" {
				bad = append(bad, fmt.Sprintf("%s imports %s: only the runtime touches links (DESIGN.md); name the package in linkUsers if it must", p.ImportPath, imp))
			}
		}
	}
	return bad
}

// simulatorPrograms may link the simulated segment (testnet): they run
// members on it. cmd/rbcast-sim is the simulator's demo; the DSM and Orca
// examples run every rank in one process on it with -sim.
var simulatorPrograms = []string{"cmd/rbcast-sim", "dsm/examples/...", "orca/examples/..."}

// checkPrograms returns every program (package main) that links package
// testing, or the simulated segment without being one of
// simulatorPrograms: test code has no place in a shipped binary.
func checkPrograms(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		if p.Name != "main" {
			continue
		}
		for _, dep := range p.Deps {
			switch {
			case dep == "testing":
				bad = append(bad, fmt.Sprintf("program %s links testing (%s): a shipped binary carries no test code; move what needs *testing.T to a test helper package", p.ImportPath, via(pkgs, p, dep)))
			case dep == module+"/testnet" && !named(p.ImportPath, simulatorPrograms):
				bad = append(bad, fmt.Sprintf("program %s links the simulated segment %s (%s): only simulatorPrograms do", p.ImportPath, dep, via(pkgs, p, dep)))
			}
		}
	}
	return bad
}

// via says which of p's direct imports brings in dep, for the message.
func via(pkgs []pkg, p pkg, dep string) string {
	if slices.Contains(p.Imports, dep) {
		return "imported directly"
	}
	for _, imp := range p.Imports {
		for _, q := range pkgs {
			if q.ImportPath == imp && slices.Contains(q.Deps, dep) {
				return "through " + imp
			}
		}
	}
	return "through a dependency"
}

// checkDocs returns every package without a package comment.
func checkDocs(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		if strings.TrimSpace(p.Doc) == "" {
			bad = append(bad, fmt.Sprintf("%s has no package comment: say what it is in a doc.go (// Package %s ...)", p.ImportPath, filepath.Base(p.ImportPath)))
		}
	}
	return bad
}

// named reports whether p is one of the module-relative paths in list
// ("dir/..." matches dir and everything under it).
func named(p string, list []string) bool {
	for _, n := range list {
		if dir, ok := strings.CutSuffix(n, "/..."); ok && under(p, dir) || p == module+"/"+n {
			return true
		}
	}
	return false
}

func TestOnlyReliableImportsCores(t *testing.T) {
	for _, v := range checkCoreImports(listPackages(t)) {
		t.Error(v)
	}
}

func TestOnlyNamedPackagesImportLink(t *testing.T) {
	for _, v := range checkLinkImports(listPackages(t)) {
		t.Error(v)
	}
}

func TestProgramsLinkNoTestCode(t *testing.T) {
	pkgs := listPackages(t)
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.Name == "main" }) {
		t.Fatal("go list found no programs")
	}
	for _, v := range checkPrograms(pkgs) {
		t.Error(v)
	}
}

func TestEveryPackageHasDoc(t *testing.T) {
	for _, v := range checkDocs(listPackages(t)) {
		t.Error(v)
	}
}

// TestBoundaryChecksCatch makes sure the four checks above are not
// vacuous: each reports a planted violation and passes what is allowed.
func TestBoundaryChecksCatch(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	doc := "Package x is x."
	pkgs := []pkg{
		{ImportPath: m("reliable"), Doc: doc, Imports: []string{m("reliable/pbp"), m("reliable/seq"), m("link")}},
		{ImportPath: m("reliable/member"), Doc: doc, Imports: []string{m("reliable/pbp")}},
		{ImportPath: m("internal/daemon"), Doc: doc, Imports: []string{m("reliable"), m("reliable/pbp"), m("link")}},
		{ImportPath: m("dsm"), Doc: doc, Imports: []string{m("reliable/seq"), m("link")}},
		{ImportPath: m("internal/replay"), Doc: doc, Imports: []string{m("reliable/pbp"), m("reliable/core"), m("link")}},
		{ImportPath: m("dsm/core"), Doc: doc, Imports: []string{m("link/ring")}},
		{ImportPath: m("internal/newthing"), Imports: []string{m("link")}},
		{ImportPath: m("testnet/netns"), Doc: doc, Imports: []string{"testing"}, Deps: []string{"testing"}},
		{ImportPath: m("testnet"), Doc: doc, Imports: []string{m("link")}, Deps: []string{m("link")}},
		{ImportPath: m("cmd/linkbench"), Name: "main", Doc: doc, Imports: []string{m("testnet/netns"), m("link/ring")}, Deps: []string{m("testnet/netns"), "testing"}},
		{ImportPath: m("cmd/rbcastd"), Name: "main", Doc: doc, Imports: []string{m("testnet")}, Deps: []string{m("testnet"), m("link")}},
		{ImportPath: m("cmd/rbcast-sim"), Name: "main", Doc: doc, Imports: []string{m("testnet")}, Deps: []string{m("testnet"), m("link")}},
		{ImportPath: m("dsm/examples/jacobi"), Name: "main", Doc: doc, Imports: []string{m("dsm/examples/internal/harness")}, Deps: []string{m("dsm/examples/internal/harness"), m("testnet")}},
		{ImportPath: m("bench/mpi/compare"), Name: "main", Imports: []string{"testing"}, Deps: []string{"testing"}},
	}
	for _, tc := range []struct {
		check   func([]pkg) []string
		want    []string
		allowed []string
	}{
		{checkCoreImports, []string{
			m("internal/daemon") + " imports " + m("reliable/pbp"),
			m("dsm") + " imports " + m("reliable/seq"),
		}, []string{m("reliable") + " imports", m("reliable/member"), m("internal/replay"), m("reliable") + ":"}},
		{checkLinkImports, []string{
			m("dsm/core") + " imports " + m("link/ring"),
			m("internal/newthing") + " imports " + m("link"),
		}, []string{m("reliable") + " ", m("internal/daemon"), m("dsm") + " ", m("internal/replay"), m("testnet") + " ", m("cmd/")}},
		{checkPrograms, []string{
			"program " + m("cmd/linkbench") + " links testing (through " + m("testnet/netns") + ")",
			"program " + m("cmd/rbcastd") + " links the simulated segment " + m("testnet") + " (imported directly)",
			"program " + m("bench/mpi/compare") + " links testing (imported directly)",
		}, []string{m("cmd/rbcast-sim"), m("dsm/examples/jacobi"), m("testnet/netns") + " links"}},
		{checkDocs, []string{
			m("internal/newthing") + " has no package comment: say what it is in a doc.go (// Package newthing ...)",
			m("bench/mpi/compare") + " has no package comment",
		}, []string{m("reliable") + " has", m("cmd/linkbench") + " has"}},
	} {
		got := strings.Join(tc.check(pkgs), "\n")
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("violation not reported: %s\ngot:\n%s", want, got)
			}
		}
		for _, ok := range tc.allowed {
			if strings.Contains(got, ok) {
				t.Errorf("reported what is allowed (%s):\n%s", ok, got)
			}
		}
	}
}

// linkUses type-checks one package (files, with import path path) and
// returns every use of package link in it other than naming a
// function's parameter type, and every use of a value of one of link's
// types other than handing it to reliable.Join. dsm and orca take a
// link.Link in Join (their API: the caller opens the link) and hand it to
// reliable.Join, and must do nothing else with links: only the runtime
// touches them.
func linkUses(fset *token.FileSet, path string, files []*ast.File, imp types.Importer) ([]string, error) {
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	if _, err := (&types.Config{Importer: imp}).Check(path, fset, files, info); err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", path, err)
	}
	linkPath := module + "/link"
	fromLink := func(t types.Type) bool {
		n, ok := t.(*types.Named)
		return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == linkPath
	}
	var bad []string
	for _, f := range files {
		var params []*ast.FieldList
		handed := map[*ast.Ident]bool{} // arguments of reliable.Join (JoinLoop)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncType:
				params = append(params, n.Params)
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if fn, ok := info.Uses[sel.Sel].(*types.Func); ok && fn.Pkg() != nil && (fn.Pkg().Path() == module+"/reliable" && (fn.Name() == "Join" || fn.Name() == "JoinLoop") || fn.Pkg().Path() == module+"/link/mux" && fn.Name() == "New") {
						for _, a := range n.Args {
							if id, ok := a.(*ast.Ident); ok {
								handed[id] = true
							}
						}
					}
				}
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				if pn, ok := info.Uses[id].(*types.PkgName); !ok || pn.Imported().Path() != linkPath {
					return true
				}
				inParams := slices.ContainsFunc(params, func(fl *ast.FieldList) bool {
					return fl != nil && fl.Pos() <= n.Pos() && n.End() <= fl.End()
				})
				if !inParams {
					bad = append(bad, fmt.Sprintf("%s: %s.%s", fset.Position(n.Pos()), id.Name, n.Sel.Name))
				}
				return false
			case *ast.Ident:
				if v, ok := info.Uses[n].(*types.Var); ok && fromLink(v.Type()) && !handed[n] {
					bad = append(bad, fmt.Sprintf("%s: %s (a %s) used", fset.Position(n.Pos()), n.Name, types.TypeString(v.Type(), nil)))
				}
			}
			return true
		})
	}
	return bad, nil
}

// parsePackage parses the (non-test) files of p.
func parsePackage(t *testing.T, fset *token.FileSet, p pkg) []*ast.File {
	t.Helper()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

func TestJoinersUseLinkOnlyInJoin(t *testing.T) {
	pkgs := listPackages(t)
	for _, name := range joiners {
		i := slices.IndexFunc(pkgs, func(p pkg) bool { return p.ImportPath == module+"/"+name })
		if i < 0 {
			t.Fatalf("package %s not found", name)
		}
		p := pkgs[i]
		fset := token.NewFileSet()
		bad, err := linkUses(fset, p.ImportPath, parsePackage(t, fset, p), exportImporter(t, fset, p.ImportPath))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("%s: %s: %s takes a link in Join's parameters and hands it to reliable.Join; only the runtime touches links", name, b, name)
		}
	}
}

// TestLinkUsesCatches makes sure the check is not vacuous.
func TestLinkUsesCatches(t *testing.T) {
	src := `package p
import (
	"context"
	l2 "github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
)
func Join(ctx context.Context, l l2.Link) error { _, err := reliable.Join(ctx, l, reliable.Config{}); return err }
func size(l l2.Link) int { return l2.EthernetHeaderLen + l.MTU() }
var frames []l2.Frame
func send(l l2.Link) (int, error) { return l.Send(nil) }`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := linkUses(fset, "p", []*ast.File{f}, exportImporter(t, fset, module+"/link", module+"/reliable"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p.go:8:35: l2.EthernetHeaderLen",
		"p.go:8:58: l (a github.com/rbcast/rbcast/link.Link) used",
		"p.go:9:14: l2.Frame",
		"p.go:10:44: l (a github.com/rbcast/rbcast/link.Link) used",
	}
	if !slices.Equal(bad, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
