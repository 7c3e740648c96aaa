package e2e

import (
	"net/http"
	"testing"
)

// TestUnknownHost: a Host no route names gets 404 and never reaches the
// origin; the named host still works.
func TestUnknownHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *shieldConfig) { c.Hosts = []string{"api.example"} })
	for _, host := range []string{"other.example", "api.example.evil", e.cfg.Listen} {
		if r := e.get("/routed", "Host", host); r.status != http.StatusNotFound {
			t.Errorf("GET /routed Host %q: %v, want 404", host, r)
		}
	}
	if s := e.stats(); s.Total != 0 {
		t.Errorf("origin saw %d requests for unrouted hosts, want 0", s.Total)
	}
	wantForwarded(t, "GET /routed Host api.example", e.get("/routed", "Host", "api.example"))
	e.wantOriginCount("/routed", 1)
}
