package benchplot

import (
	"fmt"
	"image/color"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// column names as BenchmarkReport writes them.
const (
	colRx    = "rx"
	colN     = "N"
	colMTU   = "MTU"
	colLoss  = "loss"
	colRaw   = "raw ring"
	colStage = "raw staged"
	colTCP   = "TCP fan-out"
)

// series names a column and the legend entry it is drawn as.
type series struct{ col, label string }

// oneToAllSeries are the systems of the one-to-all table.
var oneToAllSeries = []series{
	{"PBP2", "PBP2"},
	{"PBP2 Deliver", "PBP2 Deliver"},
	{"PBP1", "PBP1"},
	{colTCP, "TCP"},
}

func newLine(s series) *line { return &line{label: s.label, style: styles[s.label]} }

// key reads a row's key column (rx, MTU, loss), which must hold a number.
func (t *Table) key(i int, col string) (float64, error) {
	v, ok, err := t.Num(i, col)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%s:%d: column %q is empty, want a number", t.src, t.Rows[i].Line, col)
	}
	return v.Median, nil
}

// keys returns the distinct values of a key column, sorted; a table
// without the column has the one value def (an MTU named in the heading).
func (t *Table) keys(col string, def float64) ([]float64, error) {
	if t.Col(col) < 0 {
		return []float64{def}, nil
	}
	var ks []float64
	for i := range t.Rows {
		k, err := t.key(i, col)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks, nil
}

// where returns the rows whose key columns hold the given values; a
// condition on a column the table lacks holds when the value is its def.
func (t *Table) where(conds ...cond) ([]int, error) {
	var rows []int
next:
	for i := range t.Rows {
		for _, c := range conds {
			if t.Col(c.col) < 0 {
				continue
			}
			k, err := t.key(i, c.col)
			if err != nil {
				return nil, err
			}
			if k != c.val {
				continue next
			}
		}
		rows = append(rows, i)
	}
	return rows, nil
}

type cond struct {
	col string
	val float64
}

var mtuInHeading = regexp.MustCompile(`MTU (\d+)`)

// headingMTU is the MTU a table without an MTU column names in its
// heading ("..., MTU 1500 (...)"), or 1500.
func (t *Table) headingMTU() float64 {
	if m := mtuInHeading.FindStringSubmatch(t.Heading); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	return 1500
}

// need fails unless the table has every named column.
func (t *Table) need(cols ...string) error {
	for _, c := range cols {
		if t.Col(c) < 0 {
			return fmt.Errorf("%s: the %s table (%q) has no column %q", t.src, t.Kind, t.Heading, c)
		}
	}
	return nil
}

// fill adds to each line the value of its column in rows, at x = the
// row's xCol.
func (t *Table) fill(rows []int, xCol string, lines []*line, cols []string) error {
	for _, i := range rows {
		x, err := t.key(i, xCol)
		if err != nil {
			return err
		}
		for j, l := range lines {
			v, ok, err := t.Num(i, cols[j])
			if err != nil {
				return err
			}
			if ok {
				l.add(x, v)
			}
		}
	}
	return nil
}

// ceiling adds the raw ceiling of each row to l: the higher median of
// raw ring and raw staged (BenchmarkReport's ceiling), with its range.
func (t *Table) ceiling(rows []int, xCol string, l *line) error {
	for _, i := range rows {
		x, err := t.key(i, xCol)
		if err != nil {
			return err
		}
		best, found := Value{}, false
		for _, c := range []string{colRaw, colStage} {
			v, ok, err := t.Num(i, c)
			if err != nil {
				return err
			}
			if ok && (!found || v.Median > best.Median) {
				best, found = v, true
			}
		}
		if found {
			l.add(x, best)
		}
	}
	return nil
}

// oneToAllLines are the one-to-all table's series over rows, x from xCol.
func (t *Table) oneToAllLines(rows []int, xCol string) ([]*line, error) {
	raw := &line{label: "raw ceiling", style: styles["raw ceiling"]}
	if err := t.ceiling(rows, xCol, raw); err != nil {
		return nil, err
	}
	lines := []*line{raw}
	var cols []string
	for _, s := range oneToAllSeries {
		if t.Col(s.col) >= 0 {
			lines, cols = append(lines, newLine(s)), append(cols, s.col)
		}
	}
	return lines, t.fill(rows, xCol, lines[1:], cols)
}

func mtuTitle(mtu float64) string { return fmt.Sprintf("MTU %g", mtu) }

// mtuRow draws one row of panels, one per MTU: each panel's rows are the
// table's rows at that MTU and at other, its lines are lines(rows), and
// its title is title(mtu) with the rest of opts.
func mtuRow(f *Figure, t *Table, other cond, opts panelOpts, title func(mtu float64) string, lines func(rows []int) ([]*line, error)) error {
	mtus, err := t.keys(colMTU, t.headingMTU())
	if err != nil {
		return err
	}
	var row []*plot.Plot
	for _, mtu := range mtus {
		rows, err := t.where(cond{colMTU, mtu}, other)
		if err != nil {
			return err
		}
		ls, err := lines(rows)
		if err != nil {
			return err
		}
		o := opts
		o.title = title(mtu)
		p, err := panel(o, ls)
		if err != nil {
			return err
		}
		f.addLegend(ls)
		row = append(row, p)
	}
	f.panels = [][]*plot.Plot{row}
	return nil
}

func losslessTitle(mtu float64) string { return mtuTitle(mtu) + ", lossless" }

// oneToAll: lossless goodput against receivers, one panel per MTU.
func oneToAll(f *Figure, t *Table) error {
	if err := t.need(colRx, colLoss, colRaw); err != nil {
		return err
	}
	f.Caption = "One sender, largest messages, no loss: MB/s at the slowest receiver against receivers (log scale)"
	return mtuRow(f, t, cond{colLoss, 0}, panelOpts{xLabel: "receivers", yLabel: "MB/s", logY: true}, losslessTitle,
		func(rows []int) ([]*line, error) { return t.oneToAllLines(rows, colRx) })
}

// oneToAllLoss: goodput against loss at the most receivers, per MTU.
func oneToAllLoss(f *Figure, t *Table) error {
	if err := t.need(colRx, colLoss, colRaw); err != nil {
		return err
	}
	rxs, err := t.keys(colRx, 0)
	if err != nil {
		return err
	}
	rx := rxs[len(rxs)-1]
	f.Caption = fmt.Sprintf("One sender to %g receivers, largest messages: MB/s at the slowest receiver against the loss on every receiver's inbound frames (log scale)", rx)
	title := func(mtu float64) string { return fmt.Sprintf("%s, %g receivers", mtuTitle(mtu), rx) }
	return mtuRow(f, t, cond{colRx, rx}, panelOpts{xLabel: "loss (%)", yLabel: "MB/s", logY: true}, title,
		func(rows []int) ([]*line, error) { return t.oneToAllLines(rows, colLoss) })
}

// oneToAllCPU: CPU-seconds per GB against receivers, lossless, per MTU.
func oneToAllCPU(f *Figure, t *Table) error {
	if err := t.need(colRx, colLoss); err != nil {
		return err
	}
	f.Caption = "CPU-seconds per GB delivered (all receivers together), one sender, largest messages, no loss (log scale)"
	ss := append([]series{{colRaw, "raw ring"}, {colStage, "raw staged"}}, oneToAllSeries...)
	return mtuRow(f, t, cond{colLoss, 0}, panelOpts{xLabel: "receivers", yLabel: "CPU-s per GB", logY: true}, losslessTitle,
		func(rows []int) ([]*line, error) {
			var lines []*line
			var cols []string
			for _, s := range ss {
				if t.Col(s.col) >= 0 {
					lines, cols = append(lines, newLine(s)), append(cols, s.col)
				}
			}
			return lines, t.fill(rows, colRx, lines, cols)
		})
}

// small: 64-byte messages/s against receivers; a row of panels per loss
// (none and the highest), a column per MTU.
func small(f *Figure, t *Table) error {
	if err := t.need(colRx, colLoss); err != nil {
		return err
	}
	f.Caption = "One sender, 64-byte messages: messages/s at the slowest receiver against receivers (log scale; TCP is its byte rate ÷ 64)"
	ss := []series{{"PBP2", "PBP2"}, {"PBP2 BundleDelay 100µs", "PBP2 bundling"}, {"PBP1", "PBP1"}, {"TCP fan-out (bytes ÷ 64)", "TCP"}}
	return mtuLossGrid(f, t, colRx, ss, panelOpts{xLabel: "receivers", yLabel: "messages/s", logY: true}, nil)
}

// mtuLossGrid draws a panel per MTU (columns) and per loss lossRows shows
// (rows), each with the series of ss the table has against xCol; then
// finish, if not nil, sees each panel and its lines (an error ends the
// figure).
func mtuLossGrid(f *Figure, t *Table, xCol string, ss []series, opts panelOpts, finish func(p *plot.Plot, lines []*line) error) error {
	mtus, err := t.keys(colMTU, t.headingMTU())
	if err != nil {
		return err
	}
	losses, err := t.keys(colLoss, 0)
	if err != nil {
		return err
	}
	for _, loss := range lossRows(losses) {
		var row []*plot.Plot
		for _, mtu := range mtus {
			rows, err := t.where(cond{colMTU, mtu}, cond{colLoss, loss})
			if err != nil {
				return err
			}
			var lines []*line
			var cols []string
			for _, s := range ss {
				if t.Col(s.col) >= 0 {
					lines, cols = append(lines, newLine(s)), append(cols, s.col)
				}
			}
			if err := t.fill(rows, xCol, lines, cols); err != nil {
				return err
			}
			o := opts
			o.title = fmt.Sprintf("%s, %s", mtuTitle(mtu), lossTitle(loss))
			p, err := panel(o, lines)
			if err != nil {
				return err
			}
			if finish != nil {
				if err := finish(p, lines); err != nil {
					return err
				}
			}
			f.addLegend(lines)
			row = append(row, p)
		}
		f.panels = append(f.panels, row)
	}
	return nil
}

// lossRows picks the losses a figure shows a row of panels for: none and
// the highest.
func lossRows(losses []float64) []float64 {
	if len(losses) < 2 {
		return losses
	}
	return []float64{losses[0], losses[len(losses)-1]}
}

func lossTitle(loss float64) string {
	if loss == 0 {
		return "lossless"
	}
	return fmt.Sprintf("%g %% loss", loss)
}

var windowCol = regexp.MustCompile(`^(PBP[12]) w=(\d+)$`)

// window: MB/s against the window, a panel per loss, PBP2 solid and PBP1
// dashed, a colour per receiver count.
func window(f *Figure, t *Table) error {
	if err := t.need(colRx, colLoss); err != nil {
		return err
	}
	f.Caption = fmt.Sprintf("Window size (thesis fig. 4.3), largest messages, %s: MB/s at the slowest receiver against the window (log scales)", mtuTitle(t.headingMTU()))
	rxs, err := t.keys(colRx, 0)
	if err != nil {
		return err
	}
	losses, err := t.keys(colLoss, 0)
	if err != nil {
		return err
	}
	type wcol struct {
		mode string
		w    float64
		col  string
	}
	var wcols []wcol
	for _, c := range t.Columns {
		if m := windowCol.FindStringSubmatch(c); m != nil {
			w, _ := strconv.ParseFloat(m[2], 64)
			wcols = append(wcols, wcol{m[1], w, c})
		}
	}
	if len(wcols) == 0 {
		return fmt.Errorf("%s: the window table (%q) has no column like \"PBP2 w=16\"", t.src, t.Heading)
	}
	var row []*plot.Plot
	for _, loss := range losses {
		var lines []*line
		for ri, rx := range rxs {
			rows, err := t.where(cond{colRx, rx}, cond{colLoss, loss})
			if err != nil {
				return err
			}
			for _, mode := range []string{"PBP2", "PBP1"} {
				st := style{color: rxColors[ri%len(rxColors)], glyph: draw.CircleGlyph{}}
				if mode == "PBP1" {
					st.dashes, st.glyph = dashed, draw.PyramidGlyph{}
				}
				l := &line{label: fmt.Sprintf("%s, %g rx", mode, rx), style: st}
				for _, i := range rows {
					for _, wc := range wcols {
						if wc.mode != mode {
							continue
						}
						v, ok, err := t.Num(i, wc.col)
						if err != nil {
							return err
						}
						if ok {
							l.add(wc.w, v)
						}
					}
				}
				if len(l.xs) > 0 {
					lines = append(lines, l)
				}
			}
		}
		p, err := panel(panelOpts{title: lossTitle(loss), xLabel: "window (frames)", yLabel: "MB/s", logX: true, logY: true}, lines)
		if err != nil {
			return err
		}
		f.addLegend(lines)
		row = append(row, p)
	}
	f.panels = [][]*plot.Plot{row}
	f.panelW = 3.4 * vg.Inch
	return nil
}

// allToAll: MB/s at the slowest member against members; a row per loss
// (none and the highest), a column per MTU.
func allToAll(f *Figure, t *Table) error {
	if err := t.need(colN, colLoss); err != nil {
		return err
	}
	f.Caption = "All-to-all, largest messages: MB/s received by the slowest member from all others against members (log scale; raw ring is the members' mean)"
	ss := []series{{colRaw, "raw ring"}, {"PBP2", "PBP2"}, {"PBP1", "PBP1"}, {"TCP mesh", "TCP"}}
	return mtuLossGrid(f, t, colN, ss, panelOpts{xLabel: "members", yLabel: "MB/s", logY: true}, nil)
}

// latency: p50 and p99 bars per system, with the range over repetitions.
func latency(f *Figure, t *Table) error {
	if err := t.need("system", "p50", "p99"); err != nil {
		return err
	}
	f.Caption = "One 64-byte message in flight between two hosts: one-way latency (half the round trip), p50 and p99"
	var names []string
	var p50, p99 []Value
	for i, r := range t.Rows {
		a, ok1, err := t.Num(i, "p50")
		if err != nil {
			return err
		}
		b, ok2, err := t.Num(i, "p99")
		if err != nil {
			return err
		}
		if !ok1 || !ok2 {
			continue
		}
		names = append(names, strings.TrimSuffix(r.Cells[t.Col("system")], " (64 B frame)"))
		p50, p99 = append(p50, a), append(p99, b)
	}
	p := plot.New()
	p.Title.Text = "lossless, MTU 1500"
	p.Y.Label.Text = "µs, one way"
	p.Add(plotter.NewGrid())
	w := vg.Points(22)
	for k, set := range []struct {
		label string
		vals  []Value
		color color.Color
	}{{"p50", p50, blue}, {"p99", p99, orange}} {
		var hs plotter.Values
		var xys plotter.XYs
		var errs plotter.YErrors
		for i, v := range set.vals {
			hs = append(hs, v.Median)
			xys = append(xys, plotter.XY{X: float64(i), Y: v.Median})
			errs = append(errs, struct{ Low, High float64 }{v.Median - v.Lo, v.Hi - v.Median})
		}
		bars, err := plotter.NewBarChart(hs, w)
		if err != nil {
			return err
		}
		bars.Color, bars.LineStyle.Width = set.color, 0
		bars.Offset = w * vg.Length(2*k-1) / 2
		eb, err := plotter.NewYErrorBars(errorBars{xys, errs})
		if err != nil {
			return err
		}
		eb.CapWidth = vg.Points(4)
		// The error bars sit on their bars: shift them by the bar offset.
		p.Add(bars, offsetErrorBars{eb, bars.Offset})
		f.legend.Add(set.label, bars)
		f.names = append(f.names, set.label)
	}
	f.hasLegends = true
	p.NominalX(names...)
	p.Y.Min = 0
	for _, v := range p99 {
		p.Y.Max = max(p.Y.Max, 1.1*v.Hi) // room above the highest error bar
	}
	f.panels = [][]*plot.Plot{{p}}
	f.panelW = 5.5 * vg.Inch
	return nil
}

// offsetErrorBars draws error bars shifted sideways by off, onto a bar
// chart's offset bars.
type offsetErrorBars struct {
	*plotter.YErrorBars
	off vg.Length
}

func (e offsetErrorBars) Plot(c draw.Canvas, p *plot.Plot) {
	c.Rectangle.Min.X += e.off
	c.Rectangle.Max.X += e.off
	e.YErrorBars.Plot(c, p)
}

// filesSeries are bench/files/run's tools, as its report names its
// columns.
var filesSeries = []series{
	{"rbcast", "rbcast"},
	{"rbcastmac", "rbcast, key"},
	{"rbcastenc", "rbcast, encrypted"},
	{"uftp", "uftp"},
	{"udpcast", "udpcast"},
	{"tcp", "TCP"},
}

// filesReceivers: IBRMP's fig. 5a, the time to send one file to every
// receiver against the receivers; a row per loss (none and the highest),
// a column per MTU.
func filesReceivers(f *Figure, t *Table) error {
	if err := t.need(colRx, colLoss); err != nil {
		return err
	}
	f.Caption = "One file to every member (IBRMP fig. 5a): seconds until every receiver holds it against receivers"
	return mtuLossGrid(f, t, colRx, filesSeries, panelOpts{xLabel: "receivers", yLabel: "seconds"}, func(p *plot.Plot, lines []*line) error {
		if len(lines) == 0 {
			return fmt.Errorf("%s: the files table (%q) has no tool's column; want one of rbcast, uftp, udpcast, tcp", t.src, t.Heading)
		}
		p.Y.Min = 0
		return nil
	})
}
