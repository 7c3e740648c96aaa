// Package proxy is shield's request path (docs/architecture.md §1) and the only package
// that touches fasthttp request and response objects: route, admit, key,
// owner, lookup, coalesce, fetch, store, respond, plus the admin and peer
// listeners' handlers. The pure decisions live elsewhere — cache keys in
// cachekey, freshness and storability in stale, tenant and origin limits
// in admission, breakers and the retry budget in breaker, routes and the
// peer set in routing — and are called with plain values.
//
// Files, in request order:
//
//	serve.go     handler: target checks, route, key, owner,
//	             lookup, fresh hit (0 allocations), stale-while-revalidate
//	admit.go     Host validation, tenant identity, admission, 429
//	cluster.go   forwarding to the key's owner, peer listener, purge fan-out
//	nearcopy.go  near copies of hot keys, previous-owner read-through
//	fetch.go     misses: coalescing, origin fetch for the cache, stale-if-error,
//	             background refresh, storing
//	pass.go      pass-through (unsafe methods, bypass), invalidation, body streaming
//	compress.go  compression at the shield: coding negotiation, coded sibling
//	             entries, compressing passed-through answers
//	origin.go    one protected origin call: budget, breaker, retry
//	coalesce.go  in-flight fetches per key
//	upstream.go  what is forwarded both ways (hop-by-hop, X-Forwarded-*, Via)
//	freshness.go origin response → stale.Facts → storable / lifetime / windows
//	entry.go     the versioned cache entry codec
//	hithead.go   a hit's head: parsed heads copied into the answer
//	store.go     fastcache, pieces for large entries, snapshots
//	purge.go     purge by URL (hard, soft) and by namespace
//	hot.go       sampled hot-key table (near copies, hand-off)
//	handoff.go   pushing hot entries to new owners on a graceful leave
//	metrics.go, metrics_help.go, admin.go   Prometheus metrics and admin API
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
