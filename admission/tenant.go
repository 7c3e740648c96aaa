package admission

import (
	"math"
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
	// share is this node's fraction of the fleet's rate and burst, in
	// (0, 1]; written under Tenants.mu, read by Stats.
	share atomic.Uint64 // math.Float64bits

	inFlight atomic.Int64
	admitted atomic.Uint64
	rejected [NumReasons]atomic.Uint64
	// tokAdmitted and tokRefused count tokens (a request's cost, see
	// AdmitN) admitted and refused for rate: the demand the usage
	// exchange reports is in tokens, so a costly route weighs as much in
	// the fleet's shares as in the bucket.
	tokAdmitted atomic.Uint64
	tokRefused  atomic.Uint64
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
	// Share is this node's fraction of the fleet-wide rate and burst;
	// NodeRate and NodeBurst are what this node enforces.
	Share     float64
	NodeRate  float64
	NodeBurst int
}

func newTenant(name string, l Limits, share float64) *Tenant {
	r, b := l.perShare(share)
	t := &Tenant{name: name, lim: rate.NewLimiter(r, b)} // starts full
	t.limits.Store(&l)
	t.share.Store(math.Float64bits(share))
	return t
}

// apply sets new limits or a new share without touching the bucket's
// tokens beyond advancing them to now and clamping them to the new burst.
func (t *Tenant) apply(l Limits, share float64, now time.Time) {
	r, b := l.perShare(share)
	t.lim.SetLimitAt(now, r)
	t.lim.SetBurstAt(now, b)
	t.limits.Store(&l)
	t.share.Store(math.Float64bits(share))
}

// Share is this node's fraction of the class's fleet-wide rate and burst.
func (t *Tenant) Share() float64 { return math.Float64frombits(t.share.Load()) }

// usage is the class's cumulative demand (admitted plus refused for
// rate: every request that reached the bucket) and admitted counts, in
// tokens. Concurrency refusals never reached the bucket and are not
// demand for the rate.
func (t *Tenant) usage() (demanded, admitted uint64) {
	a := t.tokAdmitted.Load()
	return a + t.tokRefused.Load(), a
}

// Name is the class name, or DefaultClass: the value for metric labels.
func (t *Tenant) Name() string { return t.name }

// Admit is AdmitN(now, 1).
func (t *Tenant) Admit(now time.Time) (reason Reason, retryAfter time.Duration) {
	return t.AdmitN(now, 1)
}

// AdmitN decides whether a request of this tenant costing cost tokens
// (a route's cost, ≥ 1; smaller counts as 1) may enter at now. On None
// one concurrency slot is taken and the caller must call Done exactly
// once. Otherwise retryAfter is the Retry-After hint (whole seconds,
// ≥ 1 s). It never blocks and never allocates.
//
// A cost above this node's burst (a small fleet share of a small burst)
// is charged as the whole burst: such a request is admitted only from a
// full bucket, rather than never.
func (t *Tenant) AdmitN(now time.Time, cost int) (reason Reason, retryAfter time.Duration) {
	cost = max(cost, 1)
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
	n := min(cost, t.lim.Burst())
	if !t.lim.AllowN(now, n) {
		t.inFlight.Add(-1)
		t.rejected[Rate].Add(1)
		t.tokRefused.Add(uint64(cost))
		return Rate, bucketRetryAfterN(t.lim, now, n)
	}
	t.admitted.Add(1)
	t.tokAdmitted.Add(uint64(cost))
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
		Share:    t.Share(),
	}
	s.NodeRate, s.NodeBurst = t.NodeLimits()
	for i := range s.Rejected {
		s.Rejected[i] = t.rejected[i].Load()
	}
	return s
}
