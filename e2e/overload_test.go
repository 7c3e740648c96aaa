package e2e

import (
	"net/http"
	"strconv"
	"testing"
)

// TestRouteCost: on a `cost: 5` route a tenant's burst of 20 admits 4
// requests, on a cost-1 route 20; the refusal is an ordinary admission
// 429 (reason rate), and the /metrics admitted counts agree.
func TestRouteCost(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, 64, `routes:
  - { name: dear, hosts: ["*"], path_prefix: /dear/, origin: demo, cost: 5 }
  - { name: cheap, hosts: ["*"], path_prefix: /, origin: demo }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 0.01, burst: 20, max_concurrency: 100 }
  classes:
    acme:   { rate: 0.01, burst: 20, max_concurrency: 100 }
    globex: { rate: 0.01, burst: 20, max_concurrency: 100 }
`)
	for _, c := range []struct {
		tenant, path string
		admitted     int
	}{{"acme", "/dear/x", 4}, {"globex", "/cheap/x", 20}} {
		for i := range c.admitted {
			if r := e.get(c.path+"?i="+strconv.Itoa(i), "X-Tenant-ID", c.tenant); r.status != http.StatusOK {
				t.Fatalf("%s request %d of %d on %s: %v, want 200", c.tenant, i+1, c.admitted, c.path, r)
			}
		}
		wantRejected(t, c.tenant+" past its burst on "+c.path, e.get(c.path, "X-Tenant-ID", c.tenant), c.tenant, "rate")
	}
	m := e.scrapeTenants()
	for _, c := range []struct {
		tenant string
		want   float64
	}{{"acme", 4}, {"globex", 20}} {
		if got := seriesValue(m, "shield_admission_admitted_total", "tenant", c.tenant); got != c.want {
			t.Errorf("shield_admission_admitted_total{tenant=%q} = %v, want %v", c.tenant, got, c.want)
		}
	}
}
