package proxy

import (
	"errors"
	"strings"
	"testing"
)

// admin runs the admin handler on one request.
func admin(t *testing.T, p *Proxy, method, path string) (int, string) {
	t.Helper()
	ctx := newCtx(t, method+" "+path+" HTTP/1.1\nHost: admin")
	p.AdminHandler()(ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Body())
}

// The admin listener's probes, reload and metrics endpoints.
func TestAdminHandler(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	p := c.node("a").p
	if code, body := admin(t, p, "GET", "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _ := admin(t, p, "GET", "/readyz"); code != 200 {
		t.Fatalf("/readyz when ready: %d", code)
	}
	p.SetReady(false)
	if code, _ := admin(t, p, "GET", "/readyz"); code != 503 {
		t.Fatalf("/readyz while draining: %d, want 503", code)
	}
	if code, _ := admin(t, p, "GET", "/nope"); code != 404 {
		t.Fatalf("unknown path: %d, want 404", code)
	}
	if code, _ := admin(t, p, "GET", "/reload"); code != 405 {
		t.Fatalf("GET /reload: %d, want 405", code)
	}
	if code, body := admin(t, p, "POST", "/reload"); code != 400 || !strings.Contains(body, "not available") {
		t.Fatalf("POST /reload without a reloader: %d %q", code, body)
	}
	p.SetReloader(func() error { return errors.New("bad file") })
	if code, body := admin(t, p, "POST", "/reload"); code != 400 || !strings.Contains(body, "bad file") {
		t.Fatalf("failing reload: %d %q", code, body)
	}
	p.SetReloader(func() error { return nil })
	if code, body := admin(t, p, "POST", "/reload"); code != 200 || !strings.Contains(body, "reloaded") {
		t.Fatalf("reload: %d %q", code, body)
	}
	c.node("a").src.unreachable.Store(true)
	code, body := admin(t, p, "GET", "/metrics")
	for _, want := range []string{"shield_cluster_peers 2\n", "shield_consul_reachable 0\n", "shield_config_reloads_total", "process_"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics (%d) lacks %q", code, want)
		}
	}
}
