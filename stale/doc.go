// Package stale decides, for a SHARED cache, what RFC 9111 and RFC 5861 allow:
// whether an origin response may be stored, how long it stays fresh, how long
// it may be served stale (stale-while-revalidate, stale-if-error), how old a
// stored response is, what to do with it at serve time, and whether a client's
// conditional request can be answered 304 from the cache.
//
// Section numbers without an RFC named (§4.2) are RFC 9111's, in this
// package's comments and test names alike.
//
// The package is pure: it takes []byte header values, plain facts and
// time.Time instants (never fasthttp types, never the wall clock), so the
// proxy extracts values from its own request objects and tests drive fixed
// instants. The functions used on a cache hit ([Directives.Parse],
// [ParseHTTPDate], [Classify], [ETagMatch], [ETagMatchStrong], [NotModifiedSince], [ModifiedSince], [ParseAge],
// [AppendAge], [TTL]) allocate nothing; alloc_test.go asserts it.
//
// # Invariants
//
//   - Input never panics: every parser is garbage tolerant and has a fuzz test.
//   - Anything doubtful errs towards not storing and not serving stale: a
//     wrong "miss" costs an origin fetch, a wrong "hit" serves someone else's
//     or an outdated answer.
//   - Stale windows are measured from the end of freshness (age − lifetime),
//     so a failed refresh never restarts them.
//
// # Decisions the RFCs leave open (and docs/architecture.md §5 does not state)
//
// Cache-Control parsing ([Directives]):
//   - The first occurrence of a duplicated directive wins, even when its
//     argument is invalid (RFC 9111 §4.2.1), across all field lines parsed
//     into the same Directives.
//   - Arguments may be tokens or quoted-strings for every directive (RFC 9111
//     §5.2); OWS around "=" is tolerated. An element's name is everything
//     before its first "=", so "no-store foo" is an unknown directive.
//   - Invalid max-age / s-maxage arguments (missing, empty, not all digits,
//     garbage after a closing quote) mean 0, i.e. stale; invalid arguments of
//     the other delta directives mean "absent". max-stale without "=" sets
//     MaxStaleAny (RFC 9111 §5.2.1.2).
//   - Overflowing delta-seconds clamp to [MaxDeltaSeconds] = 2^31−1: RFC 9111
//     §1.2.2 allows "the greatest positive integer it can conveniently
//     represent", and 2^31−1 stays positive in any signed 32-bit entry field.
//   - no-cache="field" and private="field" (RFC 9111 §5.2.2.4, §5.2.2.7)
//     leave the response storable; the caller stores it without the named
//     fields (Directives.NoCacheFields, PrivateFields, ListHas). A malformed
//     or empty field list reads as the plain directive.
//
// Storing ([Storable]):
//   - Only GET and HEAD (case-sensitive, RFC 9110 §9.1) are cached; 206 and
//     304 responses are never stored as such (no range support; a 304 only
//     refreshes an entry, which is the caller's job).
//   - Without explicit freshness (Expires, max-age, s-maxage) only
//     heuristically cacheable statuses (RFC 9110 §15.1: 200 203 204 300 301
//     308 404 405 410 414 501) or responses marked public (RFC 9111 §5.2.2.9)
//     are stored.
//   - must-understand (RFC 9111 §5.2.2.3): this cache "understands" exactly
//     the heuristically cacheable statuses above; for them no-store is ignored
//     when must-understand is present, every other status is not stored.
//   - A response that could never be reused — no explicit freshness, no route
//     DefaultTTL, no Last-Modified (so no heuristic) and no validator — is not
//     stored (ReasonNoFreshness).
//   - An empty header value counts as absent (an empty Expires does not mean
//     "already expired"); a present but unparsable Expires does.
//
// Freshness ([Lifetime], [Windows]):
//   - A no-cache response is stored with lifetime 0 and no stale windows: it
//     must be revalidated on every use (RFC 9111 §5.2.2.4, §4.2.4).
//   - Policy.DefaultTTL replaces the heuristic, so it applies only where a
//     heuristic would be allowed (heuristically cacheable status or public)
//     and never makes, say, a 500 or a 302 without explicit freshness
//     reusable.
//   - The heuristic is 10% of (Date − Last-Modified), capped at 24h
//     ([MaxHeuristic]), so a years-old Last-Modified cannot pin a response
//     for months.
//   - s-maxage implies proxy-revalidate for a shared cache (RFC 9111
//     §5.2.2.10), so a response with s-maxage never gets the route's default
//     stale windows. But when the origin sends s-maxage together with an
//     explicit stale-while-revalidate or stale-if-error (the common
//     "s-maxage=60, stale-while-revalidate=30"), that RFC 5861 directive is
//     the more specific permission for this very response, and it is
//     honoured, as Varnish, Fastly and Cloudflare do. must-revalidate,
//     proxy-revalidate and no-cache still forbid any stale service.
//   - Stale windows come from the response, else from the route Policy, and
//     both are capped by Policy.MaxStale; MaxStale ≤ 0 therefore means "never
//     serve stale", which makes the zero Policy the conservative one.
//
// Serving ([Classify]):
//   - Request no-cache (or Pragma: no-cache without Cache-Control, see
//     [PragmaNoCache]) and max-age=0 always revalidate. When the stored copy
//     is still fresh, or stale inside its stale-if-error window, it is
//     classified StaleIfErrorOnly: fetch, and use the copy only if the origin
//     fails — a shield answers an outage with its copy rather than a 502.
//   - Request max-stale is ignored: a client cannot widen the stale service
//     the origin and the route allowed (RFC 9111 §4.2.4 makes it optional).
//     Request only-if-cached and no-store are the caller's to honour (answer
//     504 instead of fetching; do not store).
//
// Dates ([ParseHTTPDate]): the three RFC 9110 §5.6.7 formats, month and day
// names case-insensitive and the weekday not checked against the date (as
// net/http does), second 60 rejected (as net/http does), and two-digit RFC 850
// years mapped like Go's time package (69–99 → 19xx, 00–68 → 20xx) rather
// than by the RFC's "50 years in the future" rule, which would need a clock.
package stale
