package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The dashboard and alert files live in deploy/ (checked there against
// a scrape); these tests run the dashboard's queries on a real Prometheus
// server scraping a real shield.

const (
	dashboardFile   = "deploy/grafana/shield-dashboard.json"
	promScrapeEvery = "1s"
	promWait        = 45 * time.Second // first scrapes, then enough samples for rate()
)

// dashboardTargets returns the dashboard's PromQL by panel title.
func dashboardTargets(t *testing.T) map[string][]string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Panels []dashPanel }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// dashPanel is the part of a Grafana panel these tests read; a collapsed
// row holds its panels in Panels.
type dashPanel struct {
	Title   string
	Targets []struct{ Expr string }
	Panels  []dashPanel
}

// grafanaVariable matches $name, ${name...} and [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]`)

// asPromQL expands Grafana variables as the dashboard would with "All"
// selected: interval variables become rateWindow, the rest match all.
func asPromQL(expr, rateWindow string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.Contains(v, "__") && (strings.Contains(v, "interval") || strings.Contains(v, "range")) {
			return rateWindow
		}
		return ".*"
	})
}

func TestAsPromQL(t *testing.T) {
	tests := []struct{ in, want string }{
		{`sum(rate(x{instance=~"$instance",route=~"$route"}[$__rate_interval]))`, `sum(rate(x{instance=~".*",route=~".*"}[10s]))`},
		{`increase(x{a=~"${a:regex}"}[${__range}])`, `increase(x{a=~".*"}[10s])`},
		{`x > 0.5`, `x > 0.5`},
	}
	for _, tt := range tests {
		if got := asPromQL(tt.in, "10s"); got != tt.want {
			t.Errorf("asPromQL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// promServer is a Prometheus server started for one test.
type promServer struct {
	addr   string
	client *http.Client
}

// startPrometheus runs /usr/bin/prometheus (from the Debian package
// prometheus) scraping the admin listeners in targets every second.
func startPrometheus(t *testing.T, targets ...string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not installed (apt-get install prometheus; .ci/run does): %v", err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = strconv.Quote(a)
	}
	cfg := fmt.Sprintf(`global: { scrape_interval: %s, evaluation_interval: %s }
scrape_configs:
  - job_name: shield
    static_configs:
      - targets: [%s]
`, promScrapeEvery, promScrapeEvery, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ps := &promServer{addr: freeAddr(t), client: newClient()}
	t.Cleanup(ps.client.CloseIdleConnections)
	p := startProcess(t, "prometheus", bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+ps.addr,
	)
	p.waitReady(t, "http://"+ps.addr+"/-/ready")
	return ps
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query. A Prometheus error (bad PromQL, for
// instance) is returned, as is a non-vector result.
func (ps *promServer) query(q string) ([]promSample, error) {
	r, err := doHTTP(ps.client, http.MethodGet, "http://"+ps.addr+"/api/v1/query?query="+url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var body struct {
		Status, Error, ErrorType string
		Data                     struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any // [unix time, "value"]
			}
		}
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		return nil, fmt.Errorf("query %q: %d %q: %w", q, r.status, r.body, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", q, body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %q, want vector", q, body.Data.ResultType)
	}
	out := make([]promSample, 0, len(body.Data.Result))
	for _, s := range body.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", q, s.Value, err)
		}
		out = append(out, promSample{Metric: s.Metric, Value: v})
	}
	return out, nil
}

// TestPrometheusHitRatio: a real Prometheus scraping a real shield
// computes the dashboard's hit ratio after misses then hits, and it lies
// in (0, 1]; every other dashboard query runs without a PromQL error.
func TestPrometheusHitRatio(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ps := startPrometheus(t, e.cfg.Admin)
	panels := dashboardTargets(t)
	hitRatio := panels["Hit ratio"]
	if len(hitRatio) == 0 {
		t.Fatalf("the dashboard has no %q panel query", "Hit ratio")
	}
	const window = "10s" // $__rate_interval for a 1s scrape: several samples
	q := asPromQL(hitRatio[0], window)

	// Misses only after the first scrape, so the window sees them.
	eventually(t, "Prometheus to scrape shield", func() bool {
		up, err := ps.query(`up{job="shield"} == 1`)
		return err == nil && len(up) == 1
	})
	const paths = 20
	for i := range paths {
		wantForwarded(t, "first GET", e.get(fmt.Sprintf("/prom/%d", i)))
	}
	var (
		ratio   float64
		last    []promSample
		lastErr error
		hits    int
	)
	deadline := time.Now().Add(promWait)
	for {
		for i := range paths {
			wantHit(t, "repeat GET", e.get(fmt.Sprintf("/prom/%d", i)))
			hits++
		}
		last, lastErr = ps.query(q)
		if lastErr == nil && len(last) == 1 && last[0].Value > 0 {
			ratio = last[0].Value
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hit ratio not > 0 after %v: last answer %+v, error %v\nquery: %s", promWait, last, lastErr, q)
		}
		time.Sleep(100 * time.Millisecond) // pace the hits across scrapes
	}
	if !(ratio > 0 && ratio <= 1) {
		t.Errorf("hit ratio %v, want in (0, 1]\nquery: %s", ratio, q)
	}
	t.Logf("hit ratio %.3f after %d misses and %d hits (%s windows, %s scrapes)", ratio, paths, hits, window, promScrapeEvery)

	misses, err := ps.query(`sum by (instance) (shield_requests_total{cache="miss"})`)
	if err != nil || len(misses) != 1 || misses[0].Value != paths || misses[0].Metric["instance"] != e.cfg.Admin {
		t.Errorf("misses in Prometheus: %+v (%v), want one series = %d for instance %s", misses, err, paths, e.cfg.Admin)
	}
	for title, exprs := range panels {
		for i, expr := range exprs {
			if _, err := ps.query(asPromQL(expr, window)); err != nil {
				t.Errorf("panel %q query %d: %v", title, i, err)
			}
		}
	}
}
