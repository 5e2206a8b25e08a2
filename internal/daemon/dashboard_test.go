package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rbcast/rbcast/testnet/rtnet"
)

const dashboardPath = "../../dist/grafana-rbcastd.json"

// exposed is what a scrape of rbcastd can show: each series name (a
// histogram's _bucket, _sum and _count) with the labels it may carry.
type exposed map[string][]string

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"instance", "job"}

// exposedBy lists what x's metrics handler serves, and the metrics its
// collector describes (the pair counters and events appear only once they
// count something).
func exposedBy(t *testing.T, x *running) exposed {
	t.Helper()
	e := exposed{}
	add := func(name string, labels ...string) {
		e[name] = append(append(e[name], labels...), targetLabels...)
	}
	for name, f := range scrape(t, x) {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			add(name+"_bucket", append(labels, "le")...)
			add(name+"_sum", labels...)
			add(name+"_count", labels...)
			continue
		case dto.MetricType_SUMMARY:
			add(name+"_sum", labels...)
			add(name+"_count", labels...)
			labels = append(labels, "quantile")
		}
		add(name, labels...)
	}
	descs := make(chan *prometheus.Desc, 100)
	(&collector{d: x.d}).Describe(descs)
	close(descs)
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for d := range descs {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		if _, ok := e[m[1]]; ok || strings.HasSuffix(m[1], "_seconds") {
			continue // histograms are in the scrape
		}
		add(m[1], append(strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' }), "group")...)
	}
	return e
}

var (
	metricRE  = regexp.MustCompile(`\b((?:rbcastd|go|process)_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcherRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	byRE      = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// checkExpr checks that a PromQL expression uses only series and labels
// rbcastd exposes: every rbcastd_, go_ and process_ name, every label of
// a matcher on it, and every label of a by (...) clause on one of the
// series the expression names.
func checkExpr(e exposed, expr string) []error {
	var errs []error
	var labelsUsed []string
	for _, m := range metricRE.FindAllStringSubmatch(expr, -1) {
		labels, ok := e[m[1]]
		if !ok {
			errs = append(errs, fmt.Errorf("%q: rbcastd exposes no metric %s", expr, m[1]))
			continue
		}
		labelsUsed = append(labelsUsed, labels...)
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(labels, lm[1]) {
				errs = append(errs, fmt.Errorf("%q: %s has no label %s", expr, m[1], lm[1]))
			}
		}
	}
	for _, by := range byRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(by[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(labelsUsed, l) {
				errs = append(errs, fmt.Errorf("%q: no series of the expression has the label %s", expr, l))
			}
		}
	}
	return errs
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// checkDashboard parses a dashboard and checks every query in it.
func checkDashboard(e exposed, b []byte) []error {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return []error{fmt.Errorf("the dashboard is not JSON: %w", err)}
	}
	var errs []error
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		errs = append(errs, fmt.Errorf("the dashboard lacks a title, a uid or panels"))
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			errs = append(errs, fmt.Errorf("panel id %d is used twice", p.ID))
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			errs = append(errs, fmt.Errorf("panel %q has no query or no place (%+v)", p.Title, p.GridPos))
		}
		for _, t := range p.Targets {
			errs = append(errs, checkExpr(e, t.Expr)...)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			errs = append(errs, checkExpr(e, fmt.Sprint(q["query"]))...)
		}
	}
	for _, a := range d.Annotations.List {
		errs = append(errs, checkExpr(e, a.Expr)...)
	}
	return errs
}

// dist/grafana-rbcastd.json parses, and every query in it names only
// metrics and labels a running rbcastd exposes; the check catches a
// misspelt metric, a label the metric lacks and a by () on a missing
// label.
func TestGrafanaDashboard(t *testing.T) {
	ds := startGroup(t, rtnet.New(t, 11), 2, nil, nil)
	ds[0].self(t)
	ds[1].self(t)
	e := exposedBy(t, ds[0])
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkDashboard(e, b) {
		t.Error(err)
	}
	var d dashboard
	json.Unmarshal(b, &d)
	queries := 0
	for _, p := range d.Panels {
		queries += len(p.Targets)
	}
	if queries < 20 {
		t.Errorf("the dashboard has %d queries; it should show a group's health (members, traffic, repairs, drops, process)", queries)
	}
	// The membership at a glance: the view each daemon installed, its
	// members, and the changes.
	for _, name := range []string{"rbcastd_view", "rbcastd_view_members", "rbcastd_view_changes_total"} {
		shown := false
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				for _, m := range metricRE.FindAllStringSubmatch(q.Expr, -1) {
					shown = shown || m[1] == name
				}
			}
		}
		if !shown {
			t.Errorf("no panel of the dashboard shows %s", name)
		}
	}
	for _, bad := range []struct{ expr, says string }{
		{`rate(rbcastd_delivered_mesages_total[5m])`, "no metric rbcastd_delivered_mesages_total"},
		{`rbcastd_member_state{group="1", sender="2"}`, "has no label sender"},
		{`sum by (member) (rate(rbcastd_retransmissions_total[5m]))`, "no series of the expression has the label member"},
		{`histogram_quantile(0.5, rate(rbcastd_repair_latency_seconds[5m]))`, "no metric rbcastd_repair_latency_seconds"},
	} {
		errs := checkExpr(e, bad.expr)
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), bad.says) {
			t.Errorf("%s: %v, want an error saying %q", bad.expr, errs, bad.says)
		}
	}
	if errs := checkDashboard(e, []byte(`{"title": "x", "panels": [`)); len(errs) != 1 || !strings.Contains(errs[0].Error(), "not JSON") {
		t.Errorf("a truncated dashboard: %v", errs)
	}
}
