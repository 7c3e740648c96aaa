package e2e

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// protectConfig is what an origin-protection test varies: the origin's
// budget and breaker, and the route's stale policy. Breaker and Cache are
// the inside of a YAML flow mapping ("consecutive_failures: 3, open_for:
// 1s"); empty leaves every key at its default.
type protectConfig struct {
	Timeout        string  // origin timeout; "" = 2s
	MaxConcurrency int     // 0 = 64
	MaxRate        float64 // 0 = no rate limit
	SlowStart      string  // "" = 0s: off, so a tripped breaker does not leave a ramp behind
	Breaker        string  // origins.demo.breaker: { ... }
	Cache          string  // routes[0].cache: { ... }
}

// newProtectEnv is newEnv with pc rendered into the config.
func newProtectEnv(t *testing.T, pc protectConfig) *env {
	t.Helper()
	if pc.Timeout == "" {
		pc.Timeout = "2s"
	}
	if pc.MaxConcurrency == 0 {
		pc.MaxConcurrency = 64
	}
	if pc.SlowStart == "" {
		pc.SlowStart = "0s"
	}
	e := &env{t: t, originAddr: freeAddr(t), client: newClient()}
	t.Cleanup(e.client.CloseIdleConnections)
	e.origin = startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", e.originAddr)
	e.origin.waitReady(t, "http://"+e.originAddr+"/__origin/stats")
	e.cfg = shieldConfig{
		Listen:        freeAddr(t),
		Admin:         freeAddr(t),
		Origin:        e.originAddr,
		MaxObjectSize: "1MiB",
		Hosts:         []string{"*"},
	}
	slowStart := mustDuration(t, pc.SlowStart)
	timeout := mustDuration(t, pc.Timeout)
	e.cfg.Extra = []confOpt{
		// Before defaults, so that defaults derived from the origin
		// timeout (cache.wait_timeout, say) follow it.
		with(func(c *config.Config) {
			o := c.Origins["demo"]
			o.Timeout, o.MaxConcurrency, o.MaxRate = timeout, pc.MaxConcurrency, pc.MaxRate
			yamlInto(t, "{"+pc.Breaker+"}", &o.Breaker)
			yamlInto(t, "{"+pc.Cache+"}", &c.Routes[0].Cache)
		}),
		// After: 0s (off) is a value here, not "the default".
		exactly(func(c *config.Config) { c.Origins["demo"].SlowStart = slowStart }),
	}
	e.cfgPath = writeFile(t, "shield.yaml", e.cfg.render(t))
	e.startShield()
	return e
}

// fault sets the origin's fault mode.
func (e *env) fault(mode string) {
	e.t.Helper()
	e.originPost("/__origin/fault?mode=" + mode)
}

// metrics returns shield's /metrics text.
func (e *env) metrics() []byte {
	e.t.Helper()
	r, err := doHTTP(e.client, http.MethodGet, "http://"+e.cfg.Admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		e.t.Fatalf("GET /metrics: %v %v", r, err)
	}
	return r.body
}

// metricLines returns the series lines of /metrics whose name starts with
// one of prefixes, for the log.
func metricLines(text []byte, prefixes ...string) string {
	var out []string
	for line := range strings.SplitSeq(string(text), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// sumSamples adds the values of every series of metric whose labels
// include want (sample returns only the first).
func sumSamples(text []byte, metric string, want map[string]string) float64 {
	var sum float64
	for line := range strings.SplitSeq(string(text), "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		if v, ok := sample([]byte(metric+"{"+rest), metric, want); ok {
			sum += v
		}
	}
	return sum
}

// detail returns the detail parameter of shield's Cache-Status member,
// unquoted; "" when absent.
func detail(h http.Header) string {
	for member := range strings.SplitSeq(strings.Join(h.Values("Cache-Status"), ","), ",") {
		params := strings.Split(member, ";")
		if strings.TrimSpace(params[0]) != "shield" {
			continue
		}
		for _, p := range params[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "detail="); ok {
				return strings.Trim(v, `"`)
			}
		}
	}
	return ""
}

// kind is how shield answered, as far as origin protection cares.
type kind int

const (
	kindFresh  kind = iota // 200 hit from a fresh entry
	kindStale              // 200 hit with fwd=stale: a stale copy served
	kindOrigin             // 200 forwarded from the origin
	kindError              // 5xx (or 429) generated or passed on
	kindOther              // anything else: always a failure here
)

func (k kind) String() string {
	return [...]string{"fresh", "stale", "origin", "error", "other"}[k]
}

func classify(r result) kind {
	cs := parseCacheStatus(r.header)
	switch {
	case r.status == http.StatusOK && cs.hit && cs.fwd == "":
		return kindFresh
	case r.status == http.StatusOK && cs.hit && cs.fwd == "stale":
		return kindStale
	case r.status == http.StatusOK && !cs.hit && cs.fwd != "":
		return kindOrigin
	case r.status >= 500 || r.status == http.StatusTooManyRequests:
		return kindError
	}
	return kindOther
}

// wantStale fails unless r is a stale copy served with one of details.
func wantStale(t *testing.T, what string, r result, details ...string) {
	t.Helper()
	if classify(r) != kindStale {
		t.Errorf("%s: %v, want 200 with Cache-Status hit; fwd=stale", what, r)
		return
	}
	if d := detail(r.header); !slices.Contains(details, d) {
		t.Errorf("%s: Cache-Status %q, want detail in %q", what, r.header.Get("Cache-Status"), details)
	}
}

// wantUnavailable fails unless r is a 503 with a Retry-After and the
// Cache-Status detail want.
func wantUnavailable(t *testing.T, what string, r result, want string) {
	t.Helper()
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("%s: %v, want 503", what, r)
	}
	wantRetryAfter(t, what, r)
	if d := detail(r.header); d != want {
		t.Errorf("%s: Cache-Status %q, want detail=%s", what, r.header.Get("Cache-Status"), want)
	}
}

// wantRetryAfter fails unless r has a Retry-After of delay-seconds or an
// HTTP date (RFC 9110 §10.2.3).
func wantRetryAfter(t *testing.T, what string, r result) {
	t.Helper()
	v := r.header.Get("Retry-After")
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return
	}
	if _, err := http.ParseTime(v); err == nil {
		return
	}
	t.Errorf("%s: Retry-After %q, want delay-seconds or an HTTP date", what, v)
}

// pollUntil sends GET u every interval until done accepts the answer; it
// returns that answer and fails t after timeout.
func (e *env) pollUntil(u string, interval, timeout time.Duration, what string, done func(result) bool) result {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := e.get(u)
		if done(r) {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not seen within %v; last answer %v", what, timeout, r)
		}
		time.Sleep(interval)
	}
}

// awaitExpiry polls u until an answer is not a fresh hit, and returns it:
// the first request that found the entry stale.
func (e *env) awaitExpiry(u string, timeout time.Duration) result {
	e.t.Helper()
	return e.pollUntil(u, 20*time.Millisecond, timeout, "entry for "+u+" to go stale",
		func(r result) bool { return classify(r) != kindFresh })
}

// awaitOrigin polls the origin's counters until cond holds.
func (e *env) awaitOrigin(what string, cond func(originStats) bool) originStats {
	e.t.Helper()
	var s originStats
	eventually(e.t, what, func() bool {
		s = e.stats()
		return cond(s)
	})
	return s
}

// median of ds; 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// dateOf returns r's Date header, or fallback when it has none.
func dateOf(r result, fallback time.Time) time.Time {
	if d, err := http.ParseTime(r.header.Get("Date")); err == nil {
		return d
	}
	return fallback
}

// timed is one answer and when it was asked and received.
type timed struct {
	result
	sent, got time.Time
}

func (a timed) latency() time.Duration { return a.got.Sub(a.sent) }

// fanOut sends GET for every target at once and returns the answers in
// order; transport errors fail the test.
func (e *env) fanOut(targets []string) []timed {
	e.t.Helper()
	out := make([]timed, len(targets))
	errs := make([]error, len(targets))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, u := range targets {
		wg.Go(func() {
			<-start
			out[i].sent = time.Now()
			out[i].result, errs[i] = e.try(http.MethodGet, u)
			out[i].got = time.Now()
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// timedGet is get with its send and receive times.
func (e *env) timedGet(u string) timed {
	e.t.Helper()
	sent := time.Now()
	r := e.get(u)
	return timed{result: r, sent: sent, got: time.Now()}
}

// breakerState reads shield_breaker_state{origin="demo"}: 0 closed, 1
// half-open, 2 open; -1 when the series is missing.
func (e *env) breakerState() float64 {
	e.t.Helper()
	v, ok := sample(e.metrics(), "shield_breaker_state", map[string]string{"origin": "demo"})
	if !ok {
		return -1
	}
	return v
}

// countingTransport counts the requests a client sends to host.
// http.Transport may resend an idempotent request on its own when a
// kept-alive connection dies under it; such a resend is not counted here,
// so a server counting more requests than this saw a request twice.
type countingTransport struct {
	rt   http.RoundTripper
	host string
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == c.host {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(req)
}

// countRequests makes e's client count what it sends to shield's public
// listener.
func (e *env) countRequests() *countingTransport {
	ct := &countingTransport{rt: e.client.Transport, host: e.cfg.Listen}
	e.client.Transport = ct
	return ct
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (c *countingTransport) CloseIdleConnections() {
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
