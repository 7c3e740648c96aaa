package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// TestRestartKeepsCache: with cache.path set, an entry cached before a
// SIGTERM is a hit after the restart, with no new origin request.
func TestRestartKeepsCache(t *testing.T) {
	t.Parallel()
	cachePath := filepath.Join(t.TempDir(), "cache")
	e := newEnv(t, func(c *shieldConfig) { c.CachePath = cachePath })
	before := e.get("/persist")
	wantForwarded(t, "GET before restart", before)
	wantHit(t, "GET before restart, again", e.get("/persist"))

	e.client.CloseIdleConnections()
	e.shield.terminate(t)
	if code := e.shield.wait(t); code != 0 {
		t.Fatalf("shield exited %d after SIGTERM, want 0", code)
	}
	if _, err := os.Stat(cachePath); err != nil {
		t.Errorf("cache.path after shutdown: %v", err)
	}

	e.startShield()
	after := e.get("/persist")
	wantHit(t, "GET after restart", after)
	if string(after.body) != string(before.body) {
		t.Errorf("after restart: body %q, want the cached %q", after.body, before.body)
	}
	e.wantOriginCount("/persist", 1)
}

// TestDrainOnSIGTERM: a request in flight when SIGTERM arrives completes
// with 200, and shield then exits 0.
func TestDrainOnSIGTERM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type answer struct {
		r   result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := e.try(http.MethodGet, target("/slow", "delay", "500"))
		done <- answer{r, err}
	}()
	eventually(t, "the slow request to reach the origin", func() bool { return e.stats().InFlight == 1 })
	e.shield.terminate(t)

	a := <-done
	if a.err != nil {
		t.Fatalf("in-flight request during SIGTERM: %v", a.err)
	}
	wantForwarded(t, "in-flight request during SIGTERM", a.r)
	if res := decode(t, a.r); res.Path != "/slow" {
		t.Errorf("in-flight request: body for path %q, want /slow", res.Path)
	}
	if code := e.shield.wait(t); code != 0 {
		t.Errorf("shield exited %d after SIGTERM, want 0", code)
	}
}

// TestDrainUsesReloadedTimeout: SIGTERM drains with the drain_timeout in
// force, not the one the process started with. Started at 200ms and
// reloaded to 5s, a 1.5 s request in flight at SIGTERM completes.
func TestDrainUsesReloadedTimeout(t *testing.T) {
	t.Parallel()
	drain := func(d time.Duration) confOpt {
		return exactly(func(c *config.Config) { c.Server.DrainTimeout = d })
	}
	e := newEnv(t, func(c *shieldConfig) { c.Extra = []confOpt{drain(200 * time.Millisecond)} })
	next := e.cfg
	next.Extra = []confOpt{drain(5 * time.Second)}
	e.rewriteConfig(next)
	if r := e.adminCall(http.MethodPost, "/reload"); r.status != http.StatusOK {
		t.Fatalf("reload: %v", r)
	}
	type answer struct {
		r   result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := e.try(http.MethodGet, target("/slow-drain", "delay", "1500"))
		done <- answer{r, err}
	}()
	eventually(t, "the slow request to reach the origin", func() bool { return e.stats().InFlight == 1 })
	e.shield.terminate(t)
	a := <-done
	if a.err != nil || a.r.status != http.StatusOK {
		t.Fatalf("request in flight at SIGTERM after raising drain_timeout to 5s: %v %v (cut at the old 200ms?)", a.r, a.err)
	}
	if code := e.shield.wait(t); code != 0 {
		t.Errorf("shield exited %d after SIGTERM, want 0", code)
	}
}
