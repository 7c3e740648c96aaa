package admission

import (
	"fmt"
	"math"
	"time"
)

// Priority orders fetches when an origin's concurrency budget is the
// bottleneck: Low is refused first, then Normal, and High keeps a
// reserved share.
//
// The rule, in slots of the effective limit (slow start applied),
// floor(fraction × limit), at least 1:
//
//   - Low may hold fetches while fewer than 50% of the slots are taken;
//   - Normal while fewer than 80% are taken when the budget reserves for
//     High (SetReserveHigh: some route of the origin is high),
//     else up to all of them, so a configuration without priorities
//     behaves as before;
//   - High up to all of them.
//
// The caps bound the total in flight, not each priority's own count: a
// Low fetch is refused once half the budget is busy, whoever holds it,
// so Low traffic can never make High wait.
type Priority uint8

const (
	// Normal is the default priority.
	Normal Priority = iota
	// Low is shed first.
	Low
	// High keeps the reserved share.
	High

	numPriorities = int(High) + 1
)

var priorityNames = [numPriorities]string{Normal: "normal", Low: "low", High: "high"}

// String returns the configuration and metric label value.
func (p Priority) String() string {
	if int(p) < numPriorities {
		return priorityNames[p]
	}
	return "unknown"
}

// ParsePriority parses "low", "normal" or "high"; "" is Normal.
func ParsePriority(s string) (Priority, error) {
	if s == "" {
		return Normal, nil
	}
	for i, n := range priorityNames {
		if n == s {
			return Priority(i), nil
		}
	}
	return Normal, fmt.Errorf("admission: priority must be low, normal or high, got %q", s)
}

// Priority caps, as fractions of the effective limit.
const (
	lowFraction           = 0.5
	normalReserveFraction = 0.8
)

// prioritySlots is how many fetches may be in flight in total for one of
// priority p still to be admitted.
func prioritySlots(p Priority, limit int, reserveHigh bool) int {
	f := 1.0
	switch {
	case p == Low:
		f = lowFraction
	case p == Normal && reserveHigh:
		f = normalReserveFraction
	}
	if f >= 1 {
		return limit
	}
	return max(1, min(limit, int(math.Floor(f*float64(limit)+roundingSlack))))
}

// AcquireWait is Acquire at priority p, waiting up to the origin's
// QueueTimeout for a slot when the budget (or p's cap) is what refuses:
// a request that cannot get a slot within it is refused then, never
// parked longer. Rate and origin-share refusals are immediate (waiting
// for a slot would not change them). After a wait the reason is
// QueueTimeout when the whole budget was busy, Shed when only p's cap
// was. Refusals without waiting (QueueTimeout 0) are Concurrency or Shed.
//
// Waiting allocates a timer and a channel; taking a free slot does not.
func (o *Origin) AcquireWait(now time.Time, t *Tenant, p Priority) (reason Reason, retryAfter time.Duration) {
	c := o.cfg.Load()
	o.mu.Lock()
	reason = o.tryLocked(c, now, t, p)
	wait := c.limits.QueueTimeout
	if (reason != Concurrency && reason != Shed) || wait <= 0 {
		o.mu.Unlock()
		return o.count(c, now, t, reason)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if o.wake == nil {
			o.wake = make(chan struct{})
		}
		ch := o.wake
		o.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			if reason == Concurrency {
				reason = QueueTimeout
			}
			return o.count(c, time.Now(), t, reason)
		}
		now = time.Now()
		c = o.cfg.Load()
		o.mu.Lock()
		reason = o.tryLocked(c, now, t, p)
		if reason != Concurrency && reason != Shed {
			o.mu.Unlock()
			return o.count(c, now, t, reason)
		}
	}
}

// SetReserveHigh says whether the top 20% of the budget is kept for High
// priority fetches (Normal ones may then hold at most 80% of it); the
// proxy sets it when some route of the origin is high. Without it Normal
// may use the whole budget. Waiters are woken to look again.
func (o *Origin) SetReserveHigh(v bool) {
	if o.reserveHigh.Swap(v) != v {
		o.mu.Lock()
		o.wakeLocked()
		o.mu.Unlock()
	}
}
