package e2e

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestMetrics: after one miss and one hit, /metrics counts one of each
// for the route.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantForwarded(t, "first GET", e.get("/metered"))
	wantHit(t, "second GET", e.get("/metered"))

	r, err := doHTTP(e.client, http.MethodGet, "http://"+e.cfg.Admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", r, err)
	}
	for _, cache := range []string{"hit", "miss"} {
		v, ok := sample(r.body, "shield_requests_total", map[string]string{"route": "demo", "cache": cache})
		if !ok || v != 1 {
			t.Errorf(`shield_requests_total{route="demo",cache=%q} = %v (found: %v), want 1`, cache, v, ok)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", r.body)
	}
}

// sample returns the value of the first series of metric whose labels
// include want, from Prometheus text exposition.
func sample(text []byte, metric string, want map[string]string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok || !hasLabels(labelText, want) {
			continue
		}
		fields := strings.Fields(value) // value [timestamp]
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		return v, err == nil
	}
	return 0, false
}

// hasLabels reports whether a label list such as route="demo",cache="hit"
// contains every pair of want. Test label values hold no commas or quotes.
func hasLabels(list string, want map[string]string) bool {
	got := map[string]string{}
	for pair := range strings.SplitSeq(list, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
		got[name] = strings.Trim(value, `"`)
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestSample(t *testing.T) {
	text := []byte(`# HELP shield_requests_total requests
shield_requests_total{cache="miss",route="demo"} 3
shield_requests_total{route="other",cache="hit"} 7
shield_requests_total{route="demo",cache="hit"} 2 1700000000
shield_requests_total_x{route="demo",cache="bypass"} 9
`)
	tests := []struct {
		labels map[string]string
		want   float64
		found  bool
	}{
		{map[string]string{"route": "demo", "cache": "miss"}, 3, true},
		{map[string]string{"route": "demo", "cache": "hit"}, 2, true},
		{map[string]string{"route": "other"}, 7, true},
		{map[string]string{"route": "demo", "cache": "bypass"}, 0, false},
	}
	for _, tt := range tests {
		got, found := sample(text, "shield_requests_total", tt.labels)
		if got != tt.want || found != tt.found {
			t.Errorf("sample(%v) = %v, %v; want %v, %v", tt.labels, got, found, tt.want, tt.found)
		}
	}
}
