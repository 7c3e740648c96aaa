package deploy

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const alertsPath = "prometheus/alerts.yml"

// ruleFile is Prometheus's rule file format; unknown keys are refused so
// a misspelt "anotations" fails here rather than vanish.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// prometheusSeries are names Prometheus itself writes for every target.
var prometheusSeries = map[string]bool{"up": true}

func loadRules(t *testing.T) map[string]rule {
	t.Helper()
	b, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	rules := map[string]rule{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %q: a rule without alert: (recording rules belong elsewhere): %q", g.Name, r.Record)
				continue
			}
			if _, dup := rules[r.Alert]; dup {
				t.Errorf("alert %q defined twice", r.Alert)
			}
			rules[r.Alert] = r
		}
	}
	return rules
}

// TestAlertRules: the alerts operators were promised exist, select what
// they say, and each carries a severity, a summary, a description and a
// runbook.
func TestAlertRules(t *testing.T) {
	rules := loadRules(t)
	tests := []struct {
		alert    string
		exprHas  []string
		for_     string
		severity []string
	}{
		{"OriginBreakerOpen", []string{"shield_breaker_state", "== 2"}, "1m", []string{"warning", "critical"}},
		{"HitRatioDrop", []string{`shield_requests_total{cache="hit"}`}, "", []string{"warning"}},
		{"ConsulUnreachable", []string{"shield_consul_reachable == 0"}, "2m", []string{"warning", "critical"}},
		{"PurgeSyncStuck", []string{"shield_purge_sync_pending > 0"}, "2m", []string{"warning", "critical"}},
		{"CacheNearFull", []string{"shield_cache_bytes / shield_cache_max_bytes > 0.95"}, "", []string{"info", "warning"}},
		{"CacheDiskDegraded", []string{"shield_cache_disk_degraded"}, "10m", []string{"warning"}},
		{"Shield5xxRate", []string{`shield_requests_total{cache="error"}`}, "", []string{"warning", "critical"}},
	}
	for _, tt := range tests {
		t.Run(tt.alert, func(t *testing.T) {
			r, ok := rules[tt.alert]
			if !ok {
				t.Fatalf("no alert %q in %s", tt.alert, alertsPath)
			}
			for _, s := range tt.exprHas {
				if !strings.Contains(r.Expr, s) {
					t.Errorf("expr %q lacks %q", r.Expr, s)
				}
			}
			if tt.for_ != "" && r.For != tt.for_ {
				t.Errorf("for: %q, want %q", r.For, tt.for_)
			}
			if !slices.Contains(tt.severity, r.Labels["severity"]) {
				t.Errorf("severity %q, want one of %q", r.Labels["severity"], tt.severity)
			}
		})
	}
	for name, r := range rules {
		for _, a := range []string{"summary", "description", "runbook"} {
			if len(strings.TrimSpace(r.Annotations[a])) < 20 {
				t.Errorf("alert %q: annotation %q is missing or too short to help: %q", name, a, r.Annotations[a])
			}
		}
		if r.Labels["severity"] == "" {
			t.Errorf("alert %q has no severity label", name)
		}
	}
}

// TestAlertMetricsExported: every metric an alert selects is exported by a
// real shield (or written by Prometheus itself, like up).
func TestAlertMetricsExported(t *testing.T) {
	rules := loadRules(t)
	ex := parseExposition(realScrape(t))
	for name, r := range rules {
		names := metricNames(r.Expr)
		if len(names) == 0 {
			t.Errorf("alert %q names no metric: %s", name, r.Expr)
		}
		for _, n := range names {
			if prometheusSeries[n] {
				continue
			}
			if why := ex.check(n); why != "" {
				t.Errorf("alert %q: %s %s", name, n, why)
			}
		}
	}
}
