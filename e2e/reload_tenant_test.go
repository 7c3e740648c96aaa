package e2e

import (
	"net/http"
	"strings"
	"testing"
)

const reloadTenantBody = `routes:
  - { name: demo, hosts: ["*"], origin: demo }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 1000, burst: 1000, max_concurrency: 100 }
  classes:
    acme: { rate: RATE, burst: BURST, max_concurrency: 100 }
`

// TestReloadChangesTenantRate: a tenant's rate changes live with a
// reload. With burst 3 and a near-zero refill, acme's fourth quick request
// is refused; after POST /reload raising the rate, acme is served again at
// once instead of after 100 s — without a restart (the process and its
// cache stay: the warmed key is still a hit).
func TestReloadChangesTenantRate(t *testing.T) {
	t.Parallel()
	tight := strings.NewReplacer("RATE", "0.01", "BURST", "3").Replace(reloadTenantBody)
	e := newTenantEnv(t, 64, tight)
	path := target("/reload-tenant")
	statuses := func(n int) (ok, limited int) {
		for range n {
			r := e.get(path, "X-Tenant-ID", "acme")
			switch r.status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Fatalf("unexpected answer %v", r)
			}
		}
		return ok, limited
	}
	if ok, limited := statuses(5); ok != 3 || limited != 2 {
		t.Fatalf("before reload: %d OK, %d limited; want 3 and 2 (burst 3, rate 0.01/s)", ok, limited)
	}
	loose := strings.NewReplacer("RATE", "1000", "BURST", "1000").Replace(reloadTenantBody)
	e.rewriteConfig(e.cfg.withTenantBody(loose))
	if r := e.adminCall(http.MethodPost, "/reload"); r.status != http.StatusOK {
		t.Fatalf("reload: %v", r)
	}
	// A reload keeps each bucket's tokens (it never refills a bucket to
	// full), so acme starts empty: at the new rate (1000/s) its next
	// token comes within a millisecond, at the old one (0.01/s) not for
	// 100 s — past this poll's deadline. A refused request costs no token.
	eventually(t, "acme served again at its new rate", func() bool {
		ok, _ := statuses(1)
		return ok == 1
	})
	if m := e.scrapeTenants(); seriesValue(m, "shield_admission_admitted_total", "tenant", "acme") < 4 {
		t.Errorf("admitted_total{tenant=acme} = %v, want ≥ 4", seriesValue(m, "shield_admission_admitted_total", "tenant", "acme"))
	}
	// The cache survived the reload (asked as another tenant, whose bucket
	// is full).
	wantHit(t, "the cached key after the reload", e.get(path, "X-Tenant-ID", "other"))
}
