// Package proxy is shield's request path (docs/architecture.md §1): route,
// admit, key, owner, lookup, coalesce, fetch, store, respond, plus the
// admin and peer listeners' handlers. With proxy/httpx, its leaf helpers
// (header names, dates, tracked connections, Early Hints, certificates),
// and proxy/upstream, the origins, it is the only code that touches
// fasthttp request and response objects.
// The pure decisions live elsewhere — cache keys in cachekey, freshness
// and storability in stale, tenant and origin limits in admission,
// breakers and the retry budget in breaker, routes and the peer set in
// routing — and are called with plain values. The rooms beside it: the
// cache (entries, store, invalidations, namespaces, the ordering of
// writes) is proxy/cache; the origins (servers, health, budget, breaker,
// one protected call, and the registry that keeps their state across
// reloads) are proxy/upstream; the cluster (forwarding transport, peer
// listener, purge log and sync, usage exchange, hand-off) is
// proxy/cluster, which reaches this package only through cluster.Local
// (peerlocal.go); the public listener's HTTP/1.x and HTTP/2 servers are
// proxy/listener. Which imports each room may have is
// docs/architecture.md §2 (internal/importrules enforces it).
//
// Files, in request order (internal/doccheck checks that the list names
// every non-test file of the directory and nothing else):
//
//	proxy.go             Proxy, New, Apply: the configuration in force, lifecycle, Close
//	servers.go           the public and peer fasthttp servers (HTTP/2 beside them: proxy/listener);
//	                     cluster options from config
//	sanitize.go          one meaning per request: target, Host and fields made canonical
//	serve.go             handler: target checks, route, key, owner,
//	                     lookup, fresh hit (0 allocations), stale-while-revalidate
//	admit.go             Host validation, tenant identity, admission, 429
//	overload.go          route priority and cost, shed counts, TTL jitter, eager refresh
//	encoding.go          Accept-Encoding canonicalisation: one variant per preference
//	ranges.go            Range requests cut from the stored whole object
//	cachestatus.go       the Cache-Status field, written here only
//	peerlocal.go         the cluster's side of the node: SetCluster, cluster.Local,
//	                     the forwarded request built for the owner (forwardToOwner)
//	nearcopy.go          near copies of hot keys kept from the owner's answer
//	peerentry.go         entry answers: a forwarded fresh hit's stored entry,
//	                     sent by the owner as it is and served by the edge as a hit
//	fetch.go             misses: coalescing, origin fetch for the cache (through
//	                     proxy/upstream), stale-if-error,
//	                     background refresh, storing
//	pass.go              pass-through (unsafe methods, bypass), invalidation, body streaming
//	compress.go          compression at the shield: coding negotiation, coded sibling
//	                     entries, compressing passed-through answers
//	coalesce.go          in-flight fetches per key
//	fill.go              streamed fills: a large cacheable miss's body goes to its
//	                     client and every waiter as it arrives, while it is stored
//	filldisk.go          streamed fills bound for the disk tier: the body goes into the
//	                     tier's file as it arrives and its readers read it there
//	relay.go             what crosses between client and origin, both ways: the origin
//	                     request (hop-by-hop, X-Forwarded-*, Via) and the answer's head
//	freshness.go         origin response → stale.Facts → storable / lifetime / windows
//	hithead.go           a hit's head: parsed heads copied into the answer
//	diskhit.go           the disk tier: opening it, its metrics
//	streamhit.go         fresh hits whose body is a stream: a disk tier file, or a
//	                     large memory entry sent piece by piece
//	purge.go             purge by URL (hard, soft) and by namespace (applied through proxy/cache)
//	handoff.go           hand-off entries: the ones handed over, the ones taken
//	status.go            the admin status page's data and event log
//	served.go            Served: the requests answered so far, for the processor
//	                     governor (package procs)
//	metrics.go, lathist.go, metrics_help.go, metrics_runtime.go, metrics_procs.go, admin.go
//	                     Prometheus metrics (metrics_procs.go: the processor
//	                     governor's) and admin API
//
// Invariants:
//
//   - A fresh hit allocates nothing: per-request buffers come from a pool,
//     the entry is read into the response's own body buffer and handed
//     back truncated to the body (SwapBody) — or, for an entry of 1 MiB
//     or more stored in pieces, its body is streamed from a pooled piece reader
//     (streamhit.go) — metric handles are resolved when a configuration
//     is applied (hit_alloc_test.go asserts 0).
//   - Nothing keeps a RequestCtx or its byte slices past the handler:
//     background refreshes get a copied request; waiters read an encoded
//     entry owned by the flight, never the leader's response; a streamed
//     fill's body streams read the fill's buffer or file, never a response.
//   - Every failure of the cache or cluster machinery is a miss (or a
//     stale answer), never a wrong or foreign one: corrupt entries, entries
//     stored under another key, missing pieces, an owner that fails or
//     answers 421, are all served as if the cache did not have the key.
//   - Configuration in force is an immutable value behind an atomic
//     pointer; Apply builds a new one and keeps what must survive a
//     reload (tenant buckets, origin budgets, breakers, metric counters).
package proxy
