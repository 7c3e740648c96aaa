// Package proxy is shield's request path (docs/architecture.md §1): route,
// admit, key, owner, lookup, coalesce, fetch, store, respond, plus the
// admin and peer listeners' handlers. With proxy/httpx, its leaf helpers
// (header names, dates, tracked connections, Early Hints, certificates),
// it is the only code that touches fasthttp request and response objects.
// The pure decisions live elsewhere — cache keys in cachekey, freshness
// and storability in stale, tenant and origin limits in admission,
// breakers and the retry budget in breaker, routes and the peer set in
// routing — and are called with plain values. The cluster is in
// proxy/cluster, which reaches this package through cluster.Local
// (peerlocal.go); the cache and the origins are still in this package;
// docs/architecture.md §2 says which imports the rooms they move to may
// have (internal/importrules enforces it).
//
// Files, in request order (internal/doccheck checks that the list names
// every non-test file of the directory and nothing else):
//
//	proxy.go             Proxy, New, Apply: the configuration in force, lifecycle, Close
//	servers.go           the public and peer fasthttp servers; cluster options from config
//	h2.go                HTTP/2 on the public listener (ALPN or h2c) beside fasthttp
//	sanitize.go          one meaning per request: target, Host and fields made canonical
//	serve.go             handler: target checks, route, key, owner,
//	                     lookup, fresh hit (0 allocations), stale-while-revalidate
//	admit.go             Host validation, tenant identity, admission, 429
//	overload.go          priority, cost, queue timeout, TTL jitter, eager refresh, shuffle shard
//	encoding.go          Accept-Encoding canonicalisation: one variant per preference
//	ranges.go            Range requests cut from the stored whole object
//	cachestatus.go       the Cache-Status field, written here only
//	peerlocal.go         the cluster's side of the node: SetCluster, cluster.Local,
//	                     the forwarded request built for the owner (forwardToOwner)
//	nearcopy.go          near copies of hot keys kept from the owner's answer
//	fetch.go             misses: coalescing, origin fetch for the cache, stale-if-error,
//	                     background refresh, storing
//	pass.go              pass-through (unsafe methods, bypass), invalidation, body streaming
//	compress.go          compression at the shield: coding negotiation, coded sibling
//	                     entries, compressing passed-through answers
//	origin.go            one protected origin call: budget, breaker, retry
//	originservers.go     an origin's servers: pools, TLS dialing, health checks
//	coalesce.go          in-flight fetches per key
//	upstream.go          what is forwarded both ways (hop-by-hop, X-Forwarded-*, Via)
//	freshness.go         origin response → stale.Facts → storable / lifetime / windows
//	entry.go             the versioned cache entry codec
//	entryage.go          an entry's age and freshness at a time
//	hithead.go           a hit's head: parsed heads copied into the answer
//	store.go             fastcache, pieces for large entries, snapshots
//	inval.go             invalidation ordering: one clock, URL and tag invalidations
//	purge.go             purge by URL (hard, soft) and by namespace
//	handoff.go           hand-off entries: the ones handed over, the ones taken
//	status.go            the admin status page's data and event log
//	metrics.go, metrics_help.go, metrics_runtime.go, admin.go
//	                     Prometheus metrics and admin API
//
// Invariants:
//
//   - A fresh hit allocates nothing: per-request buffers come from a pool,
//     the entry is read into the response's own body buffer and handed
//     back truncated to the body (SwapBody), metric handles are resolved
//     when a configuration is applied (hit_alloc_test.go asserts 0).
//   - Nothing keeps a RequestCtx or its byte slices past the handler:
//     background refreshes get a copied request; waiters read an encoded
//     entry owned by the flight, never the leader's response.
//   - Every failure of the cache or cluster machinery is a miss (or a
//     stale answer), never a wrong or foreign one: corrupt entries, entries
//     stored under another key, missing pieces, an owner that fails or
//     answers 421, are all served as if the cache did not have the key.
//   - Configuration in force is an immutable value behind an atomic
//     pointer; Apply builds a new one and keeps what must survive a
//     reload (tenant buckets, origin budgets, breakers, metric counters).
package proxy
