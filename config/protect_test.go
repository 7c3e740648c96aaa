package config

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const protectBase = `listen: 127.0.0.1:8080
origins:
  api:
    servers: [127.0.0.1:9000]
    max_rate: 50.5
    slow_start: 10s
    breaker: { consecutive_failures: 3, failure_ratio: 0.25, open_for: 2s, half_open_probes: 2, trip_on_429: true }
routes:
  - name: api
    hosts: ["*"]
    origin: api
    tenant: acme
    cache: { tenant_scoped: true, stale_on_429: true }
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 100, burst: 200, max_concurrency: 50 }
  classes:
    acme: { rate: 1000, max_concurrency: 200, origin_share: 0.5 }
`

func TestProtectionParse(t *testing.T) {
	c, err := Parse("p.yaml", []byte(protectBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Origins["api"]
	if o.MaxRate != 50.5 || o.SlowStart != 10*time.Second || o.Breaker.ConsecutiveFailures != 3 ||
		o.Breaker.FailureRatio != 0.25 || o.Breaker.OpenFor != 2*time.Second || !o.Breaker.TripOn429 {
		t.Errorf("origin = %+v", o)
	}
	if c.Tenants == nil || c.Tenants.Identify.Header != "X-Tenant-ID" || c.Tenants.Default.Rate != 100 ||
		c.Tenants.Classes["acme"].OriginShare != 0.5 {
		t.Errorf("tenants = %+v", c.Tenants)
	}
	if fs := o.Breaker.FailureStatuses; len(fs) != 3 || fs[0] != 502 || fs[1] != 503 || fs[2] != 504 {
		t.Errorf("failure_statuses left out = %v, want the default [502 503 504]", fs)
	}
	for _, tc := range []struct {
		yaml string
		want []int
	}{{"failure_statuses: [500, 503]", []int{500, 503}}, {"failure_statuses: []", []int{}}, {"failure_statuses: null", []int{502, 503, 504}}} {
		c, err := Parse("p.yaml", []byte(strings.Replace(protectBase, "trip_on_429: true }", "trip_on_429: true, "+tc.yaml+" }", 1)), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		if got := c.Origins["api"].Breaker.FailureStatuses; got == nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: failure_statuses %#v, want %v", tc.yaml, got, tc.want)
		}
	}
	if r := c.Routes[0]; r.Tenant != "acme" || !r.Cache.TenantScoped || !r.Cache.StaleOn429 {
		t.Errorf("route = %+v", r)
	}
}

func TestProtectionErrors(t *testing.T) {
	tests := []struct {
		name, from, to, field string
		line                  int
	}{
		{"ratio", "failure_ratio: 0.25", "failure_ratio: 1.5", "origins.api.breaker.failure_ratio", 7},
		{"rate not a number", "max_rate: 50.5", "max_rate: fast", "origins.api.max_rate", 5},
		{"negative rate", "max_rate: 50.5", "max_rate: -1", "origins.api.max_rate", 5},
		{"unknown route tenant", "tenant: acme", "tenant: acne", "routes[0].tenant", 12},
		{"zero tenant rate", "rate: 1000,", "rate: 0,", "tenants.classes.acme.rate", 18},
		{"share above 1", "origin_share: 0.5", "origin_share: 2", "tenants.classes.acme.origin_share", 18},
		{"no identify", "identify: { header: X-Tenant-ID }", "identify: {}", "tenants.identify", 15},
		{"reserved class", "    acme:", "    default:", "tenants.classes.default", 18},
		{"failure status 600", "trip_on_429: true }", "trip_on_429: true, failure_statuses: [500, 600] }", "origins.api.breaker.failure_statuses[1]", 7},
		{"failure status 99", "trip_on_429: true }", "trip_on_429: true, failure_statuses: [99] }", "origins.api.breaker.failure_statuses[0]", 7},
		{"failure status not a number", "trip_on_429: true }", "trip_on_429: true, failure_statuses: [bad] }", "origins.api.breaker.failure_statuses", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(protectBase, tt.from, tt.to, 1)
			if src == protectBase {
				t.Fatalf("replacement %q not found", tt.from)
			}
			_, err := Parse("p.yaml", []byte(src), nil)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want *Error", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
			found := false
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, tt.field) && strings.HasPrefix(line, "p.yaml:"+itoaTest(tt.line)+":") {
					found = true
				}
			}
			if !found {
				t.Errorf("error %q: want %s at line %d", err, tt.field, tt.line)
			}
		})
	}
}

func itoaTest(n int) string { return strconv.Itoa(n) }
