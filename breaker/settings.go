package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults applied by [Settings.WithDefaults] to zero fields.
const (
	DefaultConsecutiveFailures = 5
	DefaultFailureRatio        = 0.5
	DefaultMinRequests         = 20
	DefaultInterval            = 10 * time.Second
	DefaultOpenFor             = 5 * time.Second
	DefaultHalfOpenProbes      = 3
)

// Bounds checked by [Settings.Validate]. Below the minimum durations the
// breaker would flap on scheduling noise; above the maximums an origin that has
// long recovered would still be cut off, or a failure minutes ago would still
// count.
const (
	MinInterval       = 100 * time.Millisecond
	MaxInterval       = time.Hour
	MinOpenFor        = 100 * time.Millisecond
	MaxOpenFor        = 10 * time.Minute
	MaxHalfOpenProbes = 100
)

// windowBuckets is how many gobreaker buckets one Interval is split into.
const windowBuckets = 10

// Settings configure one origin's breaker. The YAML form is
// `breaker: {consecutive_failures, failure_ratio, min_requests, interval,
// open_for, half_open_probes, trip_on_429, failure_statuses}`. A zero field means its default;
// a negative duration is an error, never a default.
type Settings struct {
	// ConsecutiveFailures trips the breaker when that many calls in a row
	// fail (inside Interval). Default 5.
	ConsecutiveFailures uint32
	// FailureRatio trips the breaker when failures / (successes + failures)
	// reaches it over the last Interval, once MinRequests outcomes are in.
	// In (0, 1]; default 0.5.
	FailureRatio float64
	// MinRequests is the number of outcomes (successes + failures) the
	// window must hold before FailureRatio applies, so that 1 failure out of
	// 2 calls on a quiet origin does not trip it. Default 20.
	MinRequests uint32
	// Interval is the rolling counting window of the closed state, in 10
	// buckets. Keep it longer than the origin timeout (see the package doc).
	// Default 10 s; [MinInterval, MaxInterval].
	Interval time.Duration
	// OpenFor is how long the breaker stays open before it lets probes
	// through. Default 5 s; [MinOpenFor, MaxOpenFor].
	OpenFor time.Duration
	// HalfOpenProbes is how many calls the half-open breaker admits, and how
	// many successes in a row close it. Default 3; at most MaxHalfOpenProbes.
	HalfOpenProbes uint32
	// TooManyRequestsIsFailure makes [Breaker.Classify] count an origin 429
	// as a failure. Off by default: a 429 is usually about one client or
	// tenant, and tripping would cut everybody off.
	TooManyRequestsIsFailure bool
	// FailureStatuses are the answer statuses [Breaker.Classify] counts as
	// failures (besides transport errors, and answers that are not HTTP);
	// every other status is a Success (the origin answered). nil means
	// [DefaultFailureStatuses] (502, 503, 504); an empty, non-nil list
	// counts no status. Codes in [100, 599].
	FailureStatuses []int
}

// WithDefaults returns s with every zero field set to its default.
func (s Settings) WithDefaults() Settings {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if s.FailureRatio == 0 {
		s.FailureRatio = DefaultFailureRatio
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Interval == 0 {
		s.Interval = DefaultInterval
	}
	if s.OpenFor == 0 {
		s.OpenFor = DefaultOpenFor
	}
	if s.HalfOpenProbes == 0 {
		s.HalfOpenProbes = DefaultHalfOpenProbes
	}
	if s.FailureStatuses == nil {
		s.FailureStatuses = DefaultFailureStatuses
	}
	return s
}

// Validate reports every problem with s once defaults are applied, joined
// with errors.Join; nil means [New] accepts s.
func (s Settings) Validate() error {
	s = s.WithDefaults()
	var errs []error
	if math.IsNaN(s.FailureRatio) || s.FailureRatio <= 0 || s.FailureRatio > 1 {
		errs = append(errs, fmt.Errorf("breaker: failure_ratio %v: must be in (0, 1]", s.FailureRatio))
	}
	if s.Interval < MinInterval || s.Interval > MaxInterval {
		errs = append(errs, fmt.Errorf("breaker: interval %v: must be in [%v, %v]", s.Interval, MinInterval, MaxInterval))
	}
	if s.OpenFor < MinOpenFor || s.OpenFor > MaxOpenFor {
		errs = append(errs, fmt.Errorf("breaker: open_for %v: must be in [%v, %v]", s.OpenFor, MinOpenFor, MaxOpenFor))
	}
	if s.HalfOpenProbes > MaxHalfOpenProbes {
		errs = append(errs, fmt.Errorf("breaker: half_open_probes %d: must be at most %d", s.HalfOpenProbes, MaxHalfOpenProbes))
	}
	if err := ValidateStatuses(s.FailureStatuses); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
