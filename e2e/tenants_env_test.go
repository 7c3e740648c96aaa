package e2e

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// tenantConfig is the config of a tenant test: the fixed head below, then
// the test's own routes and tenants sections (Body, raw YAML).
// newTenantEnv is newEnv for a config with routes and tenants of the
// test's choosing (body holds the routes: and tenants: sections). The
// shieldConfig template has one fixed route, so it cannot express
// per-route tenants or tenant-scoped caching.
func newTenantEnv(t *testing.T, originMax int, body string) *env {
	t.Helper()
	e := &env{t: t, originAddr: freeAddr(t), client: newClient()}
	t.Cleanup(e.client.CloseIdleConnections)
	e.origin = startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", e.originAddr)
	e.origin.waitReady(t, "http://"+e.originAddr+"/__origin/stats")

	e.cfg = shieldConfig{Listen: freeAddr(t), Admin: freeAddr(t), Origin: e.originAddr, Extra: []confOpt{
		with(func(c *config.Config) {
			c.Origins["demo"].Timeout = 5 * time.Second
			c.Origins["demo"].MaxConcurrency = originMax
		}),
		yamlSection(body), // last: withTenantBody replaces it
	}}
	e.cfgPath = writeFile(t, "shield.yaml", e.cfg.render(t))
	e.startShield()
	return e
}

// withTenantBody is c, a newTenantEnv config, with body in place of the
// routes and tenants sections it was built with.
func (c shieldConfig) withTenantBody(body string) shieldConfig {
	c.Extra = append(slices.Clone(c.Extra[:len(c.Extra)-1]), yamlSection(body))
	return c
}

// scrapeTenants returns shield's /metrics text.
func (e *env) scrapeTenants() []byte {
	e.t.Helper()
	r, err := doHTTP(e.client, http.MethodGet, "http://"+e.cfg.Admin+"/metrics")
	if err != nil || r.status != http.StatusOK {
		e.t.Fatalf("GET /metrics: %v %v", r, err)
	}
	return r.body
}

// seriesValue returns one series' value, 0 when the series is absent (a
// counter that never moved may not be exported).
func seriesValue(text []byte, name string, labels ...string) float64 {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	v, _ := sample(text, name, want)
	return v
}

// series formats a metric name and label pairs as Prometheus writes them.
func series(name string, labels ...string) string {
	var sb strings.Builder
	sb.WriteString(name + "{")
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(labels[i] + "=" + strconv.Quote(labels[i+1]))
	}
	return sb.String() + "}"
}

// rejectionBody is shield's JSON body of a 429.
type rejectionBody struct {
	Error      string `json:"error"`
	Tenant     string `json:"tenant"`
	Reason     string `json:"reason"`
	RetryAfter int    `json:"retry_after"`
}

// retryAfterSeconds returns the Retry-After header as whole seconds ≥ 1, or an
// explanation of what is wrong with it.
func retryAfterSeconds(r result) (int, string) {
	v := r.header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, "Retry-After " + strconv.Quote(v) + " is not an integer number of seconds ≥ 1"
	}
	return n, ""
}

// checkRejected returns what is wrong with r as a 429 from admission for
// tenant with one of reasons; a tenant of "" accepts any.
func checkRejected(r result, tenant string, reasons ...string) string {
	if r.status != http.StatusTooManyRequests {
		return "status " + strconv.Itoa(r.status) + ", want 429 (" + r.String() + ")"
	}
	n, bad := retryAfterSeconds(r)
	if bad != "" {
		return bad
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return "Content-Type " + strconv.Quote(ct) + ", want application/json"
	}
	var body rejectionBody
	if err := json.Unmarshal(r.body, &body); err != nil {
		return "body " + strconv.Quote(string(r.body)) + " is not JSON: " + err.Error()
	}
	switch {
	case body.Error != "too many requests":
		return "body error " + strconv.Quote(body.Error) + `, want "too many requests"`
	case tenant != "" && body.Tenant != tenant:
		return "body tenant " + strconv.Quote(body.Tenant) + ", want " + strconv.Quote(tenant)
	case !slices.Contains(reasons, body.Reason):
		return "body reason " + strconv.Quote(body.Reason) + ", want one of " + strings.Join(reasons, ", ")
	case body.RetryAfter != n:
		return "body retry_after " + strconv.Itoa(body.RetryAfter) + " differs from Retry-After " + strconv.Itoa(n)
	}
	return ""
}

// wantRejected fails unless r is an admission 429 for tenant and reason.
func wantRejected(t *testing.T, what string, r result, tenant, reason string) {
	t.Helper()
	if bad := checkRejected(r, tenant, reason); bad != "" {
		t.Errorf("%s: %s", what, bad)
	}
}

// shieldDetail returns the detail parameter of shield's Cache-Status
// member, unquoted ("" when absent).
func shieldDetail(h http.Header) string {
	for member := range strings.SplitSeq(strings.Join(h.Values("Cache-Status"), ","), ",") {
		params := strings.Split(member, ";")
		if strings.TrimSpace(params[0]) != "shield" {
			continue
		}
		for _, p := range params[1:] {
			if name, value, _ := strings.Cut(strings.TrimSpace(p), "="); name == "detail" {
				return strings.Trim(value, `"`)
			}
		}
	}
	return ""
}

// checkOriginShare returns what is wrong with r as a 503 refused for the
// tenant's origin share.
func checkOriginShare(r result) string {
	if r.status != http.StatusServiceUnavailable {
		return "status " + strconv.Itoa(r.status) + ", want 503 (" + r.String() + ")"
	}
	if _, bad := retryAfterSeconds(r); bad != "" {
		return bad
	}
	if d := shieldDetail(r.header); d != "origin-share" {
		return "Cache-Status " + strconv.Quote(r.header.Get("Cache-Status")) + ", want detail=origin-share"
	}
	return ""
}

// latencyQuantile returns the q-quantile (0 < q ≤ 1) of d by nearest rank; d
// is sorted in place.
func latencyQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[max(i, 0)]
}

func TestLatencyQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	var hundredDown []time.Duration // 100ms, 99ms, ..., 1ms
	for i := 100; i >= 1; i-- {
		hundredDown = append(hundredDown, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ms(5, 1, 3), 0.5, 3 * time.Millisecond},
		{"median of even is the lower", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", hundredDown, 0.99, 99 * time.Millisecond},
		{"p50 of 100 is the 50th", slices.Clone(hundredDown), 0.5, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := latencyQuantile(tt.in, tt.q); got != tt.want {
				t.Errorf("latencyQuantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

func TestCheckRejected(t *testing.T) {
	h := func(kv ...string) http.Header {
		hd := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			hd.Set(kv[i], kv[i+1])
		}
		return hd
	}
	good := result{status: 429, header: h("Retry-After", "2", "Content-Type", "application/json"),
		body: []byte(`{"error":"too many requests","tenant":"acme","reason":"rate","retry_after":2}`)}
	tests := []struct {
		name string
		r    result
		ok   bool
	}{
		{"good", good, true},
		{"not 429", result{status: 200, header: good.header, body: good.body}, false},
		{"no retry-after", result{status: 429, header: h("Content-Type", "application/json"), body: good.body}, false},
		{"retry-after zero", result{status: 429, header: h("Retry-After", "0", "Content-Type", "application/json"), body: good.body}, false},
		{"retry-after date", result{status: 429, header: h("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT", "Content-Type", "application/json"), body: good.body}, false},
		{"text body", result{status: 429, header: h("Retry-After", "2", "Content-Type", "text/plain"), body: []byte("slow down")}, false},
		{"other tenant", result{status: 429, header: good.header, body: []byte(`{"error":"too many requests","tenant":"x","reason":"rate","retry_after":2}`)}, false},
		{"other reason", result{status: 429, header: good.header, body: []byte(`{"error":"too many requests","tenant":"acme","reason":"concurrency","retry_after":2}`)}, false},
		{"body disagrees", result{status: 429, header: good.header, body: []byte(`{"error":"too many requests","tenant":"acme","reason":"rate","retry_after":1}`)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := checkRejected(tt.r, "acme", "rate")
			if (bad == "") != tt.ok {
				t.Errorf("checkRejected = %q, want ok=%v", bad, tt.ok)
			}
		})
	}
}
