package config

import (
	"fmt"
	"time"
)

// Defaults for origin protection.
const defaultSlowStart = 30 * time.Second

// defaultQueueTimeout: long enough to catch a slot freed by a fast
// origin, short enough that a refusal stays fast.
const defaultQueueTimeout = 50 * time.Millisecond

// maxQueueTimeout: a longer wait is the origin timeout's job.
const maxQueueTimeout = 10 * time.Second

// maxCost bounds routes[].cost: beyond it a request could never be
// admitted by any sane burst, which is a typo, not a policy.
const maxCost = 1000000

// applyProtectionDefaults fills origin-protection settings absent from
// the file.
func applyProtectionDefaults(c *Config, has func(string) bool) {
	setDefault(&c.Log.Access.Sample, has("log.access.sample"), 1)
	for name, o := range c.Origins {
		p := join("origins", name)
		setDefault(&o.SlowStart, has(p+".slow_start"), defaultSlowStart)
		setDefault(&o.QueueTimeout, has(p+".queue_timeout"), defaultQueueTimeout)
		setDefault(&o.Breaker.FailureStatuses, has(p+".breaker.failure_statuses"), []int{502, 503, 504})
		if o.Breaker.FailureStatuses == nil {
			// Present and empty: count no status. Non-nil, so that the
			// breaker (where nil means its default) sees the difference.
			o.Breaker.FailureStatuses = []int{}
		}
	}
}

// validateProtection checks tenants, origin budgets and breakers. Limits
// are checked for range here; the admission and breaker packages check
// their own invariants again when the proxy builds them.
func (d *decoder) validateProtection(c *Config) {
	if s := c.Log.Access.Sample; !(s > 0 && s <= 1) {
		d.problem("log.access.sample", "must be in (0, 1], got %g", s)
	}
	for _, name := range sortedKeys(c.Origins) {
		o, p := c.Origins[name], join("origins", name)
		if o.MaxRate < 0 {
			d.problem(p+".max_rate", "must be ≥ 0 (0: no rate limit), got %g", o.MaxRate)
		}
		d.nonNegative(p+".slow_start", o.SlowStart)
		if o.ShuffleShard < 0 || o.ShuffleShard > len(o.Servers) {
			d.problem(p+".shuffle_shard", "must be in [0, %d] (0: all servers; at most the number of servers), got %d", len(o.Servers), o.ShuffleShard)
		}
		if o.QueueTimeout < 0 || o.QueueTimeout > maxQueueTimeout {
			d.problem(p+".queue_timeout", "must be in [0, %v] (0: no waiting), got %v", maxQueueTimeout, o.QueueTimeout)
		}
		b, bp := &o.Breaker, p+".breaker"
		if b.ConsecutiveFailures < 0 {
			d.problem(bp+".consecutive_failures", "must be ≥ 0, got %d", b.ConsecutiveFailures)
		}
		if b.FailureRatio < 0 || b.FailureRatio > 1 {
			d.problem(bp+".failure_ratio", "must be in [0, 1], got %g", b.FailureRatio)
		}
		if b.MinRequests < 0 {
			d.problem(bp+".min_requests", "must be ≥ 0, got %d", b.MinRequests)
		}
		if b.HalfOpenProbes < 0 || b.HalfOpenProbes > 100 {
			d.problem(bp+".half_open_probes", "must be in [0, 100], got %d", b.HalfOpenProbes)
		}
		d.nonNegative(bp+".interval", b.Interval)
		d.nonNegative(bp+".open_for", b.OpenFor)
		for i, code := range b.FailureStatuses {
			if code < 100 || code > 599 {
				d.problem(fmt.Sprintf("%s.failure_statuses[%d]", bp, i), "must be an HTTP status code in [100, 599], got %d", code)
			}
		}
	}
	t := c.Tenants
	classes := map[string]bool{"default": true}
	if t != nil {
		id := &t.Identify
		switch {
		case id.Header == "" && id.APIKeys == nil:
			d.problem("tenants.identify", "one of header or api_keys is required")
		case id.Header != "" && id.APIKeys != nil:
			d.problem("tenants.identify", "header and api_keys are exclusive")
		case id.Header != "" && !isToken(id.Header):
			d.problem("tenants.identify.header", "%q is not a valid header name", id.Header)
		case id.APIKeys != nil:
			if !isToken(id.APIKeys.Header) {
				d.problem("tenants.identify.api_keys.header", "%q is not a valid header name", id.APIKeys.Header)
			}
			if len(id.APIKeys.Keys) == 0 {
				d.problem("tenants.identify.api_keys.keys", "at least one key is required")
			}
		}
		d.tenantLimits("tenants.default", &t.Default)
		for _, name := range sortedKeys(t.Classes) {
			p := join("tenants.classes", name)
			if name == "default" || name == "" {
				d.problem(p, "class name %q is reserved", name)
				continue
			}
			classes[name] = true
			d.tenantLimits(p, t.Classes[name])
		}
		if id.APIKeys != nil {
			for _, key := range sortedKeys(id.APIKeys.Keys) {
				if tn := id.APIKeys.Keys[key]; !classes[tn] {
					d.problem(join("tenants.identify.api_keys.keys", key), "unknown tenant class %q", tn)
				}
			}
		}
	}
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		if r.Tenant != "" && !classes[r.Tenant] {
			if t == nil {
				d.problem(p+".tenant", "needs a tenants: section")
			} else {
				d.problem(p+".tenant", "unknown tenant class %q", r.Tenant)
			}
		}
		if r.Cost < 1 || r.Cost > maxCost {
			d.problem(p+".cost", "must be in [1, %d] tokens, got %d", maxCost, r.Cost)
		}
		d.oneOf(p+".priority", r.Priority, "low", "normal", "high")
		if j := r.Cache.TTLJitter; !(j >= 0 && j <= 0.5) {
			d.problem(p+".cache.ttl_jitter", "must be a fraction in [0, 0.5], got %g", j)
		}
		if f := r.Cache.EagerRefresh; !(f >= 0 && f < 1) {
			d.problem(p+".cache.eager_refresh", "must be a fraction of the lifetime in (0, 1), or 0 (off), got %g", f)
		}
		if r.Cache.TenantScoped && t == nil && r.Tenant == "" {
			d.problem(p+".cache.tenant_scoped", "needs a tenants: section or a route tenant")
		}
	}
}

func (d *decoder) tenantLimits(p string, l *TenantLimits) {
	if l == nil {
		d.problem(p, "limits are required")
		return
	}
	if !(l.Rate > 0) {
		d.problem(p+".rate", "required, must be > 0 requests per second, got %g", l.Rate)
	}
	if l.Burst < 0 {
		d.problem(p+".burst", "must be ≥ 0 (0: one second of rate), got %d", l.Burst)
	}
	if l.MaxConcurrency < 1 {
		d.problem(p+".max_concurrency", "required, must be ≥ 1, got %d", l.MaxConcurrency)
	}
	if l.OriginShare < 0 || l.OriginShare > 1 {
		d.problem(p+".origin_share", "must be in (0, 1] (0: default 1), got %g", l.OriginShare)
	}
}
