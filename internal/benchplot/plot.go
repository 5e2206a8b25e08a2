package benchplot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // registers png
	_ "gonum.org/v1/plot/vg/vgsvg" // registers svg
)

// Figure is one image: a grid of panels that share a legend, drawn from
// one table of one report.
type Figure struct {
	Name    string // file name without extension
	Caption string // what it shows, and from which report
	Kind    Kind
	Source  *Report

	panels     [][]*plot.Plot // rows of panels
	legend     plot.Legend
	panelW     vg.Length
	panelH     vg.Length
	legendW    vg.Length
	hasLegends bool
	names      []string // the legend's entries
}

// Formats are the image formats Figure.Write can produce.
var Formats = []string{"svg", "png"}

// builders make the figures, in the order Figures returns them.
var builders = []struct {
	name string
	kind Kind
	make func(f *Figure, t *Table) error
}{
	{"one-to-all", OneToAll, oneToAll},
	{"one-to-all-loss", OneToAll, oneToAllLoss},
	{"one-to-all-cpu", OneToAllCPU, oneToAllCPU},
	{"small-messages", Small, small},
	{"window", Window, window},
	{"all-to-all", AllToAll, allToAll},
	{"latency", Latency, latency},
	{"files-receivers", Files, filesReceivers},
}

// Figures draws every figure whose table one of the reports has, each
// from the latest report that has it (reports are given oldest first).
// missing names the kinds no report had.
func Figures(reports []*Report) (figs []*Figure, missing []Kind, err error) {
	for _, b := range builders {
		t, rep := Latest(reports, b.kind)
		if t == nil {
			if !slices.Contains(missing, b.kind) {
				missing = append(missing, b.kind)
			}
			continue
		}
		f := &Figure{Name: b.name, Kind: b.kind, Source: rep, legend: plot.NewLegend(), panelW: 4.2 * vg.Inch, panelH: 3.2 * vg.Inch, legendW: 1.9 * vg.Inch}
		if err := b.make(f, t); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", b.name, err)
		}
		if !slices.ContainsFunc(f.panels, func(r []*plot.Plot) bool { return len(r) > 0 }) {
			// A table with a header and no rows: a figure of no panels
			// is an image of no size, which the canvas refuses by
			// panicking.
			return nil, nil, fmt.Errorf("%s: %s: the %v table (%q) has no rows to draw", b.name, t.src, b.kind, t.Heading)
		}
		f.Caption = fmt.Sprintf("%s (%s)", f.Caption, runLabel(rep.Name))
		figs = append(figs, f)
	}
	return figs, missing, nil
}

// WriteAll draws every figure the reports allow into dir, as NAME.format,
// and returns the files written.
func WriteAll(reports []*Report, dir, format string) (files []string, missing []Kind, err error) {
	figs, missing, err := Figures(reports)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range figs {
		p := filepath.Join(dir, f.Name+"."+format)
		out, err := os.Create(p)
		if err != nil {
			return nil, nil, err
		}
		err = f.Write(out, format)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p, err)
		}
		files = append(files, p)
	}
	return files, missing, nil
}

// Write draws the figure in format (svg or png).
func (f *Figure) Write(w io.Writer, format string) error {
	if !slices.Contains(Formats, format) {
		return fmt.Errorf("image format %q: want one of %s", format, strings.Join(Formats, ", "))
	}
	rows, cols := len(f.panels), 0
	for _, r := range f.panels {
		cols = max(cols, len(r))
	}
	legendW := vg.Length(0)
	if f.hasLegends {
		legendW = f.legendW
	}
	footerH := 6 * vg.Millimeter
	width, height := f.panelW*vg.Length(cols)+legendW, f.panelH*vg.Length(rows)+footerH
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	// An opaque background: an SVG is transparent otherwise, and its black
	// text unreadable on a dark page.
	dc.FillPolygon(color.White, []vg.Point{{X: 0, Y: 0}, {X: width, Y: 0}, {X: width, Y: height}, {X: 0, Y: height}})
	// The footer names the report the figure was drawn from.
	foot := plot.New().Title.TextStyle
	foot.Font = font.From(plot.DefaultFont, 8)
	foot.Color = grey
	foot.XAlign, foot.YAlign = draw.XLeft, draw.YBottom
	dc.FillText(foot, vg.Point{X: 2 * vg.Millimeter, Y: 2 * vg.Millimeter}, f.footer())
	grid := draw.Crop(dc, 0, -legendW, footerH, 0)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(f.panels, tiles, grid)
	for i, r := range f.panels {
		for j, p := range r {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	if f.hasLegends {
		lc := draw.Crop(dc, width-legendW+vg.Millimeter*3, 0, 0, -vg.Millimeter*8)
		f.legend.Top, f.legend.Left = true, true
		f.legend.Draw(lc)
	}
	_, err = c.WriteTo(w)
	return err
}

// footer is the line under the panels: the report, and the machine when
// the report names it.
func (f *Figure) footer() string {
	s := "drawn by cmd/benchplot from " + f.Source.Name
	if f.Source.Machine != "" {
		s += "; machine: " + f.Source.Machine
	}
	return s
}

// runLabel turns a report's file name ("testdata/run-32.md") into a
// caption ("run 32").
func runLabel(name string) string {
	base := strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	return strings.ReplaceAll(base, "-", " ")
}

// style is how one system is drawn in every figure, so that a colour
// means the same thing throughout (Okabe–Ito colours, readable with
// colour-blindness).
type style struct {
	color  color.Color
	dashes []vg.Length
	glyph  draw.GlyphDrawer
}

var (
	black     = color.RGBA{0, 0, 0, 255}
	orange    = color.RGBA{230, 159, 0, 255}
	skyBlue   = color.RGBA{86, 180, 233, 255}
	green     = color.RGBA{0, 158, 115, 255}
	blue      = color.RGBA{0, 114, 178, 255}
	vermilion = color.RGBA{213, 94, 0, 255}
	purple    = color.RGBA{204, 121, 167, 255}
	grey      = color.RGBA{130, 130, 130, 255}
	dashed    = []vg.Length{vg.Points(5), vg.Points(3)}
	dotted    = []vg.Length{vg.Points(1.5), vg.Points(2)}
)

var styles = map[string]style{
	"raw ceiling":   {black, dotted, draw.SquareGlyph{}},
	"raw ring":      {black, dotted, draw.SquareGlyph{}},
	"raw staged":    {grey, dotted, draw.BoxGlyph{}},
	"PBP2":          {blue, nil, draw.CircleGlyph{}},
	"PBP2 Deliver":  {skyBlue, nil, draw.RingGlyph{}},
	"PBP2 bundling": {green, nil, draw.TriangleGlyph{}},
	"PBP1":          {orange, dashed, draw.PyramidGlyph{}},
	"TCP":           {vermilion, nil, draw.CrossGlyph{}},
	// bench/files/run's tools.
	"rbcast":            {blue, nil, draw.CircleGlyph{}},
	"rbcast, key":       {skyBlue, nil, draw.RingGlyph{}},
	"rbcast, encrypted": {green, nil, draw.TriangleGlyph{}},
	"uftp":              {orange, dashed, draw.PyramidGlyph{}},
	"udpcast":           {purple, dashed, draw.BoxGlyph{}},
}

// rxColors tell receiver counts apart in the window figure.
var rxColors = []color.Color{blue, orange, green, vermilion, purple, skyBlue, black}

// line is one series of a panel: a value (median and range) per x.
type line struct {
	label string
	style style
	xs    []float64
	vals  []Value
}

func (l *line) add(x float64, v Value) {
	l.xs, l.vals = append(l.xs, x), append(l.vals, v)
}

// panelOpts describe a panel's axes.
type panelOpts struct {
	title, xLabel, yLabel string
	logX, logY            bool
}

// addLegend adds each series to the figure's legend once.
func (f *Figure) addLegend(lines []*line) {
	for _, l := range lines {
		if slices.Contains(f.names, l.label) {
			continue
		}
		ls := draw.LineStyle{Color: l.style.color, Width: vg.Points(1.5), Dashes: l.style.dashes}
		gs := draw.GlyphStyle{Color: l.style.color, Radius: vg.Points(3), Shape: l.style.glyph}
		f.legend.Add(l.label, legendThumb{ls, gs})
		f.names = append(f.names, l.label)
		f.hasLegends = true
	}
}

// panel draws lines into one plot with error bars for the ranges. Points
// a log axis cannot show (zero) are left out.
func panel(o panelOpts, lines []*line) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = o.title
	p.X.Label.Text, p.Y.Label.Text = o.xLabel, o.yLabel
	p.Add(plotter.NewGrid())
	var ticks []float64
	for _, l := range lines {
		var xys plotter.XYs
		var errs plotter.YErrors
		for i, x := range l.xs {
			v := l.vals[i]
			if o.logY && v.Lo <= 0 || o.logX && x <= 0 {
				continue
			}
			xys = append(xys, plotter.XY{X: x, Y: v.Median})
			errs = append(errs, struct{ Low, High float64 }{v.Median - v.Lo, v.Hi - v.Median})
			if !slices.Contains(ticks, x) {
				ticks = append(ticks, x)
			}
		}
		if len(xys) == 0 {
			continue
		}
		ln, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("series %s: %w", l.label, err)
		}
		ln.Color, ln.Width, ln.Dashes = l.style.color, vg.Points(1.5), l.style.dashes
		sc.Color, sc.Shape, sc.Radius = l.style.color, l.style.glyph, vg.Points(3)
		eb, err := plotter.NewYErrorBars(errorBars{xys, errs})
		if err != nil {
			return nil, fmt.Errorf("series %s: %w", l.label, err)
		}
		eb.Color, eb.CapWidth = l.style.color, vg.Points(4)
		p.Add(ln, sc, eb)
	}
	slices.Sort(ticks)
	var marks plot.ConstantTicks
	for _, x := range ticks {
		marks = append(marks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)})
	}
	p.X.Tick.Marker = marks
	if o.logX {
		p.X.Scale = plot.LogScale{}
	}
	if o.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		// Both ends on a labelled tick (1, 2 or 5 × 10ⁿ).
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, l := range lines {
			for _, v := range l.vals {
				if v.Lo > 0 {
					lo, hi = min(lo, v.Lo), max(hi, v.Hi)
				}
			}
		}
		if lo <= hi {
			p.Y.Min, p.Y.Max = niceFloor(lo), niceCeil(hi)
		}
	} else {
		p.Y.Min = 0
	}
	// Room at both ends of x, so points and error bars are not cut.
	if len(ticks) > 0 {
		lo, hi := ticks[0], ticks[len(ticks)-1]
		if o.logX {
			p.X.Min, p.X.Max = lo/1.3, hi*1.3
		} else {
			pad := max((hi-lo)*0.06, 0.5)
			p.X.Min, p.X.Max = lo-pad, hi+pad
		}
	}
	return p, nil
}

type errorBars struct {
	plotter.XYs
	plotter.YErrors
}

// legendThumb draws a series' line and glyph in the legend.
type legendThumb struct {
	line  draw.LineStyle
	glyph draw.GlyphStyle
}

func (t legendThumb) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(t.line, c.Min.X, y, c.Max.X, y)
	c.DrawGlyph(t.glyph, c.Center())
}

// logTicks labels the powers of ten and 2× and 5× them, in plain numbers
// (1k, 2M): a log axis over two decades otherwise has only two labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi*10; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo/1.01 || v > hi*1.01 {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: short(v)})
		}
		for m := 1.0; m < 10; m++ {
			if v := m * math.Pow(10, e); v >= lo && v <= hi && m != 1 && m != 2 && m != 5 {
				ticks = append(ticks, plot.Tick{Value: v})
			}
		}
	}
	return ticks
}

// short writes 2000000 as 2M, 5000 as 5k, 0.5 as 0.5.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// niceFloor is the largest 1, 2 or 5 × 10ⁿ at or below v (v > 0).
func niceFloor(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{5, 2, 1} {
		if m*e <= v {
			return m * e
		}
	}
	return e
}

// niceCeil is the smallest 1, 2 or 5 × 10ⁿ at or above v (v > 0).
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}
