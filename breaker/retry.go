package breaker

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults for [NewRetryBudget] (docs/architecture.md §7: "a fraction of recent
// requests").
const (
	DefaultRetryRatio     = 0.2
	DefaultRetryMinPerSec = 3
	DefaultRetryWindow    = 10 * time.Second
)

// retryBuckets is how many buckets one retry window is split into; the
// window slides one bucket (window/10) at a time.
const retryBuckets = 10

// RetryBudget bounds retries to an origin: over a sliding window it grants
// max(ratio × fetches, minPerSec × window) retries. The ratio keeps retries a
// small share of the load on a busy origin (a failing origin cannot be hit
// with double traffic); the floor lets a quiet origin still retry. It is
// safe for concurrent use; the clock is the now passed in.
type RetryBudget struct {
	ratio float64
	floor float64       // minPerSec × window
	width time.Duration // window / retryBuckets

	mu      sync.Mutex // guards everything below
	started bool       // base is set
	base    time.Time  // first now seen; bucket epochs count widths from it
	latest  int64      // newest bucket epoch seen; epochs never go back
	buckets [retryBuckets]retryBucket
	granted uint64 // TryRetry returned true
	denied  uint64 // TryRetry returned false
}

type retryBucket struct {
	epoch            int64
	fetches, retries uint64
}

// NewRetryBudget returns a budget granting max(ratio × fetches, minPerSec ×
// window) retries per sliding window. It panics on ratio outside [0, 1],
// minPerSec negative or not finite, or window under 10 ns (one per bucket):
// these come from constants or validated config, so a bad value is a bug.
func NewRetryBudget(ratio, minPerSec float64, window time.Duration) *RetryBudget {
	if !(ratio >= 0 && ratio <= 1) || !(minPerSec >= 0) || math.IsInf(minPerSec, 1) || window < retryBuckets {
		panic(fmt.Sprintf("breaker: NewRetryBudget(%v, %v, %v): ratio must be in [0, 1], minPerSec finite and >= 0, window >= %d ns",
			ratio, minPerSec, window, retryBuckets))
	}
	return &RetryBudget{
		ratio: ratio,
		floor: minPerSec * window.Seconds(),
		width: window / retryBuckets,
	}
}

// Record counts one first fetch attempt at now. Retries are not recorded
// here (TryRetry counts them), so they do not earn more retries.
func (r *RetryBudget) Record(now time.Time) {
	r.mu.Lock()
	r.bucket(now).fetches++
	r.mu.Unlock()
}

// TryRetry spends one retry at now if the budget allows it and reports
// whether it did.
func (r *RetryBudget) TryRetry(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucket(now)
	fetches, retries := r.sum()
	if float64(retries)+1 > max(r.ratio*float64(fetches), r.floor) {
		r.denied++
		return false
	}
	b.retries++
	r.granted++
	return true
}

// Counts returns how many retries TryRetry granted and denied so far, for
// export at scrape time.
func (r *RetryBudget) Counts() (granted, denied uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.granted, r.denied
}

// bucket returns the bucket for now, cleared if it held an older epoch.
// A now older than the newest seen (callers read the clock before taking
// the lock, or a test goes back) counts in the newest bucket, so a late
// caller never wipes newer counts. r.mu must be held.
func (r *RetryBudget) bucket(now time.Time) *retryBucket {
	if !r.started {
		r.started, r.base = true, now
	}
	if e := int64(now.Sub(r.base) / r.width); e > r.latest {
		r.latest = e
	}
	b := &r.buckets[r.latest%retryBuckets]
	if b.epoch != r.latest {
		*b = retryBucket{epoch: r.latest}
	}
	return b
}

// sum adds up the buckets inside the window ending at r.latest. r.mu must
// be held.
func (r *RetryBudget) sum() (fetches, retries uint64) {
	for i := range r.buckets {
		if b := &r.buckets[i]; b.epoch > r.latest-retryBuckets {
			fetches += b.fetches
			retries += b.retries
		}
	}
	return fetches, retries
}
