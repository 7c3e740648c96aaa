package e2e

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestBreakerOpen: with the origin down (503 on every path, connections
// reset, or a 500 on every path where failure_statuses lists 500),
// uncached keys fail fast until the breaker trips; then they get 503 + Retry-After at once and the
// origin sees nothing but the half-open probes, a cached key is served
// stale, and once the origin is back a probe closes the breaker.
func TestBreakerOpen(t *testing.T) {
	t.Parallel()
	const (
		failures = 3
		openFor  = 3 * time.Second // ≥ 2s more than the cached key's max-age=1, so its check sees the breaker open
		probes   = 1
		outage   = 6 * time.Second // steady load while the origin stays down
		workers  = 4
		pace     = 10 * time.Millisecond // per worker
	)
	tests := []struct {
		name, mode string
		retried    bool   // connection failures may be retried once: up to 2 origin requests per fetch
		breaker    string // more breaker settings
	}{
		{"503", "unavailable", false, ""},
		{"500 in failure_statuses", "error", false, ", failure_statuses: [500, 502, 503, 504]"},
		{"connection reset", "reset", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newProtectEnv(t, protectConfig{
				Breaker: fmt.Sprintf("consecutive_failures: %d, open_for: %v, half_open_probes: %d", failures, openFor, probes) + tt.breaker,
			})
			cached := target("/cached", "cc", "max-age=1, stale-if-error=60")
			wantForwarded(t, "caching a key", e.get(cached))
			e.fault(tt.mode)

			// Trip.
			var failed []timed
			var opened timed
			for i := 0; ; i++ {
				if i > 5*failures {
					t.Fatalf("breaker not open after %d failed fetches; last %v", i, failed[len(failed)-1].result)
				}
				a := e.timedGet(fmt.Sprintf("/cold/%d", i))
				if detail(a.header) == "breaker-open" {
					opened = a
					break
				}
				if classify(a.result) != kindError {
					t.Errorf("cold key %d with the origin down: %v, want a 5xx", i, a.result)
				}
				failed = append(failed, a)
			}
			if n := len(failed); n > failures || n < 1 || (!tt.retried && n != failures) {
				t.Errorf("breaker opened after %d failed requests, want %d", n, failures)
			}
			wantUnavailable(t, "first answer once open", opened.result, "breaker-open")
			if st := e.breakerState(); st != 2 {
				t.Errorf("shield_breaker_state{origin=demo} = %v once open, want 2", st)
			}

			// A cached key is served stale, without an origin call.
			before := e.stats().Total
			r := e.awaitExpiry(cached, 3*time.Second)
			wantStale(t, "cached key while open", r, "breaker-open")
			if got := e.stats().Total; got != before {
				t.Errorf("serving the cached key while open made %d origin requests, want 0", got-before)
			}

			// Outage under steady load.
			s0 := e.stats()
			loadStart := time.Now()
			perWorker := make([][]timed, workers)
			errs := make([]error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					tick := time.NewTicker(pace)
					defer tick.Stop()
					for i := 0; time.Since(loadStart) < outage; i++ {
						sent := time.Now()
						r, err := e.try(http.MethodGet, fmt.Sprintf("/load/%d/%d", w, i))
						if err != nil {
							errs[w] = err
							return
						}
						perWorker[w] = append(perWorker[w], timed{result: r, sent: sent, got: time.Now()})
						<-tick.C
					}
				})
			}
			wg.Wait()
			loadEnd := time.Now()
			s1 := e.stats()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}

			var rejected []time.Duration
			seenProbes, bad := 0, 0
			for _, as := range perWorker {
				for _, a := range as {
					if classify(a.result) != kindError {
						t.Errorf("cold key during the outage: %v, want 503 or a failed probe", a.result)
						continue
					}
					if detail(a.header) != "breaker-open" {
						seenProbes++
						continue
					}
					rejected = append(rejected, a.latency())
					if bad < 3 && (a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "") {
						bad++
						wantUnavailable(t, "cold key while open", a.result, "breaker-open")
					}
				}
			}
			originReqs := s1.Total - s0.Total
			if tt.retried {
				if originReqs < int64(seenProbes) || originReqs > 2*int64(seenProbes) {
					t.Errorf("origin saw %d requests during the outage for %d probes, want between %d and %d",
						originReqs, seenProbes, seenProbes, 2*seenProbes)
				}
			} else if originReqs != int64(seenProbes) {
				t.Errorf("origin saw %d requests during the outage, want %d (exactly the probes)", originReqs, seenProbes)
			}
			maxProbes := probes * (int(loadEnd.Sub(opened.sent)/openFor) + 1)
			if seenProbes < 1 || seenProbes > maxProbes {
				t.Errorf("%d probes reached the origin in %v of outage (open_for %v), want 1..%d",
					seenProbes, loadEnd.Sub(opened.sent).Round(time.Millisecond), openFor, maxProbes)
			}
			var failLat []time.Duration
			for _, a := range failed {
				failLat = append(failLat, a.latency())
			}
			retries, ok := sample(e.metrics(), "shield_origin_retries_total", map[string]string{"origin": "demo"})
			if !ok {
				t.Error(`shield_origin_retries_total{origin="demo"} missing from /metrics`)
			}
			t.Logf("%s: breaker opened after %d failures (median %v each, %d origin requests incl. the cached key's fetch, %v retries so far); open 503s: median %v over %d; outage %v: %d client requests, %d origin requests (%d probes)",
				tt.name, len(failed), median(failLat), s0.Total, retries, median(rejected), len(rejected),
				loadEnd.Sub(loadStart).Round(time.Millisecond), len(rejected)+seenProbes, originReqs, seenProbes)

			// Recovery.
			e.fault("ok")
			recStart := time.Now()
			e.pollUntil("/recover", 50*time.Millisecond, openFor+5*time.Second, "a success once the origin is back",
				func(r result) bool { return r.status == http.StatusOK })
			t.Logf("%s: recovered %v after the origin came back", tt.name, time.Since(recStart).Round(time.Millisecond))
			m := e.metrics()
			if st, _ := sample(m, "shield_breaker_state", map[string]string{"origin": "demo"}); st != 0 {
				t.Errorf("shield_breaker_state{origin=demo} = %v after recovery, want 0", st)
			}
			for _, tr := range []struct {
				to  string
				min float64
			}{{"open", 2}, {"closed", 1}} { // trip, a failed probe re-opens; a good one closes
				if v, _ := sample(m, "shield_breaker_transitions_total", map[string]string{"origin": "demo", "to": tr.to}); v < tr.min {
					t.Errorf(`shield_breaker_transitions_total{origin="demo",to=%q} = %v, want ≥ %v`, tr.to, v, tr.min)
				}
			}
			if t.Failed() {
				t.Logf("metrics:\n%s", metricLines(m, "shield_breaker", "shield_stale_served_total"))
			}
		})
	}
}

// TestSlowStartAfterRecovery: right after the breaker closes, a burst of
// cold requests meets a concurrency budget ramping from 10% of
// max_concurrency, not the full budget: the origin's peak concurrency
// stays within the ramped limit and the surplus gets 503 (budget).
func TestSlowStartAfterRecovery(t *testing.T) {
	t.Parallel()
	const (
		budget    = 20
		slowStart = 10 * time.Second
		burst     = 40
	)
	e := newProtectEnv(t, protectConfig{
		MaxConcurrency: budget,
		SlowStart:      slowStart.String(),
		Breaker:        "consecutive_failures: 2, open_for: 1s, half_open_probes: 1",
	})
	// 503: an unavailable origin, which the breaker counts by default
	// (failure_statuses); an application's 500 would not open it.
	e.fault("unavailable")
	for i := 0; detail(e.get(fmt.Sprintf("/trip/%d", i)).header) != "breaker-open"; i++ {
		if i > 10 {
			t.Fatal("breaker not open after 10 failed fetches")
		}
	}
	e.fault("ok")
	var probe timed
	deadline := time.Now().Add(5 * time.Second)
	for probe = e.timedGet("/probe"); probe.status != http.StatusOK; probe = e.timedGet("/probe") {
		if time.Now().After(deadline) {
			t.Fatalf("no success 5s after the origin came back; last %v", probe.result)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := e.breakerState(); st != 0 {
		t.Errorf("shield_breaker_state{origin=demo} = %v after a good probe, want 0", st)
	}

	e.originPost("/__origin/reset")
	urls := make([]string, burst)
	for i := range urls {
		urls[i] = target("/burst", "i", fmt.Sprint(i), "delay", "500")
	}
	answers := e.fanOut(urls)
	burstEnd := time.Now()
	s := e.stats()

	// The breaker closed after the probe was sent: the ramp can be no
	// further along than it would be from then.
	since := burstEnd.Sub(probe.sent)
	limit := int(math.Ceil(budget * min(1, 0.1+0.9*since.Seconds()/slowStart.Seconds())))
	ok := 0
	for i, a := range answers {
		if a.status == http.StatusOK {
			ok++
			continue
		}
		wantUnavailable(t, fmt.Sprintf("burst request %d", i), a.result, "queue-timeout")
	}
	if s.MaxInFlight < 1 || s.MaxInFlight > int64(limit) {
		t.Errorf("origin peak concurrency %d, want 1..%d (slow start %v after closing, budget %d)", s.MaxInFlight, limit, since.Round(time.Millisecond), budget)
	}
	if s.Total != int64(ok) {
		t.Errorf("origin saw %d requests for %d successes: rejected requests reached it", s.Total, ok)
	}
	t.Logf("slow start: burst of %d %v after the closing probe: origin peak %d in flight (ramped limit ≤ %d, budget %d); %d served, %d rejected",
		burst, since.Round(time.Millisecond), s.MaxInFlight, limit, budget, ok, burst-ok)
}

// TestOriginBudget: max_concurrency bounds the origin's in-flight fetches;
// cold requests beyond it get 503 + Retry-After (queue-timeout: no slot
// within the default queue_timeout) without reaching the origin, and a
// stale copy is served instead where there is one.
// max_rate bounds fetches per second the same way.
func TestOriginBudget(t *testing.T) {
	t.Parallel()
	const budget = 2
	e := newProtectEnv(t, protectConfig{Timeout: "5s", MaxConcurrency: budget})

	t.Run("cold burst", func(t *testing.T) {
		e := e.on(t)
		const n = 10
		urls := make([]string, n)
		for i := range urls {
			urls[i] = target("/budget", "i", fmt.Sprint(i), "delay", "500")
		}
		answers := e.fanOut(urls)
		s := e.stats()
		ok, rejected := 0, 0
		var lat []time.Duration
		for i, a := range answers {
			if a.status == http.StatusOK {
				ok++
				continue
			}
			rejected++
			lat = append(lat, a.latency())
			wantUnavailable(t, fmt.Sprintf("request %d", i), a.result, "queue-timeout")
		}
		if s.MaxInFlight < 1 || s.MaxInFlight > budget {
			t.Errorf("origin peak concurrency %d, want 1..%d", s.MaxInFlight, budget)
		}
		if ok < 1 || rejected < 1 {
			t.Errorf("%d served, %d rejected; want both ≥ 1", ok, rejected)
		}
		if s.Total != int64(ok) {
			t.Errorf("origin saw %d requests for %d successes: rejected requests reached it", s.Total, ok)
		}
		if v := sumSamples(e.metrics(), "shield_origin_budget_rejections_total", map[string]string{"origin": "demo"}); v != float64(rejected) {
			t.Errorf("shield_origin_budget_rejections_total{origin=demo} = %v, want %d", v, rejected)
		}
		t.Logf("budget %d: %d concurrent cold requests → origin peak %d, %d served, %d rejected (median rejection %v)",
			budget, n, s.MaxInFlight, ok, rejected, median(lat))
	})

	t.Run("stale when spent", func(t *testing.T) {
		e := e.on(t)
		u := target("/budget-stale", "cc", "max-age=1, stale-if-error=30")
		wantForwarded(t, "first GET", e.get(u))

		// Hold the whole budget with slow fetches.
		var wg sync.WaitGroup
		for i := range budget {
			wg.Go(func() { _, _ = e.try(http.MethodGet, target("/hold", "i", fmt.Sprint(i), "delay", "3000")) })
		}
		defer wg.Wait()
		e.awaitOrigin("the budget to be held", func(s originStats) bool { return s.InFlight == budget })
		if v, _ := sample(e.metrics(), "shield_origin_in_flight", map[string]string{"origin": "demo"}); v != budget {
			t.Errorf("shield_origin_in_flight{origin=demo} = %v, want %d", v, budget)
		}
		r := e.awaitExpiry(u, 2*time.Second)
		wantStale(t, "expired key with the budget spent", r, "queue-timeout")
		e.wantOriginCount("/budget-stale", 1)
		wantUnavailable(t, "cold key with the budget spent", e.get("/budget-cold"), "queue-timeout")
		e.wantOriginCount("/budget-cold", 0)
	})
}

// TestOriginRate: max_rate bounds fetches per second; requests beyond it
// get 503 (budget) without reaching the origin.
func TestOriginRate(t *testing.T) {
	t.Parallel()
	e := newProtectEnv(t, protectConfig{MaxRate: 2})
	const n = 10
	start := time.Now()
	ok, rejected := 0, 0
	for i := range n {
		r := e.get(fmt.Sprintf("/rate/%d", i))
		if r.status == http.StatusOK {
			ok++
			continue
		}
		rejected++
		wantUnavailable(t, fmt.Sprintf("request %d", i), r, "budget")
	}
	took := time.Since(start)
	if s := e.stats(); s.Total != int64(ok) {
		t.Errorf("origin saw %d requests for %d successes: rejected requests reached it", s.Total, ok)
	}
	// 10 requests far faster than 2/s: some must be refused (unless the
	// run was so slow that the rate allowed them all).
	if rejected == 0 && took < 4*time.Second {
		t.Errorf("all %d cold requests in %v were fetched with max_rate 2/s", n, took.Round(time.Millisecond))
	}
	t.Logf("max_rate 2/s: %d cold requests in %v → %d fetched, %d rejected", n, took.Round(time.Millisecond), ok, rejected)
}
