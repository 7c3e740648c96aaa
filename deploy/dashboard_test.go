package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const dashboardPath = "grafana/shield-dashboard.json"

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	Expr  string `json:"expr"`
	RefID string `json:"refId"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."} since Grafana 9
	Datasource *datasource     `json:"datasource"`
}

// queryText returns a variable's query whichever form it takes.
func (v variable) queryText() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardPath, err)
	}
	return d
}

// graphPanels returns every panel that queries, rows flattened.
func (d dashboard) graphPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// expressions lists every PromQL text of the dashboard with where it is.
func (d dashboard) expressions() (where, exprs []string) {
	for _, p := range d.graphPanels() {
		for _, tg := range p.Targets {
			where = append(where, fmt.Sprintf("panel %q target %s", p.Title, tg.RefID))
			exprs = append(exprs, tg.Expr)
		}
	}
	return where, exprs
}

func TestDashboardModel(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both must be set (the uid keeps links stable across imports)", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d, want 36..41 (Grafana 9.x-11.x)", d.SchemaVersion)
	}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or already used by %q", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos x=%d w=%d does not fit 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}

func TestDashboardVariables(t *testing.T) {
	d := loadDashboard(t)
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	tests := []struct {
		name, typ, query string // query: a substring it must hold
	}{
		{"datasource", "datasource", "prometheus"},
		{"instance", "query", "instance"},
		{"route", "query", "route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := vars[tt.name]
			if !ok {
				t.Fatalf("no template variable %q", tt.name)
			}
			if v.Type != tt.typ || !strings.Contains(v.queryText(), tt.query) {
				t.Errorf("variable %q: type %q query %q, want type %q with %q", tt.name, v.Type, v.queryText(), tt.typ, tt.query)
			}
			if tt.typ == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
				t.Errorf("variable %q: datasource %+v, want uid ${datasource}", tt.name, v.Datasource)
			}
		})
	}
}

// TestDashboardPanels: the panels operators rely on exist and query what
// their title promises; every panel uses the datasource variable and
// filters by $instance.
func TestDashboardPanels(t *testing.T) {
	d := loadDashboard(t)
	byTitle := map[string]panel{}
	for _, p := range d.graphPanels() {
		byTitle[p.Title] = p
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q target %s does not filter by $instance: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	tests := []struct {
		title string
		want  []string // regexps every one of which some target must match
	}{
		{"Hit ratio", []string{`shield_requests_total\{[^}]*cache="hit"[^}]*\}[\s\S]*/[\s\S]*shield_requests_total`}},
		{"Origin fetch rate vs client request rate", []string{`rate\(shield_origin_fetches_total`, `rate\(shield_requests_total`}},
		{"Stale served by reason", []string{`by \(reason\) \(rate\(shield_stale_served_total`}},
		{"Coalesced waiters", []string{`rate\(shield_coalesced_waiters_total`}},
		{"429s by tenant", []string{`by \(tenant[^)]*\) \(rate\(shield_admission_rejected_total`}},
		{"Breaker state per origin", []string{`by \(instance, origin\) \(shield_breaker_state`}},
		{"Cluster peers and generation changes", []string{`shield_cluster_peers`, `shield_cluster_generation_changes_total`}},
		{"Request latency quantiles", []string{`histogram_quantile\(0\.5, sum by \(le\) \(rate\(shield_request_duration_seconds_bucket`, `histogram_quantile\(0\.99,`}},
		{"Cache bytes", []string{`shield_cache_bytes`, `shield_cache_max_bytes`}},
		{"Cache entries", []string{`shield_cache_entries`}},
		{"Disk tier bytes and entries", []string{`shield_cache_disk_bytes`, `shield_cache_disk_max_bytes`, `shield_cache_disk_entries`,
			`shield_cache_disk_fill_bytes`}},
		{"Disk tier hits, writes, evictions, errors", []string{`rate\(shield_cache_disk_hits_total`, `rate\(shield_cache_disk_writes_total`,
			`rate\(shield_cache_disk_evictions_total`, `rate\(shield_cache_disk_errors_total`, `shield_cache_disk_degraded`,
			`rate\(shield_cache_disk_fill_refused_total`}},
		{"Origin in-flight vs budget limit", []string{`shield_origin_budget_in_flight`, `shield_origin_budget_limit`}},
	}
	for _, tt := range tests {
		t.Run(tt.title, func(t *testing.T) {
			p, ok := byTitle[tt.title]
			if !ok {
				t.Fatalf("no panel titled %q", tt.title)
			}
			for _, w := range tt.want {
				re := regexp.MustCompile(w)
				if !slices.ContainsFunc(p.Targets, func(tg target) bool { return re.MatchString(tg.Expr) }) {
					t.Errorf("panel %q: no target matches %s", tt.title, w)
				}
			}
		})
	}
}

// TestDashboardMetricsExported: every metric name in a panel or a
// variable query is exported by a real shield.
func TestDashboardMetricsExported(t *testing.T) {
	d := loadDashboard(t)
	ex := parseExposition(realScrape(t))
	where, exprs := d.expressions()
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			where = append(where, fmt.Sprintf("variable %q", v.Name))
			exprs = append(exprs, v.queryText())
		}
	}
	used := map[string]bool{}
	for i, e := range exprs {
		names := metricNames(e)
		if strings.HasPrefix(where[i], "variable") {
			names = varQueryNames(e)
		}
		if len(names) == 0 {
			t.Errorf("%s names no metric: %s", where[i], e)
		}
		for _, n := range names {
			used[n] = true
			if why := ex.check(n); why != "" {
				t.Errorf("%s: %s %s", where[i], n, why)
			}
		}
	}
	t.Logf("dashboard: %d expressions, %d metric names, all checked against a real scrape", len(exprs), len(used))
}
