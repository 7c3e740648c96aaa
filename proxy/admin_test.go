package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
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

// Every admin answer carries the CSP and nosniff, errors included; a
// state-changing request a browser marks as cross-site is refused 403
// before it reaches the endpoint, and one without the browser's fields
// (curl) or from the listener's own page goes through.
func TestAdminCrossSite(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	p := c.node("a").p
	reloads := 0
	p.SetReloader(func() error { reloads++; return nil })
	call := func(method, path string, hdr ...string) *fasthttp.RequestCtx {
		t.Helper()
		raw := method + " " + path + " HTTP/1.1\nHost: 127.0.0.1:9091"
		for i := 0; i+1 < len(hdr); i += 2 {
			raw += "\n" + hdr[i] + ": " + hdr[i+1]
		}
		ctx := newCtx(t, raw)
		p.AdminHandler()(ctx)
		if csp := string(ctx.Response.Header.Peek("Content-Security-Policy")); csp != "default-src 'self'; frame-ancestors 'none'" {
			t.Errorf("%s %s %v: Content-Security-Policy %q", method, path, hdr, csp)
		}
		if v := string(ctx.Response.Header.Peek("X-Content-Type-Options")); v != "nosniff" {
			t.Errorf("%s %s %v: X-Content-Type-Options %q", method, path, hdr, v)
		}
		return ctx
	}
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "null"},
		{"Origin", "http://127.0.0.1:8080"},
		{"Origin", "https://127.0.0.1:9091"},
		{"Origin", "http://evil.example", "Sec-Fetch-Site", "same-origin"},
	} {
		for _, path := range []string{"/reload", "/purge?url=http://x/"} {
			ctx := call("POST", path, hdr...)
			if ctx.Response.StatusCode() != 403 || !strings.Contains(string(ctx.Response.Body()), "cross-site request refused") {
				t.Errorf("POST %s with %v: %d %q, want 403 cross-site", path, hdr, ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	}
	if reloads != 0 {
		t.Fatalf("%d reloads ran from cross-site requests", reloads)
	}
	for _, hdr := range [][]string{
		nil, // curl
		{"Sec-Fetch-Site", "same-origin", "Origin", "http://127.0.0.1:9091"},
		{"Sec-Fetch-Site", "none"},
		{"Origin", "HTTP://127.0.0.1:9091"},
	} {
		if ctx := call("POST", "/reload", hdr...); ctx.Response.StatusCode() != 200 {
			t.Errorf("POST /reload with %v: %d %q, want 200", hdr, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if reloads != 4 {
		t.Errorf("reloads %d, want 4", reloads)
	}
	// Reads are not state-changing: a cross-site GET is answered (the
	// browser keeps the answer from the other site's script).
	for _, path := range []string{"/", "/status.json", "/metrics", "/nope", "/status.css"} {
		ctx := call("GET", path, "Sec-Fetch-Site", "cross-site")
		if s := ctx.Response.StatusCode(); s == 403 {
			t.Errorf("GET %s cross-site: 403", path)
		}
	}
	if ctx := call("GET", "/status.css"); !strings.Contains(string(ctx.Response.Header.ContentType()), "text/css") || len(ctx.Response.Body()) == 0 {
		t.Errorf("/status.css: %q, %d bytes", ctx.Response.Header.ContentType(), len(ctx.Response.Body()))
	}
	if ctx := call("GET", "/reload"); ctx.Response.StatusCode() != 405 {
		t.Errorf("GET /reload: %d, want 405 (with the headers)", ctx.Response.StatusCode())
	}
}
