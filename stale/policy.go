package stale

import "time"

// Policy is a route's cache policy, as far as freshness is concerned. The
// zero Policy is the conservative one: no default lifetime (RFC heuristics
// only), no stale service, no Set-Cookie responses stored.
type Policy struct {
	// DefaultTTL is the freshness lifetime of responses without explicit
	// freshness, used instead of the Last-Modified heuristic and only where
	// a heuristic is allowed. ≤ 0: use the heuristic.
	DefaultTTL time.Duration
	// StaleWhileRevalidate is the RFC 5861 window used when the response
	// carries no stale-while-revalidate. ≤ 0: none.
	StaleWhileRevalidate time.Duration
	// StaleIfError is the RFC 5861 window used when the response carries no
	// stale-if-error. ≤ 0: none.
	StaleIfError time.Duration
	// MaxStale caps both windows, whatever the origin says. ≤ 0: no stale
	// service at all.
	MaxStale time.Duration
	// AllowSetCookie stores responses that carry Set-Cookie. False: they
	// are never stored (they would hand one client's cookie to others).
	AllowSetCookie bool
}
