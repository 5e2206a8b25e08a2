package main

import (
	"bytes"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// wantMetric is a sample a scrape must have: its name, labels besides
// group, and value (-1: any).
type wantMetric struct {
	name   string
	labels map[string]string
	value  float64
}

// checkMetrics parses a /metrics body and checks that it has each
// sample wanted, of group.
func checkMetrics(t *testing.T, body []byte, want []wantMetric, group string) {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, body)
	}
	for _, w := range want {
		labels := map[string]string{"group": group}
		for k, v := range w.labels {
			labels[k] = v
		}
		v, ok := metricValue(fams[w.name], labels)
		if !ok || w.value >= 0 && v != w.value {
			t.Errorf("metrics: %s%v = %v (present: %v), want %v\n%s", w.name, labels, v, ok, w.value, body)
		}
	}
}

// metricValue is the value of f's sample with labels (a counter's or a
// gauge's).
func metricValue(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}
