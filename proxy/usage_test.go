package proxy

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// usageSetup: two nodes that exchange tenant usage every 100ms, acme
// limited fleet-wide.
var usageSetup = clusterSetup{
	yaml: "  usage_interval: 100ms\n",
	top: `tenants:
  identify: { header: X-Tenant }
  default: { rate: 1000, burst: 1000, max_concurrency: 100 }
  classes:
    acme: { rate: 100, burst: 100, max_concurrency: 100 }
`,
}

// TestUsageExchange (issue 14): a node whose tenant is busy while the
// other node sees none of its traffic ends up with most of the tenant's
// fleet-wide rate, from the reports they exchange; the idle node keeps a
// small share, never nothing.
func TestUsageExchange(t *testing.T) {
	c := newTestCluster(t, usageSetup, "a", "b")
	a, b := c.node("a"), c.node("b")
	acme := func(n *testNode) float64 { return n.p.rt.Load().tenants.Lookup([]byte("acme")).Share() }
	if sa, sb := acme(a), acme(b); sa != 0.5 || sb != 0.5 {
		t.Fatalf("shares before any usage: a %v, b %v, want 0.5 each (rate/n)", sa, sb)
	}
	stop := time.Now().Add(10 * time.Second)
	for acme(a) <= 0.6 || acme(b) >= 0.4 {
		if time.Now().After(stop) {
			t.Fatalf("shares after a's demand: a %v, b %v; want a's above 0.6 and b's below 0.4", acme(a), acme(b))
		}
		a.get(t, "/usage/"+itoa(int(time.Now().UnixNano()%50)), "X-Tenant: acme")
		time.Sleep(5 * time.Millisecond)
	}
	if acme(b) <= 0 {
		t.Errorf("idle node's share %v: it must keep some of the rate", acme(b))
	}
	if a.counter(`shield_usage_reports_total{outcome="sent"}`) == 0 || b.counter(`shield_usage_reports_total{outcome="received"}`) == 0 {
		t.Errorf("reports sent by a %d, received by b %d", a.counter(`shield_usage_reports_total{outcome="sent"}`), b.counter(`shield_usage_reports_total{outcome="received"}`))
	}
}

// TestUsageReportRefused: a malformed report is 400 and counted; only
// POST is taken.
func TestUsageReportRefused(t *testing.T) {
	c := newTestCluster(t, usageSetup, "a", "b")
	a, b := c.node("a"), c.node("b")
	auth := "Shield-Auth: " + clusterSecret
	if r := c.peerReq(t, a.ip, b, "POST", usagePath, "not a report", auth); r.StatusCode() != fasthttp.StatusBadRequest {
		t.Errorf("malformed report: %d, want 400", r.StatusCode())
	}
	if b.counter(`shield_usage_reports_total{outcome="bad"}`) != 1 {
		t.Errorf("bad reports counted: %d, want 1", b.counter(`shield_usage_reports_total{outcome="bad"}`))
	}
	if r := c.peerReq(t, a.ip, b, "GET", usagePath, "", auth); r.StatusCode() != fasthttp.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", usagePath, r.StatusCode())
	}
}
