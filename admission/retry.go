package admission

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// MaxRetryAfter caps every Retry-After hint. A tenant configured with a
// tiny rate would otherwise be told to come back in days; an hour is longer
// than any client honours anyway.
const MaxRetryAfter = time.Hour

// minRetryAfter is the hint when nothing better is known (concurrency,
// origin share): in-flight requests typically finish well within a second.
const minRetryAfter = time.Second

// roundingSlack absorbs float error, so that 1.0000000000000002 s rounds
// to 1 s, not 2 s.
const roundingSlack = 1e-9

// retryAfterSeconds rounds secs up to whole seconds within
// [1 s, MaxRetryAfter]. NaN and ±Inf give MaxRetryAfter (or 1 s for -Inf).
func retryAfterSeconds(secs float64) time.Duration {
	s := math.Ceil(secs - roundingSlack)
	switch {
	case s < 1:
		return minRetryAfter
	case !(s < MaxRetryAfter.Seconds()): // also NaN
		return MaxRetryAfter
	}
	return time.Duration(s) * time.Second
}

// bucketRetryAfter is the time until lim holds one token at now.
func bucketRetryAfter(lim *rate.Limiter, now time.Time) time.Duration {
	return bucketRetryAfterN(lim, now, 1)
}

// bucketRetryAfterN is bucketRetryAfter for a request costing n tokens:
// the time until n are there.
func bucketRetryAfterN(lim *rate.Limiter, now time.Time, n int) time.Duration {
	limit := float64(lim.Limit())
	if limit <= 0 {
		return MaxRetryAfter
	}
	return retryAfterSeconds((float64(n) - lim.TokensAt(now)) / limit)
}
