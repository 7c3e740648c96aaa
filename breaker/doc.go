// Package breaker protects each origin with a circuit breaker and bounds
// retries with a retry budget (docs/architecture.md §7).
//
// A [Breaker] wraps github.com/sony/gobreaker/v2 (the TwoStep form, so the
// caller decides when an origin call starts and ends). Closed lets calls
// through and counts outcomes; it trips to Open on ConsecutiveFailures
// failures in a row, or when at least MinRequests calls have an outcome in the
// last Interval and the failed share is at least FailureRatio. Open makes no
// origin call at all: [Breaker.Allow] returns [ErrOpen] at once and the caller
// serves a stale copy or 503 with Retry-After from [Breaker.RetryAfter]. After
// OpenFor the breaker is HalfOpen and admits HalfOpenProbes probes; that many
// successes in a row close it, one failure opens it again, and every other
// call gets [ErrTooManyProbes] (treat it like ErrOpen).
//
// Invariants and decisions that docs/architecture.md does not state:
//
//   - The package is pure: no fasthttp, no metrics library, no logger. State,
//     transition counts and outcome counts are plain atomics read by
//     [Breaker.Stats] at scrape time; the state gauge value is the State's
//     numeric value (Closed 0, HalfOpen 1, Open 2).
//   - Counting uses gobreaker's rolling window: Interval is split into 10
//     buckets, so old outcomes fall out one bucket at a time instead of all at
//     once at a fixed boundary. Consecutive failures also only count inside the
//     window. Keep Interval longer than the origin timeout: gobreaker drops the
//     outcome of a call that started more than Interval before it ended.
//   - The ratio is failures / (successes + failures): calls still in flight and
//     Ignored outcomes are not in the denominator, so a flood of client
//     cancellations cannot dilute (or inflate) the ratio.
//   - Ignored outcomes (client cancellation, budget or admission rejections
//     such as fasthttp.ErrNoFreeConns, 429 unless configured otherwise) neither
//     trip nor heal the breaker; in HalfOpen an ignored probe frees its slot.
//     The zero [Outcome] is Ignored, so a forgotten assignment is harmless.
//   - [Classify] counts 4xx other than 429 as Success, not Ignored: the origin
//     answered, which is what Envoy's outlier detection and nginx max_fails
//     assume too, and it lets a half-open breaker close on routes whose probes
//     happen to be 404s. Of the 5xx only the failure statuses count
//     (Settings.FailureStatuses, default 502, 503, 504: what a down,
//     overloaded or unreachable origin answers on every path); an
//     application's 500 is a Success for the same reason as a 404, so one
//     endpoint failing on every request, however large its share of the
//     traffic, does not open the breaker for the healthy ones. Every error
//     other than context.Canceled is a Failure, because an error we cannot
//     name is the origin's until proven otherwise; callers map their own
//     not-the-origin's errors to Ignored before reporting. Serving stale
//     on error (RFC 5861 stale-if-error: 500, 502, 503, 504) is the
//     caller's separate decision and still covers a 500.
//   - A HalfOpen probe whose outcome is never reported keeps its slot until the
//     breaker changes state, so [Call.Done] must be called exactly once on every
//     path (defer it). Done on the zero Call is a no-op, which makes the error
//     path safe.
//   - The onChange callback runs with gobreaker's mutex held: it must be quick
//     (atomic store, counter, non-blocking send) and must not call the Breaker.
//
// Retries (docs/architecture.md §7): at most one retry, only for idempotent methods
// ([Idempotent]), only when the first attempt failed to connect or lost its
// connection before a response ([Retryable]; timeouts are never retried, a slow
// origin must not get twice the load), and only when [RetryBudget.TryRetry]
// grants it. The budget allows, over a sliding window (default 10 s, in 10
// buckets), max(ratio × fetches, minPerSec × window) retries: 20% of recent
// fetches by default, with a floor of 3 per second so a quiet origin can still
// retry. Record counts first attempts only; retries are counted by TryRetry.
package breaker
