package admission

import (
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Tenant is one tenant class on this node. Its bucket, in-flight count and
// counters survive reloads and membership changes; only Tenants creates
// one. All methods are safe for concurrent use.
type Tenant struct {
	name string
	// lim holds the per-node rate and burst; it has its own mutex.
	lim *rate.Limiter
	// limits is the configured (fleet-wide, defaulted) Limits; replaced
	// whole on reload.
	limits atomic.Pointer[Limits]

	inFlight atomic.Int64
	admitted atomic.Uint64
	rejected [NumReasons]atomic.Uint64
}

// TenantStats is a snapshot of a Tenant's counters for metrics.
type TenantStats struct {
	// Name is the metrics label: the class name or DefaultClass.
	Name string
	// Limits are the configured limits (defaults applied).
	Limits Limits
	// Admitted counts requests Admit let in.
	Admitted uint64
	// Rejected counts refusals by Reason: Rate and Concurrency from Admit,
	// OriginShare from Origin.Acquire.
	Rejected ReasonCounts
	// InFlight is the number of admitted requests not yet Done.
	InFlight int
}

func newTenant(name string, l Limits, peers int) *Tenant {
	r, b := l.perNode(peers)
	t := &Tenant{name: name, lim: rate.NewLimiter(r, b)} // starts full
	t.limits.Store(&l)
	return t
}

// apply sets new limits or a new peer count without touching the bucket's
// tokens beyond advancing them to now and clamping them to the new burst.
func (t *Tenant) apply(l Limits, peers int, now time.Time) {
	r, b := l.perNode(peers)
	t.lim.SetLimitAt(now, r)
	t.lim.SetBurstAt(now, b)
	t.limits.Store(&l)
}

// Name is the class name, or DefaultClass: the value for metric labels.
func (t *Tenant) Name() string { return t.name }

// Admit decides whether a request of this tenant may enter at now. On None
// one concurrency slot is taken and the caller must call Done exactly once.
// Otherwise retryAfter is the Retry-After hint (whole seconds, ≥ 1 s).
// It never blocks and never allocates.
func (t *Tenant) Admit(now time.Time) (reason Reason, retryAfter time.Duration) {
	limit := int64(t.limits.Load().MaxConcurrency)
	for {
		n := t.inFlight.Load()
		if n >= limit {
			t.rejected[Concurrency].Add(1)
			return Concurrency, minRetryAfter
		}
		if t.inFlight.CompareAndSwap(n, n+1) {
			break
		}
	}
	// The slot is ours; the token is taken only if one is there, so the
	// refusal below needs to give back the slot only.
	if !t.lim.AllowN(now, 1) {
		t.inFlight.Add(-1)
		t.rejected[Rate].Add(1)
		return Rate, bucketRetryAfter(t.lim, now)
	}
	t.admitted.Add(1)
	return None, 0
}

// Done gives back the slot an admitted request holds. An unmatched Done is
// ignored rather than letting the count go negative.
func (t *Tenant) Done() {
	for {
		n := t.inFlight.Load()
		if n <= 0 || t.inFlight.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// InFlight is the number of admitted requests not yet Done.
func (t *Tenant) InFlight() int { return int(t.inFlight.Load()) }

// Tokens is the number of tokens in this node's bucket at now.
func (t *Tenant) Tokens(now time.Time) float64 { return t.lim.TokensAt(now) }

// NodeLimits returns the rate and burst this node currently enforces.
func (t *Tenant) NodeLimits() (ratePerSecond float64, burst int) {
	return float64(t.lim.Limit()), t.lim.Burst()
}

// originShare is the configured share, read by Origin.Acquire.
func (t *Tenant) originShare() float64 { return t.limits.Load().OriginShare }

// Stats returns a snapshot of the counters. Each value is read atomically;
// the set is not one instant, which metrics do not need.
func (t *Tenant) Stats() TenantStats {
	s := TenantStats{
		Name:     t.name,
		Limits:   *t.limits.Load(),
		Admitted: t.admitted.Load(),
		InFlight: t.InFlight(),
	}
	for i := range s.Rejected {
		s.Rejected[i] = t.rejected[i].Load()
	}
	return s
}
