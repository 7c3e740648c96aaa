package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// floodConfig: "flood" has a small rate, little concurrency and half the
// origin; "steady" has room for well over its 20 req/s.
const floodConfig = `routes:
  - { name: demo, hosts: ["*"], path_prefix: /, origin: demo }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 1000, burst: 1000, max_concurrency: 100 }
  classes:
    flood:  { rate: 50, burst: 50, max_concurrency: 10, origin_share: 0.5 }
    steady: { rate: 100, burst: 100, max_concurrency: 100 }
`

const (
	floodWorkers   = 50
	floodFor       = 5 * time.Second
	steadyEvery    = 50 * time.Millisecond // 20 req/s
	steadyAloneFor = 2 * time.Second
	floodOriginMax = 8 // flood's origin share: floor(0.5 × 8) = 4
)

// TestTenantFloodIsolation: while tenant "flood" hammers shield far above
// its limits (hits and slow cold keys from 50 workers), tenant "steady"
// at 20 req/s is never refused; flood is refused with 429 and
// Retry-After. steady's latency alone and under the flood is logged, not
// asserted.
func TestTenantFloodIsolation(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, floodOriginMax, floodConfig)
	hdrFlood := []string{"X-Tenant-ID", "flood"}
	hdrSteady := []string{"X-Tenant-ID", "steady"}
	wantForwarded(t, "warm flood's key", e.get("/flood/warm", hdrFlood...))
	wantForwarded(t, "warm steady's key", e.get("/steady/warm", hdrSteady...))

	alone := steadyLoad(e, "alone", steadyAloneFor, hdrSteady)

	var flood floodTally
	var wg sync.WaitGroup
	stop := time.Now().Add(floodFor)
	for w := range floodWorkers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				u := "/flood/warm"
				if i%4 == 0 { // a distinct slow cold key: holds concurrency and origin share
					u = target(fmt.Sprintf("/flood/cold/%d-%d", w, i), "delay", "300")
				}
				r, err := e.try(http.MethodGet, u, hdrFlood...)
				flood.add(r, err)
			}
		})
	}
	loaded := steadyLoad(e, "under-flood", floodFor, hdrSteady)
	wg.Wait()

	for _, s := range []*steadyResult{alone, loaded} {
		t.Logf("steady %s: %d requests, p50 %v, p99 %v, max %v", s.phase, len(s.latencies),
			latencyQuantile(s.latencies, 0.50), latencyQuantile(s.latencies, 0.99), latencyQuantile(s.latencies, 1))
		for _, f := range s.failures {
			t.Errorf("steady %s: %s", s.phase, f)
		}
	}
	t.Logf("flood: %d requests in %v (%.0f req/s): %d × 200, %d × 429, %d × 503 (origin share)",
		flood.total.Load(), floodFor, float64(flood.total.Load())/floodFor.Seconds(),
		flood.ok.Load(), flood.rejected.Load(), flood.share.Load())
	for _, f := range flood.failures() {
		t.Errorf("flood: %s", f)
	}
	if flood.rejected.Load() == 0 {
		t.Errorf("flood sent %d requests at rate 50 burst 50 and none was refused with 429", flood.total.Load())
	}

	m := e.scrapeTenants()
	steadyAdmitted := float64(1 + len(alone.latencies) + len(loaded.latencies))
	if got := seriesValue(m, "shield_admission_admitted_total", "tenant", "steady"); got != steadyAdmitted {
		t.Errorf(`shield_admission_admitted_total{tenant="steady"} = %v, want %v (every steady request)`, got, steadyAdmitted)
	}
	var floodRejected float64
	for _, reason := range []string{"rate", "concurrency", "origin_share"} {
		if got := seriesValue(m, "shield_admission_rejected_total", "tenant", "steady", "reason", reason); got != 0 {
			t.Errorf(`shield_admission_rejected_total{tenant="steady",reason=%q} = %v, want 0`, reason, got)
		}
		v := seriesValue(m, "shield_admission_rejected_total", "tenant", "flood", "reason", reason)
		t.Logf(`shield_admission_rejected_total{tenant="flood",reason=%q} = %v`, reason, v)
		floodRejected += v
	}
	if want := float64(flood.rejected.Load() + flood.share.Load()); floodRejected != want {
		t.Errorf("flood rejections in /metrics sum to %v, want %v (429s + origin-share 503s seen)", floodRejected, want)
	}
	if s := e.stats(); s.MaxInFlight > floodOriginMax {
		t.Errorf("origin max_in_flight = %d, want ≤ %d (origin max_concurrency)", s.MaxInFlight, floodOriginMax)
	}
	for _, tenant := range []string{"flood", "steady"} {
		eventually(t, tenant+" in-flight gauge back to 0", func() bool {
			v, ok := sample(e.scrapeTenants(), "shield_tenant_in_flight", map[string]string{"tenant": tenant})
			return ok && v == 0
		})
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", e.scrapeTenants())
	}
}

// steadyResult is one paced run of the steady tenant.
type steadyResult struct {
	phase     string
	latencies []time.Duration
	failures  []string
}

// steadyLoad sends one request every steadyEvery for d, open loop (a slow
// answer does not delay the next request, so latency is not hidden), and
// waits for every answer. Every fifth request is a cold key; the rest hit
// /steady/warm. It uses its own connections, as a separate client would.
func steadyLoad(e *env, phase string, d time.Duration, hdr []string) *steadyResult {
	client := newClient()
	defer client.CloseIdleConnections()
	res := &steadyResult{phase: phase}
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(steadyEvery)
	defer tick.Stop()
	stop := time.After(d)
	for i := 0; ; i++ {
		u := "/steady/warm"
		if i%5 == 0 {
			u = fmt.Sprintf("/steady/cold/%s/%d", phase, i)
		}
		wg.Go(func() {
			start := time.Now()
			r, err := doHTTP(client, http.MethodGet, "http://"+e.cfg.Listen+u, hdr...)
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				res.failures = append(res.failures, err.Error())
			case r.status != http.StatusOK:
				res.failures = append(res.failures, fmt.Sprintf("GET %s: %v, want 200", u, r))
			}
			res.latencies = append(res.latencies, took)
		})
		select {
		case <-tick.C:
		case <-stop:
			wg.Wait()
			return res
		}
	}
}

// floodTally counts the flood's answers and keeps the first few
// unexpected ones.
type floodTally struct {
	total, ok, rejected, share atomic.Int64
	mu                         sync.Mutex
	bad                        []string
	nbad                       int
}

// add classifies one answer: 200, an admission 429, or a 503 for the
// origin share are expected; anything else is a failure.
func (f *floodTally) add(r result, err error) {
	f.total.Add(1)
	var bad string
	switch {
	case err != nil:
		bad = err.Error()
	case r.status == http.StatusOK:
		f.ok.Add(1)
	case r.status == http.StatusTooManyRequests:
		f.rejected.Add(1)
		bad = checkRejected(r, "flood", "rate", "concurrency")
	case r.status == http.StatusServiceUnavailable:
		f.share.Add(1)
		bad = checkOriginShare(r)
	default:
		bad = "unexpected answer " + r.String()
	}
	if bad == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nbad++
	if len(f.bad) < 10 {
		f.bad = append(f.bad, bad)
	}
}

func (f *floodTally) failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nbad > len(f.bad) {
		return append(f.bad, fmt.Sprintf("... %d failures in all", f.nbad))
	}
	return f.bad
}
