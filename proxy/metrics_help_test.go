package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/procs"
)

// TestMetricHelpComplete: every family a proxy with traffic exports has
// HELP and TYPE text, each family appears once, in one group.
func TestMetricHelpComplete(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	p := newTestProxy(t, o.addr(), nil)
	p.SetGovernor(func() procs.Stats { return procs.Stats{Trials: 9, Kept: 3, Failed: 4, Inconclusive: 1, Surges: 2} })
	serve(p, get(t, "/a"))
	serve(p, get(t, "/a"))
	var raw bytes.Buffer
	p.g.set.WritePrometheus(&raw)
	metrics.WriteProcessMetrics(&raw)
	var out bytes.Buffer
	writeFamilies(&out, raw.Bytes())
	types := map[string]int{}
	lastFamily, closed := "", map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if fam, ok := strings.CutPrefix(line, "# TYPE "); ok {
			fam = strings.Fields(fam)[0]
			types[fam]++
			if closed[fam] {
				t.Errorf("family %s appears in two groups", fam)
			}
			if lastFamily != "" {
				closed[lastFamily] = true
			}
			lastFamily = fam
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		fam := family(name)
		if _, _, ok := familyHelp(fam); !ok {
			t.Errorf("metric %s (family %s) has no HELP/TYPE entry in metricHelp", name, fam)
		}
		if _, bad := runtimeRename[name]; bad {
			t.Errorf("metric %s kept a name runtimeRename replaces", name)
		}
		if fam != lastFamily {
			t.Errorf("sample %s outside its family group (current group %s)", name, lastFamily)
		}
	}
	for fam, n := range types {
		if n != 1 {
			t.Errorf("family %s has %d TYPE lines", fam, n)
		}
	}
	if types["shield_requests_total"] != 1 || types["shield_request_duration_seconds"] != 1 || types["go_gc_duration_seconds"] != 1 || types["process_cpu_seconds_total"] != 1 {
		t.Fatalf("expected families missing: %v", types)
	}
	for _, want := range []string{`shield_procs_trials_total{result="kept"} 3`, `shield_procs_trials_total{result="failed"} 4`,
		`shield_procs_trials_total{result="inconclusive"} 1`, "shield_procs_surges_total 2"} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
