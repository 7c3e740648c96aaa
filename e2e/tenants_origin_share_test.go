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

		// half's whole share, held at the origin for 2.5 s.
		held := make([]result, halfShare)
		errs := make([]error, halfShare)
		var finished atomic.Int64
		var wg sync.WaitGroup
		heldURL := func(i int) string { return target(fmt.Sprintf("/half/held/%d", i), "delay", "2500") }
		for i := range halfShare {
			wg.Go(func() {
				held[i], errs[i] = e.try(http.MethodGet, heldURL(i), hdrHalf...)
				finished.Add(1)
			})
		}
		eventually(t, "the origin holding half's share", func() bool {
			return e.stats().InFlight == halfShare || finished.Load() > 0
		})
		if finished.Load() > 0 {
			wg.Wait()
			t.Fatalf("a held fetch ended before the origin held %d at once: %v %v", halfShare, held, errs)
		}
		if v := metric(e.metrics(), "shield_tenant_in_flight", "tenant", "half"); v < halfShare {
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
		var waiter result
		var waiterErr error
		wg.Go(func() { waiter, waiterErr = e.try(http.MethodGet, heldURL(0), hdrHalf...) })
		wg.Wait()

		for i, r := range held {
			if errs[i] != nil {
				t.Fatalf("held fetch %d: %v", i, errs[i])
			}
			wantForwarded(t, fmt.Sprintf("held fetch %d", i), r)
		}
		// The waiter joined the in-flight fetch (or, if that had already
		// ended, hit its stored answer): either way no share, no new fetch.
		if waiterErr != nil {
			t.Fatal(waiterErr)
		}
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
		ok, refused := shareWaveOf(t, e, "half", hdrHalf, true)
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
	})

	t.Run("waves from both tenants", func(t *testing.T) {
		e := e.on(t)
		e.originPost("/__origin/reset")
		var wg sync.WaitGroup
		var halfOK, halfRefused, wholeOK, wholeRefused int
		wg.Go(func() { halfOK, halfRefused = shareWaveOf(t, e, "half", hdrHalf, true) })
		wg.Go(func() { wholeOK, wholeRefused = shareWaveOf(t, e, "whole", hdrWhole, false) })
		wg.Wait()
		shareRefusals += halfRefused
		s := e.stats()
		t.Logf("both: half %d × 200, %d × 503; whole %d × 200, %d × 503; origin max_in_flight %d (max %d)",
			halfOK, halfRefused, wholeOK, wholeRefused, s.MaxInFlight, shareOriginMax)
		if s.MaxInFlight > shareOriginMax {
			t.Errorf("origin max_in_flight = %d, want ≤ origin max_concurrency %d", s.MaxInFlight, shareOriginMax)
		}
		if wholeOK == 0 {
			t.Errorf("whole got no cold key through while half was limited to %d of %d", halfShare, shareOriginMax)
		}
	})

	if got := metric(e.metrics(), "shield_admission_rejected_total", "tenant", "half", "reason", "origin_share"); got != float64(shareRefusals) {
		t.Errorf(`shield_admission_rejected_total{tenant="half",reason="origin_share"} = %v, want %d (origin-share 503s seen)`, got, shareRefusals)
	}
}

// shareWaveOf sends shareWave requests for distinct slow cold keys of
// tenant at once. Each answer must be a 200 fetched from the origin or a
// 503 with Retry-After; with share set, the 503 must name the origin
// share. It returns the counts.
func shareWaveOf(t *testing.T, e *env, tenant string, hdr []string, share bool) (ok, refused int) {
	results := make([]result, shareWave)
	errs := make([]error, shareWave)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range shareWave {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.try(http.MethodGet, target(fmt.Sprintf("/%s/wave/%d", tenant, i), "delay", "300"), hdr...)
		})
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		switch {
		case errs[i] != nil:
			t.Errorf("%s wave %d: %v", tenant, i, errs[i])
		case r.status == http.StatusOK:
			ok++
			if cs := parseCacheStatus(r.header); cs.hit || cs.fwd == "" {
				t.Errorf("%s wave %d: %v, want a fetch (fwd=)", tenant, i, r)
			}
		case r.status == http.StatusServiceUnavailable:
			refused++
			bad := ""
			if share {
				bad = checkOriginShare(r)
			} else {
				_, bad = retryAfter(r)
			}
			if bad != "" {
				t.Errorf("%s wave %d: %s", tenant, i, bad)
			}
		default:
			t.Errorf("%s wave %d: %v, want 200 or 503", tenant, i, r)
		}
	}
	return ok, refused
}
