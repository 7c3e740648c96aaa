package admission

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// OriginLimits is one origin's budget on this node.
type OriginLimits struct {
	// MaxConcurrency bounds in-flight fetches. Required, ≥ 1.
	MaxConcurrency int
	// MaxRate bounds fetches per second (burst ceil(MaxRate)). 0 = no rate
	// limit, the concurrency limit alone bounds the origin.
	MaxRate float64
	// SlowStart is how long the concurrency limit takes to ramp from
	// max(1, MaxConcurrency/10) to MaxConcurrency after StartRamp.
	// 0 = no ramp.
	SlowStart time.Duration
	// QueueTimeout is how long AcquireWait waits for a slot before it
	// refuses. 0 = no waiting (refused at once, like Acquire).
	QueueTimeout time.Duration
}

// Validate reports every problem in l, joined.
func (l OriginLimits) Validate() error {
	var errs []error
	if l.MaxConcurrency < 1 {
		errs = append(errs, fmt.Errorf("admission: origin max_concurrency must be ≥ 1, got %d", l.MaxConcurrency))
	}
	if !(l.MaxRate >= 0) || math.IsInf(l.MaxRate, 0) {
		errs = append(errs, fmt.Errorf("admission: origin max_rate must be a finite number ≥ 0 (0 = none), got %v", l.MaxRate))
	}
	if l.SlowStart < 0 {
		errs = append(errs, fmt.Errorf("admission: origin slow_start must be ≥ 0, got %v", l.SlowStart))
	}
	if l.QueueTimeout < 0 {
		errs = append(errs, fmt.Errorf("admission: origin queue_timeout must be ≥ 0, got %v", l.QueueTimeout))
	}
	return errors.Join(errs...)
}

// noRamp marks an origin that has never ramped.
const noRamp = math.MinInt64

// Origin is one upstream's fetch budget on this node. All methods are safe
// for concurrent use.
type Origin struct {
	name string
	cfg  atomic.Pointer[originConfig]
	// rampStart is the UnixNano of the last StartRamp, or noRamp.
	rampStart atomic.Int64
	// reserveHigh: see SetReserveHigh.
	reserveHigh atomic.Bool

	// mu makes Acquire's check-then-take atomic across the total and the
	// per-tenant counts. Only misses take it, never a hit.
	mu sync.Mutex
	// byTenant counts in-flight fetches per tenant; entries are deleted at
	// zero so the map holds only tenants with fetches in flight. Guarded
	// by mu.
	byTenant map[*Tenant]int
	// inFlight is written under mu and read lock-free by InFlight.
	inFlight atomic.Int64
	// wake, when not nil, is closed (and cleared) by the next Release or
	// SetLimits: AcquireWait's waiters sleep on it. Guarded by mu.
	wake chan struct{}

	acquired atomic.Uint64
	rejected [NumReasons]atomic.Uint64
}

// originConfig is immutable once stored; SetLimits stores a new one.
type originConfig struct {
	limits OriginLimits
	lim    *rate.Limiter // nil when MaxRate is 0
}

// OriginStats is a snapshot of an Origin's counters for metrics.
type OriginStats struct {
	Name     string
	Limits   OriginLimits
	InFlight int
	// Limit is the effective concurrency limit (slow start applied).
	Limit int
	// Ramping is true while slow start holds Limit below MaxConcurrency.
	Ramping  bool
	Acquired uint64
	// Rejected counts refusals by Reason.
	Rejected ReasonCounts
}

// NewOrigin returns the budget for origin name, at full limit (no ramp)
// and with a full rate bucket.
func NewOrigin(name string, l OriginLimits) (*Origin, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("admission: origin %q: %w", name, err)
	}
	o := &Origin{name: name, byTenant: make(map[*Tenant]int)}
	o.rampStart.Store(noRamp)
	o.cfg.Store(newOriginConfig(l, nil, time.Time{}))
	return o, nil
}

// newOriginConfig keeps the rate bucket of old (re-limited at now) when
// there was one, so a reload does not refill it.
func newOriginConfig(l OriginLimits, old *originConfig, now time.Time) *originConfig {
	c := &originConfig{limits: l}
	if l.MaxRate == 0 {
		return c
	}
	burst := ceilAtLeast1(l.MaxRate)
	if old != nil && old.lim != nil {
		old.lim.SetLimitAt(now, rate.Limit(l.MaxRate))
		old.lim.SetBurstAt(now, burst)
		c.lim = old.lim
		return c
	}
	c.lim = rate.NewLimiter(rate.Limit(l.MaxRate), burst)
	return c
}

// SetLimits replaces the budget at now (config reload). In-flight fetches
// stay counted; the rate bucket keeps its tokens. An invalid l changes
// nothing.
func (o *Origin) SetLimits(l OriginLimits, now time.Time) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("admission: origin %q: %w", o.name, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cfg.Store(newOriginConfig(l, o.cfg.Load(), now))
	o.wakeLocked()
	return nil
}

// Name is the origin's name, for metric labels.
func (o *Origin) Name() string { return o.name }

// StartRamp starts slow start at now: call it when the origin's breaker
// closes. A ramp in progress restarts from the bottom.
func (o *Origin) StartRamp(now time.Time) { o.rampStart.Store(now.UnixNano()) }

// Limit is the effective concurrency limit at now.
func (o *Origin) Limit(now time.Time) int {
	return o.cfg.Load().limitAt(now, o.rampStart.Load())
}

func (c *originConfig) limitAt(now time.Time, rampStart int64) int {
	full := c.limits.MaxConcurrency
	if c.limits.SlowStart <= 0 || rampStart == noRamp {
		return full
	}
	elapsed := now.UnixNano() - rampStart
	if elapsed >= int64(c.limits.SlowStart) {
		return full
	}
	lo := max(1, full/10)
	if elapsed <= 0 {
		return lo
	}
	return lo + int(float64(full-lo)*float64(elapsed)/float64(c.limits.SlowStart))
}

// InFlight is the number of fetches holding a slot.
func (o *Origin) InFlight() int { return int(o.inFlight.Load()) }

// Acquire asks for one fetch slot at now on behalf of t (nil: no tenant,
// e.g. a background refresh, checked against the budget only). On None the
// slot is taken and the caller must call Release(t) exactly once. Otherwise
// the caller is refused at once with the reason and a Retry-After hint.
// Refusals are also counted on t. It is AcquireWait at Normal priority
// without waiting.
func (o *Origin) Acquire(now time.Time, t *Tenant) (reason Reason, retryAfter time.Duration) {
	c := o.cfg.Load()
	o.mu.Lock()
	reason = o.tryLocked(c, now, t, Normal)
	o.mu.Unlock()
	return o.count(c, now, t, reason)
}

// tryLocked takes a slot for t at priority prio, or says why not.
func (o *Origin) tryLocked(c *originConfig, now time.Time, t *Tenant, prio Priority) Reason {
	limit := c.limitAt(now, o.rampStart.Load())
	n := int(o.inFlight.Load())
	switch {
	case n >= limit:
		return Concurrency
	case n >= prioritySlots(prio, limit, o.reserveHigh.Load()):
		return Shed
	case t != nil && o.byTenant[t] >= shareSlots(t.originShare(), limit):
		return OriginShare
	case c.lim != nil && !c.lim.AllowN(now, 1):
		// Checked last: the token is taken only when the slot is granted.
		return Rate
	}
	o.inFlight.Add(1)
	if t != nil {
		o.byTenant[t]++
	}
	return None
}

// count records the outcome of an acquisition and returns it with its
// Retry-After hint.
func (o *Origin) count(c *originConfig, now time.Time, t *Tenant, reason Reason) (Reason, time.Duration) {
	if reason == None {
		o.acquired.Add(1)
		return None, 0
	}
	o.rejected[reason].Add(1)
	if t != nil {
		t.rejected[reason].Add(1)
	}
	if reason == Rate {
		return Rate, bucketRetryAfter(c.lim, now)
	}
	return reason, minRetryAfter
}

// Release gives back the slot Acquire(now, t) took; t must be the same.
// An unmatched Release is ignored rather than letting counts go negative.
func (o *Origin) Release(t *Tenant) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t != nil {
		n, ok := o.byTenant[t]
		if !ok {
			return
		}
		if n <= 1 {
			delete(o.byTenant, t)
		} else {
			o.byTenant[t] = n - 1
		}
	}
	if o.inFlight.Load() > 0 {
		o.inFlight.Add(-1)
	}
	o.wakeLocked()
}

// wakeLocked wakes every AcquireWait waiter; they compete for the slot
// again. o.mu must be held.
func (o *Origin) wakeLocked() {
	if o.wake != nil {
		close(o.wake)
		o.wake = nil
	}
}

// TenantInFlight is the number of fetches t holds on this origin.
func (o *Origin) TenantInFlight(t *Tenant) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byTenant[t]
}

// Stats returns a snapshot of the counters, with the limit at now.
func (o *Origin) Stats(now time.Time) OriginStats {
	c := o.cfg.Load()
	s := OriginStats{
		Name:     o.name,
		Limits:   c.limits,
		InFlight: o.InFlight(),
		Limit:    c.limitAt(now, o.rampStart.Load()),
		Acquired: o.acquired.Load(),
	}
	s.Ramping = s.Limit < c.limits.MaxConcurrency
	for i := range s.Rejected {
		s.Rejected[i] = o.rejected[i].Load()
	}
	return s
}
