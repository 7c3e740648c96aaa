package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestStaleIfErrorWindow: with the origin down, a cached key keeps
// answering 200 stale for its whole stale-if-error window, measured from
// the end of freshness and not restarted by the failed refreshes, and not
// a second longer. A 429 counts as an origin failure only on a route with
// stale_on_429.
//
// Freshness ends at Date+max-age at the earliest (Date is whole seconds,
// at or before the response) and at receipt+max-age at the latest, so the
// test demands stale answers until the earliest end + window - 1s and an
// error from the latest end + window + 1s.
func TestStaleIfErrorWindow(t *testing.T) {
	t.Parallel()
	const (
		maxAge = time.Second
		window = 4 * time.Second
	)
	tests := []struct {
		name    string
		mode    string   // the origin's fault
		timeout string   // origin timeout; "" = 2s
		cache   string   // route cache settings
		details []string // allowed Cache-Status details of a stale answer; none: never stale
		status  int      // the error status once not stale; 0: any 5xx
	}{
		{name: "5xx", mode: "error", details: []string{"origin-5xx", "breaker-open"}},
		{name: "connection reset", mode: "reset", details: []string{"error", "breaker-open"}},
		{name: "timeout", mode: "hang", timeout: "500ms", details: []string{"timeout", "breaker-open"}},
		{name: "429 with stale_on_429", mode: "throttle", cache: "stale_on_429: true", details: []string{"origin-429"}},
		{name: "429 by default", mode: "throttle", status: http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newProtectEnv(t, protectConfig{Timeout: tt.timeout, Cache: tt.cache})
			u := target("/sie", "cc", fmt.Sprintf("max-age=%d, stale-if-error=%d", maxAge/time.Second, window/time.Second))
			first := e.timedGet(u)
			wantForwarded(t, "first GET", first.result)
			e.fault(tt.mode)

			freshEndMin := dateOf(first.result, first.sent).Add(maxAge)
			freshEndMax := first.got.Add(maxAge)
			if len(tt.details) == 0 {
				r := e.awaitExpiry(u, 2*maxAge+time.Second)
				if classify(r) != kindError || r.status != tt.status {
					t.Errorf("first answer after freshness: %v, want %d and not stale", r, tt.status)
				}
				return
			}
			staleUntil := freshEndMin.Add(window - time.Second)
			errorFrom := freshEndMax.Add(window + time.Second)

			var answers []timed
			ticker := time.NewTicker(100 * time.Millisecond)
			defer ticker.Stop()
			for deadline := errorFrom.Add(3 * time.Second); ; <-ticker.C {
				a := e.timedGet(u)
				answers = append(answers, a)
				if classify(a.result) == kindError && !a.sent.Before(errorFrom) {
					break
				}
				if a.got.After(deadline) {
					t.Fatalf("no error answer between %v and %v after the first fetch; last %v",
						errorFrom.Sub(first.got), deadline.Sub(first.got), a)
				}
			}

			var firstStale, lastStale, firstError time.Time
			byDetail := map[string]int{}
			for i, a := range answers {
				k := classify(a.result)
				at := a.got.Sub(first.got).Round(time.Millisecond)
				switch {
				case k == kindStale:
					wantStale(t, fmt.Sprintf("answer %d at +%v", i, at), a.result, tt.details...)
					byDetail[detail(a.header)]++
					if firstStale.IsZero() {
						firstStale = a.got
					}
					lastStale = a.got
					if !firstError.IsZero() {
						t.Errorf("answer %d at +%v is stale after an error at +%v: the window reopened", i, at, firstError.Sub(first.got))
					}
				case k == kindError:
					if tt.status != 0 && a.status != tt.status {
						t.Errorf("answer %d at +%v: %v, want %d", i, at, a.result, tt.status)
					}
					if firstError.IsZero() {
						firstError = a.sent
						t.Logf("first error (asked at +%v): %v", a.sent.Sub(first.got).Round(time.Millisecond), a.result)
					}
					if !a.got.After(staleUntil) {
						t.Errorf("answer %d at +%v: %v, want stale until +%v (end of freshness + window - 1s)",
							i, at, a.result, staleUntil.Sub(first.got))
					}
				case k == kindFresh:
					if !firstStale.IsZero() || !firstError.IsZero() {
						t.Errorf("answer %d at +%v is a fresh hit after freshness ended: %v", i, at, a.result)
					}
				default:
					t.Errorf("answer %d at +%v: %v, want a fresh or stale hit or an error", i, at, a.result)
				}
			}
			if firstStale.IsZero() {
				t.Fatalf("no stale answer among %d", len(answers))
			}
			t.Logf("%s: %d answers; stale from +%v to +%v (%v); first error asked at +%v; expected window end in [+%v, +%v]; details %v",
				tt.name, len(answers), firstStale.Sub(first.got).Round(time.Millisecond), lastStale.Sub(first.got).Round(time.Millisecond),
				lastStale.Sub(firstStale).Round(time.Millisecond), firstError.Sub(first.got).Round(time.Millisecond),
				freshEndMin.Add(window).Sub(first.got).Round(time.Millisecond), freshEndMax.Add(window).Sub(first.got).Round(time.Millisecond), byDetail)
			if n := sumSamples(e.metrics(), "shield_stale_served_total", map[string]string{"route": "demo"}); int(n) != len(answers)-countKind(answers, kindFresh, kindError) {
				t.Errorf("shield_stale_served_total{route=demo} = %v, want %d (the stale answers)", n, len(answers)-countKind(answers, kindFresh, kindError))
			}
		})
	}
}

func countKind(as []timed, kinds ...kind) int {
	n := 0
	for _, a := range as {
		k := classify(a.result)
		for _, want := range kinds {
			if k == want {
				n++
			}
		}
	}
	return n
}

// TestNeverStale: responses that forbid stale service (must-revalidate,
// proxy-revalidate, no-cache) are not served stale when the origin is
// down, even where the response or the route grants a stale-if-error
// window; a plain response on the same route is, so the test can fail.
func TestNeverStale(t *testing.T) {
	t.Parallel()
	e := newProtectEnv(t, protectConfig{Cache: "stale_if_error: 30s"})
	tests := []struct {
		name, cc string
		stale    bool
	}{
		{"must-revalidate", "max-age=1, must-revalidate, stale-if-error=30", false},
		{"proxy-revalidate", "max-age=1, proxy-revalidate, stale-if-error=30", false},
		{"no-cache", "no-cache, stale-if-error=30", false},
		{"must-revalidate with route default", "max-age=1, must-revalidate", false},
		{"plain with route default", "max-age=1", true},
		{"plain with own window", "max-age=1, stale-if-error=30", true},
	}
	urls := make([]string, len(tests))
	for i, tt := range tests {
		urls[i] = target(fmt.Sprintf("/never-stale/%d", i), "cc", tt.cc)
		wantForwarded(t, tt.name+" first GET", e.get(urls[i]))
	}
	e.fault("error")
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			for try := range 2 {
				r := e.awaitExpiry(urls[i], 3*time.Second)
				what := fmt.Sprintf("answer %d after freshness", try+1)
				if tt.stale {
					wantStale(t, what, r, "origin-5xx", "breaker-open")
					continue
				}
				if classify(r) != kindError {
					t.Errorf("%s: %v, want a 5xx, never a stale copy", what, r)
				}
			}
		})
	}
}

// TestStaleWhileRevalidate: once an entry is stale inside its
// stale-while-revalidate window, 100 concurrent clients are all answered
// from the stale copy while exactly one background refresh runs; they do
// not wait for it (it is still at the origin when they all have their
// answers), and afterwards the refreshed entry is a fresh hit.
func TestStaleWhileRevalidate(t *testing.T) {
	t.Parallel()
	e := newProtectEnv(t, protectConfig{Timeout: "5s"})
	sent := e.countRequests()
	const clients = 100
	// The refresh is slow so the clients can be seen not to wait for it;
	// max-age exceeds the delay because RFC 9111 ages a response by its
	// response delay: a 3s fetch of max-age=5 is fresh for 2s.
	u := target("/swr", "cc", "max-age=5, stale-while-revalidate=30", "delay", "3000")
	orig := e.get(u)
	wantForwarded(t, "first GET", orig)

	start := time.Now()
	freshPolls := 0
	trigger := e.pollUntil(u, 20*time.Millisecond, 4*time.Second, "the entry to go stale", func(r result) bool {
		if classify(r) == kindFresh {
			freshPolls++
			return false
		}
		return true
	})
	wantStale(t, "first stale GET", trigger, "stale-while-revalidate")
	waveStart := time.Now()
	wave := e.concurrent(clients, http.MethodGet, u)
	waveTime := time.Since(waveStart)
	s := e.stats()

	for i, r := range wave {
		wantStale(t, fmt.Sprintf("client %d", i), r, "stale-while-revalidate")
		if !bytes.Equal(r.body, orig.body) {
			t.Fatalf("client %d body %q, want the stored body %q", i, r.body, orig.body)
		}
	}
	// The refresh takes 3s at the origin: had the clients waited for
	// it, it would be over by now. (On a loaded machine it may not even
	// have arrived yet.)
	if n := s.ByPath["/swr"]; n > 2 || n == 2 && s.InFlight == 0 {
		t.Errorf("after the wave the origin saw %d requests for /swr with %d in flight; want ≤ 2 (fetch + one refresh), the refresh not finished (nobody waited for it)",
			n, s.InFlight)
	}
	t.Logf("swr: stale after %v; %d clients answered in %v while the 3s refresh ran",
		waveStart.Sub(start).Round(time.Millisecond), clients, waveTime.Round(time.Millisecond))

	e.awaitOrigin("the refresh to finish", func(s originStats) bool { return s.ByPath["/swr"] >= 2 && s.InFlight == 0 })
	// Until shield has stored the refreshed copy, the old one is still
	// served stale (without a second refresh).
	stales := 1 + clients
	after := e.pollUntil(u, 20*time.Millisecond, 2*time.Second, "the refreshed entry", func(r result) bool {
		if classify(r) == kindStale {
			stales++
			return false
		}
		return true
	})
	if classify(after) != kindFresh {
		t.Errorf("after the refresh: %v, want a fresh hit", after)
	}
	if n := decode(t, after).N; n != 2 {
		t.Errorf("after the refresh: body n=%d, want 2 (the refreshed copy)", n)
	}
	e.wantOriginCount("/swr", 2)
	toShield := sent.n.Load()
	m := e.metrics()
	if n := sumSamples(m, "shield_requests_total", map[string]string{"route": "demo"}); n != float64(toShield) {
		t.Errorf("shield_requests_total{route=demo} = %v, but the client sent %d requests", n, toShield)
	}
	if n := sumSamples(m, "shield_stale_served_total", map[string]string{"route": "demo", "reason": "stale-while-revalidate"}); n != clients+1 {
		t.Errorf(`shield_stale_served_total{route="demo",reason="stale-while-revalidate"} = %v, want %d`, n, clients+1)
	}
	// The entry has no validator: the refresh is a plain GET and its 200
	// replaces the entry.
	if n, _ := sample(m, "shield_revalidations_total", map[string]string{"origin": "demo", "result": "modified"}); n != 1 {
		t.Errorf(`shield_revalidations_total{origin="demo",result="modified"} = %v, want 1 (the refresh)`, n)
	}
	if t.Failed() {
		t.Logf("client saw: %d fresh before the trigger, %d stale, then %v", freshPolls, stales, after)
		t.Logf("metrics:\n%s", metricLines(m, "shield_revalidations_total", "shield_stale_served_total", "shield_requests_total"))
	}
}

// TestRevalidation304: an expired entry with a validator is refreshed
// with a conditional request; the origin's 304 renews the stored entry
// without a body, so the body served afterwards is the original one and
// the next request is a fresh hit.
func TestRevalidation304(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		validator  string // etag or lm
		background bool   // stale-while-revalidate: the refresh runs behind a stale answer
	}{
		{"etag", "etag", false},
		{"last-modified", "lm", false},
		{"etag in background", "etag", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newProtectEnv(t, protectConfig{})
			cc := "max-age=2"
			if tt.background {
				cc += ", stale-while-revalidate=30"
			}
			u := target("/reval", "cc", cc, tt.validator, "1")
			orig := e.get(u)
			wantForwarded(t, "first GET", orig)

			r := e.awaitExpiry(u, 4*time.Second)
			if tt.background {
				wantStale(t, "first GET after expiry", r, "stale-while-revalidate")
				e.awaitOrigin("the background 304", func(s originStats) bool { return s.NotModified == 1 })
			} else if classify(r) != kindOrigin {
				t.Errorf("first GET after expiry: %v, want 200 revalidated through the origin", r)
			}
			if !bytes.Equal(r.body, orig.body) {
				t.Errorf("first GET after expiry: body %q, want the stored body %q", r.body, orig.body)
			}
			var next result
			if tt.background {
				// The origin counts its 304 before shield has stored the
				// renewal: until then the copy is still served stale.
				next = e.pollUntil(u, 20*time.Millisecond, time.Second, "the renewed entry",
					func(r result) bool { return classify(r) != kindStale })
			} else {
				next = e.get(u)
			}
			if classify(next) != kindFresh {
				t.Errorf("GET after the 304: %v, want a fresh hit (the 304 renewed the entry)", next)
			}
			if !bytes.Equal(next.body, orig.body) {
				t.Errorf("GET after the 304: body %q, want the original body %q", next.body, orig.body)
			}
			s := e.stats()
			if s.ByPath["/reval"] != 2 || s.NotModified != 1 {
				t.Errorf("origin saw %d requests, %d answered 304; want 2 and 1", s.ByPath["/reval"], s.NotModified)
			}
			m := e.metrics()
			if v, ok := sample(m, "shield_revalidations_total", map[string]string{"origin": "demo", "result": "not_modified"}); !ok || v != 1 {
				t.Errorf(`shield_revalidations_total{origin="demo",result="not_modified"} = %v (found %v), want 1`, v, ok)
			}
			if t.Failed() {
				t.Logf("metrics:\n%s", metricLines(m, "shield_revalidations_total", "shield_stale_served_total", "shield_requests_total"))
			}
		})
	}
}
