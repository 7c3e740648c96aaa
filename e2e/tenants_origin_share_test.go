package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// shareConfig: "half" may hold half of the origin (floor(0.5 × 8) = 4
// fetches), "whole" all of it; rates and concurrency are far out of reach.
const shareConfig = `routes:
  - { name: demo, hosts: ["*"], path_prefix: /, origin: demo }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 10000, burst: 10000, max_concurrency: 500 }
  classes:
    half:  { rate: 10000, burst: 10000, max_concurrency: 500, origin_share: 0.5 }
    whole: { rate: 10000, burst: 10000, max_concurrency: 500 }
`

const (
	shareOriginMax = 8
	halfShare      = 4 // floor(0.5 × shareOriginMax)
	shareWave      = 40
)

// TestTenantOriginShare: a tenant's misses never hold more than its share
// of the origin's fetches, hits and coalesced waiters cost no share, the
// other tenant's misses still get through, and the origin never sees more
// than its max_concurrency at once.
func TestTenantOriginShare(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, shareOriginMax, shareConfig)
	hdrHalf := []string{"X-Tenant-ID", "half"}
	hdrWhole := []string{"X-Tenant-ID", "whole"}
	var shareRefusals int // 503s for the origin share seen by "half"

	t.Run("share held", func(t *testing.T) {
		e := e.on(t)
		wantForwarded(t, "warm half's key", e.get("/half/warm", hdrHalf...))
		e.originPost("/__origin/reset")

		h := holdShare(t, e, "/half/held", "2500", hdrHalf)
		if v := seriesValue(e.scrapeTenants(), "shield_tenant_in_flight", "tenant", "half"); v < halfShare {
			t.Errorf(`shield_tenant_in_flight{tenant="half"} = %v while %d of its requests wait on the origin`, v, halfShare)
		}

		// While the share is held:
		if bad := checkOriginShare(e.get("/half/extra", hdrHalf...)); bad != "" {
			t.Errorf("half's cold key over its share: %s", bad)
		} else {
			shareRefusals++
		}
		wantHit(t, "half's hit while its share is held", e.get("/half/warm", hdrHalf...))
		wantForwarded(t, "whole's cold key while half holds its share", e.get("/whole/cold", hdrWhole...))
		// A request for a held key joins the in-flight fetch (or, had that
		// already ended, hits its stored answer): no share, no new fetch.
		waiter := e.get(h.urls[0], hdrHalf...)
		held := h.wait(t)
		if cs := parseCacheStatus(waiter.header); waiter.status != http.StatusOK || !(cs.collapsed || cs.hit) {
			t.Errorf("half's request for a key in flight: %v, want 200 collapsed (or hit)", waiter)
		} else if !bytes.Equal(waiter.body, held[0].body) {
			t.Errorf("coalesced answer %q differs from the leader's %q", waiter.body, held[0].body)
		}
		s := e.stats()
		if s.ByPath["/half/extra"] != 0 || s.ByPath["/half/held/0"] != 1 || s.ByPath["/half/warm"] != 0 {
			t.Errorf("origin by_path = %v; want /half/extra 0 (refused), /half/held/0 1 (coalesced), /half/warm 0 (hit)", s.ByPath)
		}
		if s.MaxInFlight > halfShare+1 {
			t.Errorf("origin max_in_flight = %d, want ≤ %d (half's share + whole's one fetch)", s.MaxInFlight, halfShare+1)
		}
	})

	t.Run("wave from one tenant", func(t *testing.T) {
		e := e.on(t)
		e.originPost("/__origin/reset")
		ok, refused, _ := shareWaveOf(t, e, "alone", "half", hdrHalf, true)
		shareRefusals += refused
		s := e.stats()
		t.Logf("half alone: %d distinct cold keys at once: %d × 200, %d × 503; origin max_in_flight %d (share %d)",
			shareWave, ok, refused, s.MaxInFlight, halfShare)
		if s.MaxInFlight > halfShare {
			t.Errorf("origin max_in_flight = %d with only half sending misses, want ≤ its share %d", s.MaxInFlight, halfShare)
		}
		if s.Total != int64(ok) {
			t.Errorf("origin saw %d requests, want %d (one per 200; a refusal must not reach it)", s.Total, ok)
		}
		if refused == 0 {
			t.Errorf("%d concurrent cold keys against a share of %d: none refused", shareWave, halfShare)
		}
		if got := seriesValue(e.scrapeTenants(), "shield_admission_rejected_total", "tenant", "half", "reason", "origin_share"); got != float64(shareRefusals) {
			t.Errorf(`shield_admission_rejected_total{tenant="half",reason="origin_share"} = %v, want %d (origin-share 503s seen)`, got, shareRefusals)
		}
	})

	t.Run("waves from both tenants", func(t *testing.T) {
		e := e.on(t)
		e.originPost("/__origin/reset")
		var wg sync.WaitGroup
		// Either tenant may now be refused because the whole origin is
		// busy, not only for a share: any 503 with Retry-After will do.
		var halfOK, halfRefused, wholeOK, wholeRefused int
		var halfWhy, wholeWhy map[string]int
		wg.Go(func() { halfOK, halfRefused, halfWhy = shareWaveOf(t, e, "both", "half", hdrHalf, false) })
		wg.Go(func() { wholeOK, wholeRefused, wholeWhy = shareWaveOf(t, e, "both", "whole", hdrWhole, false) })
		wg.Wait()
		s := e.stats()
		t.Logf("both: half %d × 200, %d × 503 %v; whole %d × 200, %d × 503 %v; origin max_in_flight %d (max %d)",
			halfOK, halfRefused, halfWhy, wholeOK, wholeRefused, wholeWhy, s.MaxInFlight, shareOriginMax)
		if s.MaxInFlight > shareOriginMax {
			t.Errorf("origin max_in_flight = %d, want ≤ origin max_concurrency %d", s.MaxInFlight, shareOriginMax)
		}
		if wholeOK == 0 {
			t.Errorf("whole got no cold key through while half was limited to %d of %d", halfShare, shareOriginMax)
		}
	})

	// Over its share, a request whose copy is stale but inside
	// stale-if-error gets the copy instead of a 503.
	t.Run("stale over share", func(t *testing.T) {
		e := e.on(t)
		u := target("/half/stale", "cc", "max-age=1, stale-if-error=60")
		first := e.get(u, hdrHalf...)
		wantForwarded(t, "store half's short-lived key", first)
		h := holdShare(t, e, "/half/held-stale", "3000", hdrHalf)
		var r result
		eventually(t, "half's copy to go stale", func() bool {
			if !h.stillHeld() {
				return true
			}
			r = e.get(u, hdrHalf...)
			cs := parseCacheStatus(r.header)
			return r.status != http.StatusOK || !cs.hit || cs.fwd != ""
		})
		if !h.stillHeld() {
			t.Fatalf("the held fetches (3 s) ended before the 1 s copy went stale; last answer %v", r)
		}
		if cs := parseCacheStatus(r.header); r.status != http.StatusOK || !cs.hit || cs.fwd != "stale" || shieldDetail(r.header) != "origin-share" {
			t.Errorf("stale copy over the share: %v, want 200 with Cache-Status hit; fwd=stale; detail=origin-share", r)
		} else if !bytes.Equal(r.body, first.body) {
			t.Errorf("stale answer %q, want the stored copy %q", r.body, first.body)
		}
		h.wait(t)
		e.wantOriginCount("/half/stale", 1)
		t.Logf(`after the stale subtest: shield_admission_rejected_total{tenant="half",reason="origin_share"} = %v`,
			seriesValue(e.scrapeTenants(), "shield_admission_rejected_total", "tenant", "half", "reason", "origin_share"))
	})
}

// heldShare is half's whole origin share, held by slow fetches.
type heldShare struct {
	urls     []string
	results  []result
	errs     []error
	finished atomic.Int64
	wg       sync.WaitGroup
}

// holdShare starts halfShare fetches of distinct keys under prefix that
// the origin answers after delayMs, and waits until the origin holds all
// of them at once.
func holdShare(t *testing.T, e *env, prefix, delayMs string, hdr []string) *heldShare {
	t.Helper()
	h := &heldShare{urls: make([]string, halfShare), results: make([]result, halfShare), errs: make([]error, halfShare)}
	for i := range halfShare {
		h.urls[i] = target(fmt.Sprintf("%s/%d", prefix, i), "delay", delayMs)
		h.wg.Go(func() {
			h.results[i], h.errs[i] = e.try(http.MethodGet, h.urls[i], hdr...)
			h.finished.Add(1)
		})
	}
	eventually(t, "the origin holding half's share", func() bool {
		return e.stats().InFlight == halfShare || !h.stillHeld()
	})
	if !h.stillHeld() {
		h.wg.Wait()
		t.Fatalf("a held fetch ended before the origin held %d at once: %v %v", halfShare, h.results, h.errs)
	}
	return h
}

// stillHeld reports whether every held fetch is still in flight.
func (h *heldShare) stillHeld() bool { return h.finished.Load() == 0 }

// wait waits for the held fetches and fails unless each was a 200 fetch.
func (h *heldShare) wait(t *testing.T) []result {
	t.Helper()
	h.wg.Wait()
	for i, r := range h.results {
		if h.errs[i] != nil {
			t.Fatalf("held fetch %d: %v", i, h.errs[i])
		}
		wantForwarded(t, fmt.Sprintf("held fetch %d", i), r)
	}
	return h.results
}

// shareWaveOf sends shareWave requests for distinct slow cold keys of
// tenant at once (/tenant/wave/i, so each wave's keys are new). Each answer must be a 200 fetched from the origin or a
// 503 with Retry-After; with share set, the 503 must name the origin
// share. It returns the counts, and the 503s by Cache-Status detail.
func shareWaveOf(t *testing.T, e *env, wave, tenant string, hdr []string, share bool) (ok, refused int, why map[string]int) {
	why = map[string]int{}
	results := make([]result, shareWave)
	errs := make([]error, shareWave)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range shareWave {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.try(http.MethodGet, target(fmt.Sprintf("/%s/%s/%d", tenant, wave, i), "delay", "300"), hdr...)
		})
	}
	close(start)
	wg.Wait()
	bad := 0
	fail := func(format string, args ...any) {
		if bad++; bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	defer func() {
		if bad > 5 {
			t.Errorf("%s wave: %d unexpected answers in all", tenant, bad)
		}
	}()
	for i, r := range results {
		switch {
		case errs[i] != nil:
			fail("%s wave %d: %v", tenant, i, errs[i])
		case r.status == http.StatusOK:
			ok++
			if cs := parseCacheStatus(r.header); cs.hit || cs.fwd == "" {
				fail("%s wave %d: %v, want a fetch (fwd=)", tenant, i, r)
			}
		case r.status == http.StatusServiceUnavailable:
			refused++
			why[shieldDetail(r.header)]++
			problem := ""
			if share {
				problem = checkOriginShare(r)
			} else {
				_, problem = retryAfterSeconds(r)
			}
			if problem != "" {
				fail("%s wave %d: %s", tenant, i, problem)
			}
		default:
			fail("%s wave %d: %v, want 200 or 503", tenant, i, r)
		}
	}
	return ok, refused, why
}
