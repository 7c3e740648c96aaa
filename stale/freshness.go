package stale

import "time"

// MaxHeuristic caps the heuristic freshness lifetime (RFC 9111 §4.2.2 leaves
// the cap to the cache; 24h bounds how long a guess can be wrong).
const MaxHeuristic = 24 * time.Hour

// heuristicFraction is the share of (Date − Last-Modified) a heuristic
// lifetime may use, the 10% RFC 9111 §4.2.2 suggests.
const heuristicFraction = 10

// Lifetime returns the freshness lifetime of a response for a shared cache
// (RFC 9111 §4.2.1), in order:
//
//   - no-cache: 0, revalidate on every use (RFC 9111 §5.2.2.4);
//   - s-maxage, else max-age;
//   - Expires − Date (ResponseTime without a valid Date); an invalid Expires
//     is already expired (RFC 9111 §5.3); never negative;
//   - where a heuristic is allowed (heuristically cacheable status or
//     public; RFC 9111 §4.2.2): the route's DefaultTTL if > 0, else 10% of
//     Date − Last-Modified, capped at MaxHeuristic;
//   - 0.
func Lifetime(f *Facts, p Policy) time.Duration {
	cc := orNone(f.CC)
	switch {
	case cc.NoCache:
		return 0
	case cc.SMaxAge >= 0:
		return seconds(cc.SMaxAge)
	case cc.MaxAge >= 0:
		return seconds(cc.MaxAge)
	case len(f.Expires) > 0:
		exp, ok := ParseHTTPDate(f.Expires)
		if !ok {
			return 0
		}
		return clampAge(exp.Sub(f.date()))
	case !heuristicAllowed(f.Status, cc):
		return 0
	case p.DefaultTTL > 0:
		return p.DefaultTTL
	}
	lm, ok := ParseHTTPDate(f.LastModified)
	if !ok {
		return 0
	}
	return min(clampAge(f.date().Sub(lm))/heuristicFraction, MaxHeuristic)
}

// Windows returns the stale-while-revalidate and stale-if-error windows
// (RFC 5861) of a response with Cache-Control cc (nil: none) under route
// policy p. Each comes from the response's directive, else from the policy
// default, and is capped at p.MaxStale (≤ 0: no stale service). Both are 0
// when the response forbids stale service to a shared cache: must-revalidate,
// proxy-revalidate, no-cache, or s-maxage, which implies proxy-revalidate
// (RFC 9111 §4.2.4, §5.2.2.10). The windows start at the end of freshness.
func Windows(cc *Directives, p Policy) (swr, sie time.Duration) {
	cc = orNone(cc)
	if cc.MustRevalidate || cc.ProxyRevalidate || cc.NoCache || p.MaxStale <= 0 {
		return 0, 0
	}
	// s-maxage implies proxy-revalidate (RFC 9111 §5.2.2.10), so route
	// defaults never apply to it. But an origin that sends s-maxage
	// together with an explicit stale-while-revalidate or stale-if-error
	// (the common "s-maxage=60, stale-while-revalidate=30") states the
	// more specific RFC 5861 permission for exactly this response; we
	// honour it, as other shared caches do.
	if cc.SMaxAge < 0 {
		swr, sie = p.StaleWhileRevalidate, p.StaleIfError
	}
	if cc.StaleWhileRevalidate >= 0 {
		swr = seconds(cc.StaleWhileRevalidate)
	}
	if cc.StaleIfError >= 0 {
		sie = seconds(cc.StaleIfError)
	}
	return min(max(swr, 0), p.MaxStale), min(max(sie, 0), p.MaxStale)
}
