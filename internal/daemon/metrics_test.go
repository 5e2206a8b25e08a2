package daemon

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/testnet/rtnet"
)

// The metrics are valid Prometheus text format: every sample has a TYPE
// line before it, and is `name{labels} value`.
func TestMetricsFormat(t *testing.T) {
	r := rtnet.New(t, 9)
	ds := startGroup(t, r, 2, nil, nil)
	ds[0].self(t)
	ds[1].self(t)
	rec := httptest.NewRecorder()
	ds[0].d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q", ct)
	}
	sample := regexp.MustCompile(`^([a-z_0-9]+)\{group="7"(,member="[0-9]+")?\} -?[0-9.e+-]+$`)
	typed := map[string]bool{}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(name)
			if len(f) != 2 || f[1] != "counter" && f[1] != "gauge" {
				t.Fatalf("bad TYPE line %q", line)
			}
			typed[f[0]] = true
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("bad sample line %q", line)
		}
		if !typed[m[1]] {
			t.Fatalf("sample %q before its TYPE line", line)
		}
		n++
	}
	for _, want := range []string{`rbcastd_ready{group="7"} 1`, `rbcastd_member_state{group="7",member="1"} 2`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n < 20 {
		t.Fatalf("only %d samples", n)
	}
}
