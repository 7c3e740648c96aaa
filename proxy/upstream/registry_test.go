package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// TestReloadKeepsBreaker: a reload that leaves an origin's breaker
// settings unchanged keeps its breaker (an open one stays open); one that
// changes them starts a new, closed breaker. The budget, retry budget,
// metrics and servers are kept either way.
func TestReloadKeepsBreaker(t *testing.T) {
	o := newTestOrigin(t)
	o.status.Store(502)
	r := newRegistry(t)
	yaml := func(failures string) *config.Config {
		return parse(t, oneOrigin([]string{o.addr()}, "breaker: {consecutive_failures: "+failures+", open_for: 1m}"), "o")
	}
	first := r.update(t, yaml("1"))
	if code, _, _ := call(t, first, "/a"); code != 502 {
		t.Fatalf("first call: %d, want the origin's 502", code)
	}
	if _, f, _ := call(t, first, "/b"); f.Detail != "breaker-open" || f.Status != 503 || f.RetryAfter <= 0 {
		t.Fatalf("after one failure: %+v, want 503 breaker-open with a Retry-After", f)
	}

	brk := first.brk.Load() // the state is shared: keep the pointer
	same := r.update(t, yaml("1"))
	if same.state != first.state || same.brk.Load() != brk || same.servers != first.servers {
		t.Fatal("an unchanged reload replaced the origin's state, breaker or servers")
	}
	if _, f, _ := call(t, same, "/c"); f.Detail != "breaker-open" {
		t.Fatalf("after an unchanged reload: %+v, want the breaker still open", f)
	}

	o.status.Store(200)
	changed := r.update(t, yaml("2"))
	if changed.state != first.state || changed.servers != first.servers {
		t.Fatal("a breaker change replaced the budget or the servers")
	}
	if changed.brk.Load() == brk {
		t.Fatal("a breaker change kept the old breaker")
	}
	if code, f, _ := call(t, changed, "/d"); code != 200 {
		t.Fatalf("after a breaker change: %d %+v, want a closed breaker letting 200 through", code, f)
	}
	if got := first.m.fetches[outOK].Get(); got != 1 {
		t.Fatalf("ok fetches counted on the kept metrics: %d, want 1", got)
	}
}

// TestReloadKeepsBudget: the budget's in-flight count survives a reload;
// new limits apply to it at once.
func TestReloadKeepsBudget(t *testing.T) {
	o := newTestOrigin(t)
	r := newRegistry(t)
	yaml := func(maxConc string) *config.Config {
		return parse(t, oneOrigin([]string{o.addr()}, "max_concurrency: "+maxConc, "queue_timeout: 0s", "slow_start: 0s"), "o")
	}
	first := r.update(t, yaml("1"))
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("/held")
	req.Header.SetHost("client.example.com")
	held, ok, f := first.Call(nil, 0, req, resp)
	if !ok {
		t.Fatalf("first call: %+v", f)
	}
	defer held.End()

	same := r.update(t, yaml("1"))
	if _, f, _ := call(t, same, "/x"); f.Status != 503 || f.Detail != "budget" {
		t.Fatalf("second call, one slot held, after an unchanged reload: %+v, want 503 budget", f)
	}
	if got := sumRejected(first); got != 1 {
		t.Fatalf("budget refusals counted: %d, want 1", got)
	}
	wider := r.update(t, yaml("2"))
	if wider.budget != first.budget {
		t.Fatal("a limit change replaced the budget")
	}
	if code, f, _ := call(t, wider, "/y"); code != 200 {
		t.Fatalf("with max_concurrency 2 and one slot held: %d %+v", code, f)
	}
	held.End()
	held.End() // idempotent
	if st := r.Status(time.Now()); len(st) != 1 || st[0].InFlight != 0 || st[0].Budget != 2 {
		t.Fatalf("status after the lease ended: %+v, want 0 in flight of 2", st)
	}
}

func sumRejected(o *Origin) (n uint64) {
	for _, c := range o.m.budgetRejected {
		n += c.Get()
	}
	return n
}

// TestReloadReplacesServers: a change of server settings builds new
// servers and stops the old ones' health checks; an origin dropped from
// the configuration keeps its state (and status row) but its health
// checks stop.
func TestReloadReplacesServers(t *testing.T) {
	a, b := newTestOrigin(t), newTestOrigin(t)
	r := newRegistry(t)
	hc := "health_check: {path: /health, interval: 10ms, timeout: 5ms}"
	both := parse(t, oneOrigin([]string{a.addr()}, hc)+"  p:\n    servers: [\""+b.addr()+"\"]\n    "+hc+"\n", "o", "p")
	first := r.update(t, both)
	waitUntil(t, "health checks of both origins", func() bool { return a.hits.Load() > 2 && b.hits.Load() > 2 })

	// o moves to server b, p is dropped.
	moved := parse(t, oneOrigin([]string{b.addr()}, hc), "o")
	second := r.update(t, moved)
	if second.servers == first.servers || second.state != first.state {
		t.Fatal("a server change must replace the servers and keep the state")
	}
	time.Sleep(30 * time.Millisecond) // a check already under way may land
	aHits, bHits := a.hits.Load(), b.hits.Load()
	time.Sleep(100 * time.Millisecond)
	if got := a.hits.Load(); got != aHits {
		t.Fatalf("the replaced server set still checks a: %d → %d", aHits, got)
	}
	// b is checked by o's new servers only: about one check per 10ms, not two.
	if got := b.hits.Load() - bHits; got < 3 || got > 15 {
		t.Fatalf("b got %d checks in 100ms, want o's alone (~10)", got)
	}
	if st := r.Status(time.Now()); len(st) != 2 || st[0].Name != "o" || st[1].Name != "p" {
		t.Fatalf("status rows: %+v, want o and the dropped p", st)
	}
	if h := r.Health(); len(h) != 2 || len(h["o"]) != 1 || h["o"][0].Name != b.addr() {
		t.Fatalf("health: %+v", h)
	}
}

// TestCheckRefuses: Check (and Update, its second line) refuses origin
// limits, breaker settings and TLS material that cannot be used, naming
// the origin.
func TestCheckRefuses(t *testing.T) {
	o := newTestOrigin(t)
	cases := []struct {
		name string
		edit func(*config.Origin)
		want string
	}{
		{"limits", func(oc *config.Origin) { oc.MaxConcurrency = 0 }, "max_concurrency"},
		{"breaker", func(oc *config.Origin) { oc.Breaker.FailureRatio = 2 }, "origin \"o\""},
		{"tls ca", func(oc *config.Origin) {
			oc.Servers = []string{"https://" + o.addr()}
			oc.TLS.CAFile = t.TempDir() + "/missing.pem"
		}, "tls.ca_file"},
		{"tls client cert", func(oc *config.Origin) {
			oc.Servers = []string{"https://" + o.addr()}
			oc.TLS.CertFile, oc.TLS.KeyFile = t.TempDir()+"/c.pem", t.TempDir()+"/k.pem"
		}, "tls client certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parse(t, oneOrigin([]string{o.addr()}), "o")
			tc.edit(cfg.Origins["o"])
			err := Check(cfg.Origins)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `origin "o"`) {
				t.Fatalf("Check: %v, want an error about %s naming the origin", err, tc.want)
			}
			if _, err := newRegistry(t).Update(cfg); err == nil {
				t.Fatal("Update accepted what Check refused")
			}
		})
	}
}

// TestUpdateRefusesOnReload: a kept origin whose new limits or breaker
// settings are invalid makes Update fail (Check would have said so).
func TestUpdateRefusesOnReload(t *testing.T) {
	o := newTestOrigin(t)
	r := newRegistry(t)
	r.update(t, parse(t, oneOrigin([]string{o.addr()}), "o"))
	for _, edit := range []func(*config.Origin){
		func(oc *config.Origin) { oc.QueueTimeout = -1 },
		func(oc *config.Origin) { oc.Breaker.FailureRatio = 2 },
		func(oc *config.Origin) {
			oc.Servers = []string{"https://" + o.addr()}
			oc.TLS.CAFile = "/nonexistent/ca.pem"
		},
	} {
		cfg := parse(t, oneOrigin([]string{o.addr()}), "o")
		edit(cfg.Origins["o"])
		if _, err := r.Update(cfg); err == nil {
			t.Fatalf("Update accepted %+v", cfg.Origins["o"])
		}
	}
}

// TestDisabledBreaker: breaker.disabled leaves the origin without one:
// failures pass through as answers, the status page says "disabled".
func TestDisabledBreaker(t *testing.T) {
	o := newTestOrigin(t)
	o.status.Store(503)
	r := newRegistry(t)
	or := r.update(t, parse(t, oneOrigin([]string{o.addr()}, "breaker: {disabled: true}"), "o"))
	for range 10 {
		if code, f, _ := call(t, or, "/x"); code != 503 {
			t.Fatalf("%d %+v, want the origin's 503 every time", code, f)
		}
	}
	if st := r.Status(time.Now()); st[0].Breaker != "disabled" || st[0].Fetches != 10 || st[0].Errors != 10 || st[0].ErrorRate != 1 {
		t.Fatalf("status: %+v", st[0])
	}
	if m := r.scrape(); strings.Contains(m, "shield_breaker_state") {
		t.Fatal("a disabled breaker exported its state")
	}
}

// TestWriteMetricsAndStatus: the scrape-time families keep their names
// and labels (dashboards in deploy/ depend on them).
func TestWriteMetricsAndStatus(t *testing.T) {
	o := newTestOrigin(t)
	r := newRegistry(t)
	or := r.update(t, parse(t, oneOrigin([]string{o.addr()}), "o"))
	call(t, or, "/x")
	or.Revalidated(true)
	or.Revalidated(false)
	if f := or.BodyFailed(); f.Status != 502 || f.Detail != "error" {
		t.Fatalf("BodyFailed: %+v", f)
	}
	m := r.scrape()
	srv := `{origin="o",server="` + o.addr() + `"}`
	for _, want := range []string{
		`shield_origin_budget_limit{origin="o"} 256`,
		`shield_origin_budget_in_flight{origin="o"} 0`,
		`shield_breaker_state{origin="o"} 0`,
		`shield_breaker_transitions_total{origin="o",to="open"} 0`,
		`shield_breaker_rejections_total{origin="o"} 0`,
		`shield_origin_server_up` + srv + ` 1`,
		`shield_origin_server_in_flight` + srv + ` 0`,
		`shield_origin_server_requests_total` + srv + ` 1`,
		`shield_origin_server_errors_total` + srv + ` 0`,
		`shield_origin_server_ejections_total` + srv + ` 0`,
		`shield_origin_fetches_total{origin="o",outcome="ok"} 1`,
		`shield_origin_fetches_total{origin="o",outcome="error"} 1`,
		`shield_revalidations_total{origin="o",result="not_modified"} 1`,
		`shield_revalidations_total{origin="o",result="modified"} 1`,
		`shield_origin_in_flight{origin="o"} 0`,
		`shield_origin_retries_total{origin="o"} 0`,
		`shield_origin_stale_connection_retries_total{origin="o"} 0`,
		`shield_origin_budget_rejections_total{origin="o",reason="queue_timeout"} 0`,
		`shield_origin_fetch_duration_seconds_count{origin="o"} 1`,
		`shield_origin_tls_errors_total` + srv + ` 0`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	st := r.Status(time.Now())[0]
	if st.Breaker != "closed" || st.Fetches != 2 || st.Errors != 1 || st.ErrorRate != 0.5 || len(st.Servers) != 1 ||
		st.Servers[0].Health != "up" || st.Servers[0].Requests != 1 || st.Servers[0].ErrorRate != 0 {
		t.Fatalf("status: %+v", st)
	}
	if or.Name() != "o" || or.MaxHints() != 3 {
		t.Fatalf("Name, MaxHints = %q, %d", or.Name(), or.MaxHints())
	}
	or.CloseIdleConnections()
}
