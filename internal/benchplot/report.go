// Package benchplot reads the markdown report that reliable's
// BenchmarkReport writes (make bench-net, RBCAST_REPORT_OUT), and the one
// bench/files/run -o writes, and draws their tables as the plots of
// docs/benchmarks.md (cmd/benchplot, make plots).
//
// A report is markdown: a "BenchmarkReport:" line, then one section per
// part, each a heading ("### One-to-all, largest messages ...") followed
// by prose and pipe tables whose cells read "median (low–high)", "84%",
// "0.16×", "1.45 M (1.43–1.47)" or "–". Parse keeps the cells as text and
// reads a number only when a plot asks for it, so an error names the file,
// line and column of the cell that could not be read.
package benchplot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Kind is which of BenchmarkReport's tables a table is.
type Kind int

const (
	Unknown     Kind = iota
	OneToAll         // one sender, largest messages: MB/s at the slowest receiver
	OneToAllCPU      // CPU-seconds per GB of the same runs
	Small            // one sender, 64-byte messages: messages/s
	Window           // MB/s against the window (thesis fig. 4.3)
	AllToAll         // every member sends: MB/s at the slowest member
	Latency          // one message in flight: one-way µs
	Files            // one file to every member: seconds against receivers (bench/files/run -o)
)

var kindNames = [...]string{"unknown", "one-to-all", "one-to-all CPU", "64-byte messages", "window", "all-to-all", "latency", "files"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// headingKinds maps the start of a section heading, as BenchmarkReport
// writes it, to the kind of the tables under it.
var headingKinds = []struct {
	prefix string
	kind   Kind
}{
	{"One-to-all, largest messages", OneToAll},
	{"One-to-all, 64-byte messages", Small},
	{"Window size", Window},
	{"All-to-all", AllToAll},
	{"Latency", Latency},
	{"Files to every member, time against receivers", Files},
}

// cpuIntro starts the paragraph that introduces the CPU table inside the
// one-to-all section.
const cpuIntro = "CPU-seconds"

// Report is one parsed report file.
type Report struct {
	Name     string // file name, for errors and captions
	Preamble string // the "BenchmarkReport: ..." line
	Machine  string // the "Machine: ..." line, when the report has one
	Tables   []*Table
}

// Table is one pipe table of a report.
type Table struct {
	Kind    Kind
	Heading string // the section heading, without the #s
	Columns []string
	Rows    []Row
	src     string // file name
}

// Row is one data row: its cells as written, and the line it is on.
type Row struct {
	Line  int
	Cells []string
}

// Table returns the report's first table of kind k, or nil.
func (r *Report) Table(k Kind) *Table {
	for _, t := range r.Tables {
		if t.Kind == k {
			return t
		}
	}
	return nil
}

// Latest returns the table of kind k from the last report that has one,
// and that report: reports are given oldest first, so a newer run's table
// replaces an older one's.
func Latest(reports []*Report, k Kind) (*Table, *Report) {
	for i := len(reports) - 1; i >= 0; i-- {
		if t := reports[i].Table(k); t != nil {
			return t, reports[i]
		}
	}
	return nil, nil
}

// maxLine is the longest line Parse reads.
const maxLine = 1 << 20

// Parse reads one report. name is used in errors and captions.
func Parse(r io.Reader, name string) (*Report, error) {
	rep := &Report{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var (
		kind    Kind
		heading string
		cur     *Table // table being read
		sepNext bool   // the line after a header must be |---|
		n       int
	)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur != nil && !strings.HasPrefix(line, "|") {
			if sepNext {
				return nil, fmt.Errorf("%s:%d: table header on line %d is not followed by a |---| row", name, n, n-1)
			}
			cur = nil
		}
		switch {
		case strings.HasPrefix(line, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
			kind = Unknown
			for _, h := range headingKinds {
				if strings.HasPrefix(heading, h.prefix) {
					kind = h.kind
				}
			}
		case strings.HasPrefix(line, "BenchmarkReport:") && rep.Preamble == "":
			rep.Preamble = line
		case strings.HasPrefix(line, "Machine:") && rep.Machine == "":
			rep.Machine = strings.TrimSpace(strings.TrimPrefix(line, "Machine:"))
		case strings.HasPrefix(line, cpuIntro) && kind == OneToAll:
			kind = OneToAllCPU
		case strings.HasPrefix(line, "|"):
			cells, err := splitRow(line)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, n, err)
			}
			switch {
			case cur == nil:
				cur = &Table{Kind: kind, Heading: heading, Columns: cells, src: name}
				rep.Tables = append(rep.Tables, cur)
				sepNext = true
			case sepNext:
				for _, c := range cells {
					if strings.Trim(c, "-: ") != "" {
						return nil, fmt.Errorf("%s:%d: table header on line %d is followed by %q, want a |---| row", name, n, n-1, line)
					}
				}
				sepNext = false
			default:
				if len(cells) != len(cur.Columns) {
					return nil, fmt.Errorf("%s:%d: table row has %d cells, its header has %d", name, n, len(cells), len(cur.Columns))
				}
				cur.Rows = append(cur.Rows, Row{Line: n, Cells: cells})
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes; is it a BenchmarkReport report?", name, n+1, maxLine)
		}
		return nil, fmt.Errorf("%s:%d: %w", name, n, err)
	}
	if sepNext {
		return nil, fmt.Errorf("%s:%d: table header is the last line, want a |---| row after it", name, n)
	}
	return rep, nil
}

// splitRow splits "| a | b |" into its trimmed cells.
func splitRow(line string) ([]string, error) {
	if !strings.HasSuffix(line, "|") || len(line) < 2 {
		return nil, fmt.Errorf("table row %q does not end with |", line)
	}
	parts := strings.Split(line[1:len(line)-1], "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

// Col returns the index of the column named name, or -1.
func (t *Table) Col(name string) int {
	for i, c := range t.Columns {
		if c == name {
			return i
		}
	}
	return -1
}

// Value is a number read from a cell: the median and the range over
// repetitions (Lo == Hi == Median when the cell gives no range), in the
// cell's unit with its multiplier applied ("1.45 M" is 1.45e6).
type Value struct {
	Median, Lo, Hi float64
}

// Num reads the number in column col of row i. ok is false, with no
// error, for a cell that holds no number ("–", empty: nothing measured)
// and for a column the table does not have.
func (t *Table) Num(i int, col string) (v Value, ok bool, err error) {
	c := t.Col(col)
	if c < 0 {
		return Value{}, false, nil
	}
	row := t.Rows[i]
	v, ok, err = ParseCell(row.Cells[c])
	if err != nil {
		return Value{}, false, fmt.Errorf("%s:%d: column %q: %v", t.src, row.Line, col, err)
	}
	return v, ok, nil
}

// units are the suffixes a report's numbers carry, and what they multiply
// by.
var units = []struct {
	suffix string
	scale  float64
}{
	{" M", 1e6}, {"M", 1e6}, {" k", 1e3}, {"k", 1e3},
	{"%", 1}, {"×", 1}, {"ms", 1}, {"µs", 1}, {"us", 1},
}

// ParseCell reads a cell as BenchmarkReport writes numbers: "303",
// "303 (248–311)", "1.45 M (1.43–1.47)", "84%", "0.16×", "4.5ms".
// "–", "-" and "" hold no number (ok false).
func ParseCell(s string) (v Value, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "–" || s == "-" {
		return Value{}, false, nil
	}
	med, rng, hasRange := strings.Cut(s, "(")
	scale := 1.0
	med = strings.TrimSpace(med)
	for _, u := range units {
		if strings.HasSuffix(med, u.suffix) {
			med, scale = strings.TrimSpace(strings.TrimSuffix(med, u.suffix)), u.scale
			break
		}
	}
	m, err := strconv.ParseFloat(med, 64)
	if err != nil || !finite(m*scale) {
		return Value{}, false, fmt.Errorf("cannot read %q as a number", s)
	}
	v = Value{Median: m * scale, Lo: m * scale, Hi: m * scale}
	if !hasRange {
		return v, true, nil
	}
	rng, closed := strings.CutSuffix(strings.TrimSpace(rng), ")")
	lo, hi, dash := strings.Cut(rng, "–")
	if !dash {
		lo, hi, dash = strings.Cut(rng, "-")
	}
	if !closed || !dash {
		return Value{}, false, fmt.Errorf("cannot read %q: want a range like (1.2–3.4) after the median", s)
	}
	l, err1 := strconv.ParseFloat(strings.TrimSpace(lo), 64)
	h, err2 := strconv.ParseFloat(strings.TrimSpace(hi), 64)
	if err1 != nil || err2 != nil || !finite(l*scale) || !finite(h*scale) || l > h {
		return Value{}, false, fmt.Errorf("cannot read the range of %q: want (low–high), finite numbers, low ≤ high", s)
	}
	v.Lo, v.Hi = l*scale, h*scale
	return v, true, nil
}

// finite reports whether v is a number a plot can place: not NaN, not
// infinite ("NaN" and "Inf" parse as floats; "1e308 M" overflows).
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
