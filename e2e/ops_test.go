package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Operations from the outside: reload (admin POST /reload and SIGHUP),
// purge (by URL, soft, by route namespace) and purge across a warm
// restart.

// adminCall sends method path to shield's admin listener.
func (e *env) adminCall(method, path string) result {
	e.t.Helper()
	r, err := doHTTP(e.client, method, "http://"+e.cfg.Admin+path)
	if err != nil {
		e.t.Fatalf("admin %s %s: %v", method, path, err)
	}
	return r
}

// rewriteConfig writes c over the config file shield was started with;
// shield sees it only on reload.
func (e *env) rewriteConfig(c shieldConfig) {
	e.t.Helper()
	e.writeConfigText(c.render(e.t))
	e.cfg = c
}

func (e *env) writeConfigText(text string) {
	e.t.Helper()
	if err := os.WriteFile(e.cfgPath, []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// plainSample returns the value of an unlabelled series from Prometheus
// text (sample handles only labelled ones).
func plainSample(text []byte, metric string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
			f, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return f, err == nil
		}
	}
	return 0, false
}

// reloadCounts returns shield_config_reloads_total and
// shield_config_reload_failures_total.
func (e *env) reloadCounts() (ok, failed float64) {
	e.t.Helper()
	r := e.adminCall(http.MethodGet, "/metrics")
	ok, found1 := plainSample(r.body, "shield_config_reloads_total")
	failed, found2 := plainSample(r.body, "shield_config_reload_failures_total")
	if !found1 || !found2 {
		e.t.Fatalf("/metrics lacks the reload counters:\n%s", r.body)
	}
	return ok, failed
}

// secondOrigin starts another demo origin and returns its address. A
// port found free can be taken by another test's connection before the
// origin binds it; that case is retried on a new port.
func secondOrigin(t *testing.T) string {
	t.Helper()
	const attempts = 3
	for range attempts {
		addr := freeAddr(t)
		p := startProcess(t, "demo-origin-b", binPath(t, "demo-origin"), "-listen", addr)
		deadline := time.Now().Add(startTimeout)
		for {
			if r, err := doHTTP(http.DefaultClient, http.MethodGet, "http://"+addr+"/__origin/stats"); err == nil && r.status == http.StatusOK {
				return addr
			}
			if p.exited() {
				if strings.Contains(p.stderr.String(), "address already in use") {
					break
				}
				t.Fatalf("second origin exited: %v\n%s", p.cmd.ProcessState, p.stderr.String())
			}
			if time.Now().After(deadline) {
				t.Fatalf("second origin on %s not ready after %v", addr, startTimeout)
			}
			time.Sleep(pollInterval)
		}
	}
	t.Fatalf("second origin: no free port in %d attempts", attempts)
	return ""
}

// statsAt reads the counters of the demo origin at addr.
func (e *env) statsAt(addr string) originStats {
	e.t.Helper()
	r, err := doHTTP(e.client, http.MethodGet, "http://"+addr+"/__origin/stats")
	if err != nil || r.status != http.StatusOK {
		e.t.Fatalf("origin %s stats: %v %v", addr, r, err)
	}
	var s originStats
	if err := json.Unmarshal(r.body, &s); err != nil {
		e.t.Fatalf("origin %s stats %q: %v", addr, r.body, err)
	}
	return s
}

// missLoad sends GETs for fresh paths (each one a miss that reaches an
// origin) from a few goroutines until stopped, and tallies the answers.
type missLoad struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	sent    atomic.Int64
	mu      sync.Mutex // guards bad
	bad     []string   // non-2xx answers and transport errors
	stopped bool
}

// Bounds of a missLoad: it stops by itself after maxRequests or
// maxDuration even if the test forgets to.
const (
	loadWorkers     = 4
	loadMaxRequests = 20000
	loadMaxDuration = 30 * time.Second
)

func (e *env) startMissLoad(prefix string) *missLoad {
	l := &missLoad{stop: make(chan struct{})}
	deadline := time.Now().Add(loadMaxDuration)
	for w := range loadWorkers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if l.sent.Load() >= loadMaxRequests || time.Now().After(deadline) {
					return
				}
				r, err := e.try(http.MethodGet, fmt.Sprintf("%s%d-%d", prefix, w, i))
				l.sent.Add(1)
				if err != nil || r.status < 200 || r.status > 299 {
					l.mu.Lock()
					l.bad = append(l.bad, fmt.Sprintf("%v %v", r, err))
					l.mu.Unlock()
				}
			}
		})
	}
	return l
}

// finish stops the load and returns how many requests went out and the
// failed ones.
func (l *missLoad) finish() (int64, []string) {
	if !l.stopped {
		close(l.stop)
		l.stopped = true
	}
	l.wg.Wait()
	return l.sent.Load(), l.bad
}

// TestReloadSwapsOrigin: POST /reload with the route's origin moved to a
// second server swaps it live: misses after the reload reach the second
// origin, and not one request fails while requests flow throughout.
func TestReloadSwapsOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addrB := secondOrigin(t)

	load := e.startMissLoad("/swap/")
	t.Cleanup(func() { load.finish() })
	eventually(t, "load to reach origin A", func() bool { return e.stats().Total >= 50 })

	next := e.cfg
	next.Origin = addrB
	e.rewriteConfig(next)
	sentAtReload := load.sent.Load()
	r := e.adminCall(http.MethodPost, "/reload")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"reloaded"}` {
		t.Fatalf("POST /reload: %v, want 200 {\"status\":\"reloaded\"}", r)
	}
	eventually(t, "load to reach origin B", func() bool { return e.statsAt(addrB).Total >= 50 })
	sent, bad := load.finish()

	wantForwarded(t, "a miss after the reload", e.get("/after-reload"))
	if a, b := e.stats().ByPath["/after-reload"], e.statsAt(addrB).ByPath["/after-reload"]; a != 0 || b != 1 {
		t.Errorf("/after-reload reached origin A %d times and B %d times, want 0 and 1", a, b)
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d requests failed during the reload; first: %s", len(bad), sent, bad[0])
	}
	ok, failed := e.reloadCounts()
	if ok != 1 || failed != 0 {
		t.Errorf("reloads %v, failures %v; want 1 and 0", ok, failed)
	}
	t.Logf("reload: %d requests, %d before POST /reload, %d failed; origin A saw %d, B saw %d",
		sent, sentAtReload, len(bad), e.stats().Total, e.statsAt(addrB).Total)
}

// TestReloadRejectsBadConfig: a reload of a bad file answers 400 with the
// reason, counts a failure, and the running config keeps serving from
// the same origin; a good file afterwards reloads.
func TestReloadRejectsBadConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := e.cfg.render(t)
	tests := []struct {
		name string
		file string
		want string // in the error
	}{
		{"broken YAML", strings.Replace(good, "routes:\n", "routes: [\n", 1), e.cfgPath},
		{"unknown origin", strings.Replace(good, "    origin: demo\n", "    origin: nowhere\n", 1), "routes[0].origin"},
		{"empty file", "", e.cfgPath},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			if tt.file == good {
				t.Fatal("the bad file equals the good one: the template changed")
			}
			e.writeConfigText(tt.file)
			r := e.adminCall(http.MethodPost, "/reload")
			var body struct{ Error string }
			if r.status != http.StatusBadRequest || json.Unmarshal(r.body, &body) != nil || !strings.Contains(body.Error, tt.want) {
				t.Errorf("POST /reload: %v, want 400 {\"error\": ...%s...}", r, tt.want)
			}
			path := fmt.Sprintf("/still-serving-%d", i)
			wantForwarded(t, "a miss after the rejected reload", e.get(path))
			e.wantOriginCount(path, 1)
			if ok, failed := e.reloadCounts(); ok != 0 || failed != float64(i+1) {
				t.Errorf("reloads %v, failures %v; want 0 and %d", ok, failed, i+1)
			}
		})
	}
	e.writeConfigText(good)
	if r := e.adminCall(http.MethodPost, "/reload"); r.status != http.StatusOK {
		t.Errorf("POST /reload of the good file after the bad ones: %v, want 200", r)
	}
}

// TestSIGHUPReloads: SIGHUP re-reads the file like POST /reload: the
// reload counter moves and misses reach the new origin.
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addrB := secondOrigin(t)
	before, _ := e.reloadCounts()
	next := e.cfg
	next.Origin = addrB
	e.rewriteConfig(next)
	e.shield.signal(t, syscall.SIGHUP)
	eventually(t, "shield_config_reloads_total to increase after SIGHUP", func() bool {
		ok, _ := e.reloadCounts()
		return ok == before+1
	})
	wantForwarded(t, "a miss after SIGHUP", e.get("/after-hup"))
	if a, b := e.stats().ByPath["/after-hup"], e.statsAt(addrB).ByPath["/after-hup"]; a != 0 || b != 1 {
		t.Errorf("/after-hup reached origin A %d times and B %d times, want 0 and 1", a, b)
	}
	if e.shield.exited() {
		t.Errorf("shield exited after SIGHUP: %v", e.shield.cmd.ProcessState)
	}
}

// purgeAnswer is the admin POST /purge JSON answer.
type purgeAnswer struct {
	Purge struct {
		Kind, Target string
		Found        bool
		Namespace    int
	}
	Peers   map[string]int // peers that answered in time, by status
	Pending []string       // peers that have not acknowledged it yet
	Error   string
}

// purge calls POST /purge?query and decodes the answer; want is the
// expected status.
func (e *env) purge(query string, want int) purgeAnswer {
	e.t.Helper()
	r := e.adminCall(http.MethodPost, "/purge?"+query)
	var a purgeAnswer
	if r.status != want || json.Unmarshal(r.body, &a) != nil {
		e.t.Fatalf("POST /purge?%s: %v, want %d with a JSON body", query, r, want)
	}
	return a
}

// absURL is the absolute URL of path as clients reach it through shield.
func (e *env) absURL(path string) string { return "http://" + e.cfg.Listen + path }

// TestPurge: after a purge by URL or by route, the next request is a
// miss; a URL purge leaves other URLs cached, a route purge takes them
// all.
func TestPurge(t *testing.T) {
	t.Parallel()
	byURL := func(e *env, p string) string { return "url=" + url.QueryEscape(e.absURL(p)) }
	tests := []struct {
		name      string
		path      string
		query     func(e *env, path string) string
		kind      string
		otherGone bool // the other cached URL is purged too
	}{
		{"url", "/purge-me", byURL, "url", false},
		{"url with query", "/purge-me?b=2&a=1", byURL, "url", false},
		{"route", "/purge-me", func(*env, string) string { return "route=demo" }, "route", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			path, other := tt.path, "/other"
			for _, p := range []string{path, other} {
				wantForwarded(t, "first GET "+p, e.get(p))
				wantHit(t, "second GET "+p, e.get(p))
			}
			a := e.purge(tt.query(e, path), http.StatusOK)
			if a.Purge.Kind != tt.kind || (tt.kind == "url" && !a.Purge.Found) {
				t.Errorf("purge answer %+v, want kind %q (found, for a URL)", a.Purge, tt.kind)
			}
			if cs := wantForwarded(t, "GET after the purge", e.get(path)); cs.fwd != "miss" {
				t.Errorf("GET after the purge: fwd=%s, want fwd=miss", cs.fwd)
			}
			if r := e.get(other); tt.otherGone {
				wantForwarded(t, "other URL after a route purge", r)
			} else {
				wantHit(t, "other URL after a URL purge", r)
			}
			wantHit(t, "GET after the refetch", e.get(path))
			if n := mustPlain(t, e.adminCall(http.MethodGet, "/metrics").body, "shield_purges_total"); n != 1 {
				t.Errorf("shield_purges_total = %v, want 1", n)
			}
		})
	}
}

func mustPlain(t *testing.T, text []byte, metric string) float64 {
	t.Helper()
	v, ok := plainSample(text, metric)
	if !ok {
		t.Fatalf("/metrics has no %s", metric)
	}
	return v
}

// TestPurgeBadRequests: malformed purges are refused with 400 (405 for a
// GET) and purge nothing.
func TestPurgeBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantForwarded(t, "first GET", e.get("/keep"))
	tests := []struct {
		name, method, query string
		want                int
	}{
		{"nothing to purge", http.MethodPost, "", http.StatusBadRequest},
		{"relative url", http.MethodPost, "url=%2Fkeep", http.StatusBadRequest},
		{"ftp url", http.MethodPost, "url=" + url.QueryEscape("ftp://"+e.cfg.Listen+"/keep"), http.StatusBadRequest},
		{"unknown route", http.MethodPost, "route=nope", http.StatusBadRequest},
		{"GET", http.MethodGet, "route=demo", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.on(t).adminCall(tt.method, "/purge?"+tt.query)
			if r.status != tt.want {
				t.Errorf("%s /purge?%s: %v, want %d", tt.method, tt.query, r, tt.want)
			}
		})
	}
	wantHit(t, "GET after the refused purges", e.get("/keep"))
}

// TestSoftPurge: a soft purge of an entry with stale-while-revalidate=30
// makes it stale at once: the next requests are answered from the stale
// copy (fwd=stale) while one background refresh runs, and the origin sees
// exactly that one refresh.
func TestSoftPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The origin takes 1s, so the stale answers below come while the
	// refresh is still running.
	u := target("/soft", "cc", "public, max-age=60, stale-while-revalidate=30", "delay", "1000")
	first := e.get(u)
	wantForwarded(t, "first GET", first)
	wantHit(t, "second GET", e.get(u))

	a := e.purge("soft=1&url="+url.QueryEscape(e.absURL(u)), http.StatusOK)
	if a.Purge.Kind != "soft-url" || !a.Purge.Found {
		t.Errorf("soft purge answer %+v, want kind soft-url, found", a.Purge)
	}
	const staleGets = 5
	for i := range staleGets {
		r := e.get(u)
		wantStale(t, fmt.Sprintf("GET %d after the soft purge", i+1), r, "stale-while-revalidate")
		if !bytes.Equal(r.body, first.body) {
			t.Errorf("GET %d after the soft purge: body %q, want the stored %q", i+1, r.body, first.body)
		}
	}
	// The refresh runs in the background: on a loaded machine it may not
	// have reached the origin yet when the stale answers are back, so
	// wait for it rather than expect it.
	e.awaitOrigin("the one background refresh to start", func(s originStats) bool { return s.ByPath["/soft"] >= 2 })
	if s := e.stats(); s.ByPath["/soft"] != 2 {
		t.Errorf("after %d stale answers the origin saw %d requests for /soft; want 2 (one refresh)", staleGets, s.ByPath["/soft"])
	}
	e.awaitOrigin("the refresh to finish", func(s originStats) bool { return s.InFlight == 0 })
	after := e.pollUntil(u, 20*time.Millisecond, 5*time.Second, "the refreshed entry",
		func(r result) bool { return classify(r) == kindFresh })
	if n := decode(t, after).N; n != 2 {
		t.Errorf("after the refresh: body n=%d, want 2 (the refreshed copy)", n)
	}
	e.wantOriginCount("/soft", 2)
}

// TestPurgeSurvivesRestart: entries purged by route before a SIGTERM do
// not come back from the snapshot after the restart, while an entry
// stored after the purge does.
func TestPurgeSurvivesRestart(t *testing.T) {
	t.Parallel()
	cachePath := filepath.Join(t.TempDir(), "cache")
	e := newEnv(t, func(c *shieldConfig) { c.CachePath = cachePath })
	wantForwarded(t, "GET /gone", e.get("/gone"))
	wantHit(t, "GET /gone again", e.get("/gone"))
	if a := e.purge("route=demo", http.StatusOK); a.Purge.Namespace != 1 {
		t.Errorf("route purge answer %+v, want namespace 1", a.Purge)
	}
	kept := e.get("/kept")
	wantForwarded(t, "GET /kept after the purge", kept)

	e.client.CloseIdleConnections()
	e.shield.terminate(t)
	if code := e.shield.wait(t); code != 0 {
		t.Fatalf("shield exited %d after SIGTERM, want 0", code)
	}
	for _, p := range []string{cachePath, cachePath + ".ns"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after shutdown: %v", err)
		}
	}

	e.startShield()
	r := e.get("/kept")
	wantHit(t, "GET /kept after the restart", r)
	if !bytes.Equal(r.body, kept.body) {
		t.Errorf("/kept after the restart: body %q, want the stored %q", r.body, kept.body)
	}
	gone := e.get("/gone")
	wantForwarded(t, "GET /gone after the restart (purged before it)", gone)
	if n := decode(t, gone).N; n != 2 {
		t.Errorf("/gone after the restart: n=%d, want 2 (a fresh fetch, not the purged copy)", n)
	}
	e.wantOriginCount("/gone", 2)
	e.wantOriginCount("/kept", 1)
}
