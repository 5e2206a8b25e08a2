package benchplot

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: a report file, however damaged, either fails to parse with
// an error that names the file, or parses to tables whose rows have as
// many cells as their header; and the figures drawn from it (what
// cmd/benchplot does next) fail with an error, never a panic, and draw.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.md"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("### Latency\n\n| system | p50 | p99 |\n|---|---|---|\n| PBP2 | 7.47 (7–8) | 9 |\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 16<<10 {
			return
		}
		rep, err := Parse(strings.NewReader(string(b)), "fuzz.md")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.md:") {
				t.Fatalf("error %q does not name the file and line", err)
			}
			return
		}
		for _, tb := range rep.Tables {
			for k, r := range tb.Rows {
				if len(r.Cells) != len(tb.Columns) {
					t.Fatalf("line %d: %d cells under %d columns", r.Line, len(r.Cells), len(tb.Columns))
				}
				for i := range r.Cells {
					if _, _, err := tb.Num(k, tb.Columns[i]); err != nil && !strings.HasPrefix(err.Error(), "fuzz.md:") {
						t.Fatalf("error %q does not name the file and line", err)
					}
				}
			}
		}
		figs, _, err := Figures([]*Report{rep})
		if err != nil {
			return
		}
		for _, fig := range figs {
			if err := fig.Write(io.Discard, "svg"); err != nil {
				t.Fatalf("%s: a figure built without error does not draw: %v", fig.Name, err)
			}
		}
	})
}

// FuzzParseCell: a cell either holds no number, fails with an error
// quoting it, or reads as finite numbers with low ≤ high.
func FuzzParseCell(f *testing.F) {
	for _, s := range []string{"303", "303 (248–311)", "1.45 M (1.43–1.47)", "84%", "0.16×", "4.5ms", "–", "", "7 (1-2)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok, err := ParseCell(s)
		if err != nil {
			if ok || !strings.Contains(err.Error(), "cannot read") {
				t.Fatalf("%q: ok %v, error %q", s, ok, err)
			}
			return
		}
		if !ok {
			if v != (Value{}) {
				t.Fatalf("%q holds no number, yet reads %+v", s, v)
			}
			return
		}
		if !(v.Lo <= v.Hi) || math.IsInf(v.Median, 0) || math.IsInf(v.Lo, 0) || math.IsInf(v.Hi, 0) || v.Median != v.Median {
			t.Fatalf("%q reads %+v", s, v)
		}
	})
}
