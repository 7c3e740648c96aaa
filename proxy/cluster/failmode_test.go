package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/admission"
)

// TestFailModeEvents: silence during the start-up grace is not logged;
// after it, the first silent member enters fail mode (one warning naming
// it, the gauge at 1, the counter at 1), an unchanged state logs nothing
// more, and hearing everyone again logs the end and clears the gauge.
func TestFailModeEvents(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s := metrics.NewSet()
	ts, err := admission.NewTenants(admission.Config{Default: admission.Limits{Rate: 10, MaxConcurrency: 1}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	f := admission.NewFleet("a", time.Second)
	start := time.Unix(1_700_000_000, 0)
	fm := newFailMode(s, logger, f, time.Second, start)
	members := []string{"a", "b"}
	apply := func(at time.Time) {
		fm.note(f.Apply(ts, members, at), members, at)
	}
	apply(start.Add(time.Second))
	if logs.Len() != 0 || fm.on.Load() {
		t.Fatalf("logged during the grace: %q", logs.String())
	}
	after := start.Add(5 * time.Second)
	apply(after)
	apply(after.Add(time.Second))
	out := logs.String()
	if strings.Count(out, "fail mode: members not heard from") != 1 || !strings.Contains(out, "silent=[b]") || !fm.on.Load() {
		t.Fatalf("after the grace with b silent: logs %q, on %v; want one warning naming b", out, fm.on.Load())
	}
	var m bytes.Buffer
	s.WritePrometheus(&m)
	if !strings.Contains(m.String(), "shield_usage_fail_mode 1") || !strings.Contains(m.String(), "shield_usage_fail_mode_entered_total 1") {
		t.Fatalf("metrics:\n%s", m.String())
	}
	heard := after.Add(2 * time.Second)
	f.Receive(admission.Report{Node: "b", Window: time.Second}, ts, heard)
	apply(heard)
	if !strings.Contains(logs.String(), "fail mode over") || fm.on.Load() {
		t.Fatalf("after hearing b: logs %q, on %v", logs.String(), fm.on.Load())
	}
}
