package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shield-proxy/shield/internal/testenv"
)

// promtool returns the promtool binary. Missing, it skips locally and
// fails under CI (.ci/run installs the Debian package prometheus).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool not installed: apt-get install prometheus (.ci/run does): %v", err)
	}
	return p
}

// runPromtool runs promtool with args and stdin, failing t with its
// output unless it exits 0.
func runPromtool(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolConfigAndRules(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"check rules", []string{"check", "rules", alertsPath}},
		{"test rules", []string{"test", "rules", "prometheus/alerts_test.yml"}},
		{"check config", []string{"check", "config", "prometheus/prometheus.yml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := runPromtool(t, nil, tt.args...)
			if !t.Failed() {
				t.Logf("promtool %s: %s", strings.Join(tt.args, " "), strings.Join(strings.Fields(out), " "))
			}
		})
	}
}

// grafanaVar matches a Grafana variable reference: $name, ${name...} or
// [[name]].
var grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]`)

// expandVars replaces Grafana variables so an expression becomes plain
// PromQL: interval variables become 5m, the others (used in =~ matchers)
// match anything.
func expandVars(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.Contains(v, "__") && (strings.Contains(v, "interval") || strings.Contains(v, "range")) {
			return "5m"
		}
		return ".*"
	})
}

func TestExpandVars(t *testing.T) {
	tests := []struct{ in, want string }{
		{`rate(x{instance=~"$instance"}[$__rate_interval])`, `rate(x{instance=~".*"}[5m])`},
		{`increase(x{route=~"${route:regex}"}[${__range}])`, `increase(x{route=~".*"}[5m])`},
		{`x{a=~"[[a]]"}[$__interval]`, `x{a=~".*"}[5m]`},
		{`x > 0.5`, `x > 0.5`},
	}
	for _, tt := range tests {
		if got := expandVars(tt.in); got != tt.want {
			t.Errorf("expandVars(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDashboardPromQL: every dashboard expression, variables expanded,
// parses as PromQL: each becomes a recording rule that promtool checks.
func TestDashboardPromQL(t *testing.T) {
	bin := promtool(t)
	where, exprs := loadDashboard(t).expressions()
	var sb strings.Builder
	sb.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		fmt.Fprintf(&sb, "      - record: dashboard:expr:%d\n        expr: %q\n", i, expandVars(e))
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	if err != nil {
		// promtool names the failing rule by its position: map it back.
		msg := string(out)
		for i := len(exprs) - 1; i >= 0; i-- {
			msg = strings.ReplaceAll(msg, fmt.Sprintf("dashboard:expr:%d", i), where[i])
		}
		t.Errorf("dashboard expressions do not parse: %v\n%s", err, msg)
	}
}

// TestPromtoolCheckMetrics lints a real scrape, all of it: shield's
// families and the go_ and process_ families the metrics library writes.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool(t)
	scrape := realScrape(t)
	for _, fam := range []string{"shield_requests_total", "go_goroutines", "process_cpu_seconds_total"} {
		if !bytes.Contains(scrape, []byte("# TYPE "+fam+" ")) {
			t.Errorf("the scrape has no TYPE line for %s", fam)
		}
	}
	out := runPromtool(t, scrape, "check", "metrics")
	if t.Failed() {
		t.Logf("%d problem lines from promtool on %d bytes of exposition", strings.Count(strings.TrimSpace(out), "\n")+1, len(scrape))
	}
}
