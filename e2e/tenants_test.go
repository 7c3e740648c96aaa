package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// TestTenantScopedCache: on a tenant_scoped route two tenants asking for
// the same URL get two origin fetches, each its own body, each a hit on
// repeat for its own tenant; on an ordinary route the second tenant hits
// the first one's entry (the control).
func TestTenantScopedCache(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, 64, `routes:
  - { name: scoped, hosts: ["*"], path_prefix: /scoped/, origin: demo, cache: { tenant_scoped: true } }
  - { name: shared, hosts: ["*"], path_prefix: /, origin: demo }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 1000, burst: 1000, max_concurrency: 100 }
  classes:
    acme:   { rate: 1000, burst: 1000, max_concurrency: 100 }
    globex: { rate: 1000, burst: 1000, max_concurrency: 100 }
`)
	tests := []struct {
		name, path string
		scoped     bool
	}{
		{"tenant-scoped route", "/scoped/report", true},
		{"shared route", "/shared/report", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			acme := []string{"X-Tenant-ID", "acme"}
			globex := []string{"X-Tenant-ID", "globex"}
			a1 := e.get(tt.path, acme...)
			wantForwarded(t, "acme first", a1)
			g1 := e.get(tt.path, globex...)
			if !tt.scoped {
				wantHit(t, "globex after acme on a shared route", g1)
				if !bytes.Equal(g1.body, a1.body) {
					t.Errorf("shared route: globex got %q, want acme's entry %q", g1.body, a1.body)
				}
				e.wantOriginCount(tt.path, 1)
				return
			}
			wantForwarded(t, "globex first (its own entry)", g1)
			if bytes.Equal(g1.body, a1.body) {
				t.Errorf("globex got acme's body %q", a1.body)
			}
			for _, c := range []struct {
				name  string
				hdr   []string
				first result
			}{{"acme", acme, a1}, {"globex", globex, g1}} {
				r := e.get(tt.path, c.hdr...)
				wantHit(t, c.name+" repeat", r)
				if !bytes.Equal(r.body, c.first.body) {
					t.Errorf("%s repeat body %q, want its own first body %q", c.name, r.body, c.first.body)
				}
			}
			e.wantOriginCount(tt.path, 2)
		})
	}
}

// TestTenantUnknownIsDefault: an unknown tenant (unknown header value,
// unknown API key, or none) is limited by the default class, shares its
// bucket with every other unknown tenant, and is counted in /metrics as
// tenant="default", never under the raw value. A configured tenant is
// not affected by the default's empty bucket. The limit applies to hits.
func TestTenantUnknownIsDefault(t *testing.T) {
	t.Parallel()
	const limits = `  default: { rate: 0.5, burst: 5, max_concurrency: 50 }
  classes:
    acme: { rate: 1000, burst: 1000, max_concurrency: 100 }
`
	tests := []struct {
		name, identify, header string
		unknown, other, acme   string // header values
	}{
		{"header", `{ header: X-Tenant-ID }`, "X-Tenant-ID", "intruder-7f3a", "nobody-91c2", "acme"},
		{"api key", `{ api_keys: { header: X-Api-Key, keys: { "key-acme-5d1e": acme } } }`,
			"X-Api-Key", "key-intruder-7f3a", "key-nobody-91c2", "key-acme-5d1e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTenantEnv(t, 64, `routes:
  - { name: demo, hosts: ["*"], path_prefix: /, origin: demo }
tenants:
  identify: `+tt.identify+"\n"+limits)
			const burst = 5
			for i := range burst { // one miss, then hits: every request spends a token
				if r := e.get("/u", tt.header, tt.unknown); r.status != http.StatusOK {
					t.Fatalf("request %d of %d (the default burst) as %q: %v, want 200", i+1, burst, tt.unknown, r)
				}
			}
			wantRejected(t, "unknown tenant over the default burst", e.get("/u", tt.header, tt.unknown), "default", "rate")
			wantRejected(t, "another unknown tenant (same default bucket)", e.get("/u", tt.header, tt.other), "default", "rate")
			wantRejected(t, "no tenant at all", e.get("/u"), "default", "rate")
			const acmeN = 10
			for i := range acmeN {
				if r := e.get("/u", tt.header, tt.acme); r.status != http.StatusOK {
					t.Errorf("acme request %d while default is exhausted: %v, want 200", i+1, r)
				}
			}

			m := e.scrapeTenants()
			for _, c := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"shield_admission_admitted_total", []string{"tenant", "default"}, burst},
				{"shield_admission_rejected_total", []string{"tenant", "default", "reason", "rate"}, 3},
				{"shield_admission_admitted_total", []string{"tenant", "acme"}, acmeN},
			} {
				if got := seriesValue(m, c.name, c.labels...); got != c.want {
					t.Errorf("%s = %v, want %v", series(c.name, c.labels...), got, c.want)
				}
			}
			for _, raw := range []string{tt.unknown, tt.other, tt.acme} {
				if raw != "acme" && bytes.Contains(m, []byte(raw)) {
					t.Errorf("/metrics contains the raw tenant value %q", raw)
				}
			}
			if t.Failed() {
				t.Logf("/metrics:\n%s", m)
			}
		})
	}
}

// TestTenantRoutePinned: a route's `tenant:` wins over the request's
// header in both directions (a limited tenant cannot be named away, a
// header cannot limit a pinned route), while other routes still honour
// the header.
func TestTenantRoutePinned(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, 64, `routes:
  - { name: pinned-acme,   hosts: ["*"], path_prefix: /pinned-acme/,   origin: demo, tenant: acme }
  - { name: pinned-capped, hosts: ["*"], path_prefix: /pinned-capped/, origin: demo, tenant: capped }
  - { name: open,          hosts: ["*"], path_prefix: /,               origin: demo }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 1000, burst: 1000, max_concurrency: 100 }
  classes:
    acme:   { rate: 1000, burst: 1000, max_concurrency: 100 }
    capped: { rate: 0.5, burst: 3, max_concurrency: 100 }
`)
	const n, cappedBurst = 10, 3
	for i := range n {
		if r := e.get("/pinned-acme/x", "X-Tenant-ID", "capped"); r.status != http.StatusOK {
			t.Errorf("pinned-acme request %d claiming capped: %v, want 200 (acme's limits)", i+1, r)
		}
	}
	for i := range n {
		r := e.get("/pinned-capped/x", "X-Tenant-ID", "acme")
		if i < cappedBurst {
			if r.status != http.StatusOK {
				t.Errorf("pinned-capped request %d (within capped's burst %d): %v, want 200", i+1, cappedBurst, r)
			}
			continue
		}
		wantRejected(t, fmt.Sprintf("pinned-capped request %d claiming acme", i+1), r, "capped", "rate")
	}
	wantRejected(t, "pinned-capped without a header", e.get("/pinned-capped/x"), "capped", "rate")
	wantRejected(t, "open route as capped (header honoured)", e.get("/open/x", "X-Tenant-ID", "capped"), "capped", "rate")
	wantForwarded(t, "open route as acme", e.get("/open/y", "X-Tenant-ID", "acme"))

	m := e.scrapeTenants()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"shield_admission_admitted_total", []string{"tenant", "acme"}, n + 1},
		{"shield_admission_admitted_total", []string{"tenant", "capped"}, cappedBurst},
		{"shield_admission_rejected_total", []string{"tenant", "capped", "reason", "rate"}, n - cappedBurst + 2},
		{"shield_admission_admitted_total", []string{"tenant", "default"}, 0},
	} {
		if got := seriesValue(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s = %v, want %v", series(c.name, c.labels...), got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", m)
	}
}
