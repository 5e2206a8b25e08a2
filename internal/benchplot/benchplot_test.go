package benchplot

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testdata/run-28.md and run-29.md are BenchmarkReport's output of runs 28
// and 29 (docs/benchmarks-history.md) as it printed them: run 28 has the
// one-to-all, CPU, 64-byte (MTU 1500 only, no MTU column, as the report
// was then) and latency tables; run 29 the 64-byte table at both MTUs, the
// window, all-to-all and latency tables.
func parseFile(t *testing.T, name string) *Report {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Parse(f, name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseReport(t *testing.T) {
	r := parseFile(t, "testdata/run-28.md")
	if !strings.HasPrefix(r.Preamble, "BenchmarkReport: 1s per run, 3 repetitions") {
		t.Errorf("preamble %q", r.Preamble)
	}
	var kinds []Kind
	for _, tb := range r.Tables {
		kinds = append(kinds, tb.Kind)
	}
	if want := []Kind{OneToAll, OneToAllCPU, Small, Latency}; !slices.Equal(kinds, want) {
		t.Fatalf("tables %v, want %v", kinds, want)
	}
	one := r.Table(OneToAll)
	if len(one.Rows) != 18 || len(one.Columns) != 18 {
		t.Fatalf("one-to-all: %d rows of %d columns, want 18 of 18", len(one.Rows), len(one.Columns))
	}
	// | 7 | 9000 | 5% | 402 (334–446) | ... | PBP2 308 (253–331) | 77% | ...
	rows, err := one.where(cond{colRx, 7}, cond{colMTU, 9000}, cond{colLoss, 5})
	if err != nil || len(rows) != 1 {
		t.Fatalf("rx 7, MTU 9000, 5%%: rows %v, %v", rows, err)
	}
	for _, c := range []struct {
		col  string
		want Value
	}{
		{"raw ring", Value{402, 334, 446}},
		{"PBP2", Value{308, 253, 331}},
		{"PBP2/raw", Value{77, 77, 77}},
		{"PBP2 gap", Value{25.8, 25.8, 25.8}},
		{"PBP2 Deliver/TCP", Value{9.52, 9.52, 9.52}},
	} {
		v, ok, err := one.Num(rows[0], c.col)
		if err != nil || !ok || v != c.want {
			t.Errorf("%s = %+v, %v, %v; want %+v", c.col, v, ok, err, c.want)
		}
	}
	cpu := r.Table(OneToAllCPU)
	if v, ok, err := cpu.Num(0, "TCP fan-out"); err != nil || !ok || v.Median != 0.74 {
		t.Errorf("CPU table, first row, TCP = %+v %v %v; want 0.74", v, ok, err)
	}
	small := r.Table(Small)
	if small.Col(colMTU) >= 0 || small.headingMTU() != 1500 {
		t.Errorf("run 28's 64-byte table: MTU column %d, heading MTU %g; want none and 1500", small.Col(colMTU), small.headingMTU())
	}
	if v, _, _ := small.Num(0, "PBP2"); v != (Value{2.76e6, 2.39e6, 2.81e6}) {
		t.Errorf("64-byte, first row, PBP2 = %+v, want 2.76 M (2.39–2.81)", v)
	}
	lat := r.Table(Latency)
	if v, _, _ := lat.Num(1, "p99"); v != (Value{34.8, 26.4, 35.1}) || lat.Rows[1].Cells[0] != "PBP2" {
		t.Errorf("latency row 2 = %v, p99 %+v; want PBP2 34.8 (26.4–35.1)", lat.Rows[1].Cells, v)
	}
}

// testdata/files-5a.md is what bench/files/run -o writes (a made-up run
// of 1 to 3 receivers at both MTUs, lossless and at 5 %).
func TestParseFilesReport(t *testing.T) {
	r := parseFile(t, "testdata/files-5a.md")
	if len(r.Tables) != 1 || r.Tables[0].Kind != Files || !strings.HasPrefix(r.Machine, "Intel(R) Xeon(R) Processor, 2 CPUs") {
		t.Fatalf("%d tables, the first a %v; machine %q", len(r.Tables), r.Tables[0].Kind, r.Machine)
	}
	tb := r.Table(Files)
	rows, err := tb.where(cond{colMTU, 9000}, cond{colRx, 2}, cond{colLoss, 5})
	if err != nil || len(rows) != 1 {
		t.Fatalf("MTU 9000, 2 receivers, 5 %%: rows %v, %v", rows, err)
	}
	if v, ok, err := tb.Num(rows[0], "uftp"); err != nil || !ok || v != (Value{0.41, 0.4, 0.42}) {
		t.Errorf("uftp = %+v %v %v, want 0.410 (0.400–0.420)", v, ok, err)
	}
	figs, _, err := Figures([]*Report{r})
	if err != nil || len(figs) != 1 || figs[0].Name != "files-receivers" {
		t.Fatalf("figures %v, %v; want files-receivers alone", figs, err)
	}
	// A row per loss, a panel per MTU; the run with no rbcast time ("–")
	// is left out of its line.
	f := figs[0]
	if len(f.panels) != 2 || len(f.panels[0]) != 2 || !slices.Equal(f.names, []string{"rbcast", "uftp"}) {
		t.Fatalf("%d rows of %d panels, legend %v; want 2 of 2, rbcast and uftp", len(f.panels), len(f.panels[0]), f.names)
	}
	if got := f.panels[1][0].Title.Text; got != "MTU 1500, 5 % loss" {
		t.Errorf("second row's first panel %q", got)
	}
}

func TestParseCell(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Value
		ok   bool
		err  string
	}{
		{"303", Value{303, 303, 303}, true, ""},
		{"303 (248–311)", Value{303, 248, 311}, true, ""},
		{"94.0 (90.0–102)", Value{94, 90, 102}, true, ""},
		{"1.45 M (1.43–1.47)", Value{1.45e6, 1.43e6, 1.47e6}, true, ""},
		{"84%", Value{84, 84, 84}, true, ""},
		{"0.16×", Value{0.16, 0.16, 0.16}, true, ""},
		{"4.5ms", Value{4.5, 4.5, 4.5}, true, ""},
		{"2 (1-3)", Value{2, 1, 3}, true, ""},
		{"–", Value{}, false, ""},
		{"", Value{}, false, ""},
		{"fast", Value{}, false, `cannot read "fast" as a number`},
		{"303 (248–311", Value{}, false, `want a range like (1.2–3.4)`},
		{"303 (311–248)", Value{}, false, `low ≤ high`},
		{"NaN", Value{}, false, `cannot read "NaN" as a number`},
		{"5 (NaN–1)", Value{}, false, `finite numbers`},
		{"5 (1–NaN)", Value{}, false, `finite numbers`},
		{"5 (-Inf–Inf)", Value{}, false, `finite numbers`},
		{"1e308 M", Value{}, false, `cannot read "1e308 M" as a number`},
		{"1e300 k (1–1e306)", Value{}, false, `finite numbers`},
	} {
		v, ok, err := ParseCell(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseCell(%q): error %v, want one saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || ok != c.ok || v != c.want {
			t.Errorf("ParseCell(%q) = %+v, %v, %v; want %+v, %v", c.in, v, ok, err, c.want, c.ok)
		}
	}
}

// Bad input names the file, the line and what is wrong with it.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"short row", "### Latency\n\n| system | p50 | p99 |\n|---|---|---|\n| PBP2 | 7.47 |\n", "bad.md:5: table row has 2 cells, its header has 3"},
		{"no separator", "### Latency\n\n| system | p50 | p99 |\n| PBP2 | 7.47 | 32.9 |\n", `bad.md:4: table header on line 3 is followed by "| PBP2 | 7.47 | 32.9 |", want a |---| row`},
		{"header alone", "### Latency\n\n| system | p50 | p99 |\n\nmore", "bad.md:4: table header on line 3 is not followed by a |---| row"},
		{"header last", "| system | p50 | p99 |", "bad.md:1: table header is the last line"},
		{"open row", "| system | p50 | p99 |\n|---|---|---|\n| PBP2 | 1 | 2\n", `bad.md:3: table row "| PBP2 | 1 | 2" does not end with |`},
	} {
		_, err := Parse(strings.NewReader(c.in), "bad.md")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	// A cell is read when a figure needs it: the error names its line and
	// column.
	r, err := Parse(strings.NewReader("### Latency\n\n| system | p50 | p99 |\n|---|---|---|\n| PBP2 | 7.47 | fast |\n"), "bad.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Figures([]*Report{r})
	if want := `latency: bad.md:5: column "p99": cannot read "fast" as a number`; err == nil || err.Error() != want {
		t.Errorf("Figures: %v, want %q", err, want)
	}
}

func TestLatestWins(t *testing.T) {
	r28, r29 := parseFile(t, "testdata/run-28.md"), parseFile(t, "testdata/run-29.md")
	reports := []*Report{r28, r29}
	for _, c := range []struct {
		k    Kind
		want *Report
	}{{OneToAll, r28}, {Small, r29}, {Latency, r29}, {Window, r29}, {AllToAll, r29}} {
		if _, rep := Latest(reports, c.k); rep != c.want {
			t.Errorf("%s from %v, want %s", c.k, rep, c.want.Name)
		}
	}
	if tb, _ := Latest([]*Report{r28}, Window); tb != nil {
		t.Errorf("run 28 has no window table, Latest found %q", tb.Heading)
	}
}

// The figures of both sample reports are written, non-empty and in the
// format asked for; SVGs have a white background and a caption names the
// run.
func TestWriteAll(t *testing.T) {
	reports := []*Report{parseFile(t, "testdata/run-28.md"), parseFile(t, "testdata/run-29.md"), parseFile(t, "testdata/files-5a.md")}
	for _, format := range Formats {
		dir := t.TempDir()
		files, missing, err := WriteAll(reports, dir, format)
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) != 0 {
			t.Errorf("%s: missing %v", format, missing)
		}
		var names []string
		for _, f := range files {
			names = append(names, filepath.Base(f))
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			switch format {
			case "png":
				img, err := png.Decode(bytes.NewReader(b))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if s := img.Bounds().Size(); s.X < 400 || s.Y < 200 {
					t.Errorf("%s: %v pixels", f, s)
				}
			case "svg":
				if !bytes.HasPrefix(b, []byte("<?xml")) || !bytes.Contains(b, []byte("<svg")) || len(b) < 5000 {
					t.Errorf("%s: not an SVG drawing (%d bytes)", f, len(b))
				}
				if !bytes.Contains(b, []byte("drawn by cmd/benchplot from testdata/run-2")) && !bytes.Contains(b, []byte("drawn by cmd/benchplot from testdata/files-5a.md")) {
					t.Errorf("%s: no footer naming the report", f)
				}
			}
		}
		want := []string{"one-to-all", "one-to-all-loss", "one-to-all-cpu", "small-messages", "window", "all-to-all", "latency", "files-receivers"}
		for i := range want {
			want[i] += "." + format
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: wrote %v, want %v", format, names, want)
		}
	}
	figs, _, err := Figures(reports)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range figs {
		wantRun := "(run 29)"
		switch f.Kind {
		case OneToAll, OneToAllCPU:
			wantRun = "(run 28)"
		case Files:
			wantRun = "(files 5a)"
		}
		if !strings.HasSuffix(f.Caption, wantRun) {
			t.Errorf("%s: caption %q, want it to end %q", f.Name, f.Caption, wantRun)
		}
	}
	if err := figs[0].Write(&bytes.Buffer{}, "gif"); err == nil || !strings.Contains(err.Error(), `image format "gif": want one of svg, png`) {
		t.Errorf("Write gif: %v", err)
	}
}

// The same figures drawn twice are the same bytes: make plots over
// unchanged reports leaves docs/img unchanged.
func TestDeterministic(t *testing.T) {
	reports := []*Report{parseFile(t, "testdata/run-29.md")}
	draw := func() []byte {
		figs, _, err := Figures(reports)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, f := range figs {
			if err := f.Write(&b, "svg"); err != nil {
				t.Fatal(err)
			}
		}
		return b.Bytes()
	}
	if a, b := draw(), draw(); !bytes.Equal(a, b) {
		t.Error("two drawings of the same reports differ")
	}
}

// The reports make plots draws docs/img from parse and give every figure.
func TestCommittedReports(t *testing.T) {
	names, err := filepath.Glob("../../docs/data/run-*.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../docs/data/files-*.md")
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, files...)
	if len(names) == 0 {
		t.Fatal("no docs/data/run-*.md")
	}
	var reports []*Report
	for _, n := range names {
		reports = append(reports, parseFile(t, n))
	}
	figs, missing, err := Figures(reports)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 0 || len(figs) != len(builders) {
		t.Errorf("%d figures, missing %v", len(figs), missing)
	}
}

// A files table with no tool's column is refused by name, not drawn as
// empty panels.
func TestFilesReportWithoutTools(t *testing.T) {
	in := "### Files to every member, time against receivers (IBRMP fig. 5a): one file of 50 MB\n\n" +
		"| MTU | rx | loss | ftp |\n|---|---|---|---|\n| 1500 | 1 | 0 | 0.5 |\n| 1500 | 2 | 0 | 0.6 |\n"
	r, err := Parse(strings.NewReader(in), "nofiles.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Figures([]*Report{r})
	if err == nil || !strings.Contains(err.Error(), "nofiles.md: the files table") || !strings.Contains(err.Error(), "has no tool's column; want one of rbcast, uftp, udpcast, tcp") {
		t.Fatalf("Figures: %v; want the files table refused for having no tool's column", err)
	}
}

// A table with a header and no rows draws no figure: Figures says which
// table, rather than the canvas panicking at an image of no size (found
// by FuzzParse).
func TestTableWithoutRows(t *testing.T) {
	r, err := Parse(strings.NewReader("### Files to every member, time against receivers\n\n| rx | loss | rbcast |\n|---|---|---|\n"), "empty.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Figures([]*Report{r})
	if want := `files-receivers: empty.md: the files table ("Files to every member, time against receivers") has no rows to draw`; err == nil || err.Error() != want {
		t.Fatalf("Figures: %v, want %q", err, want)
	}
}
