// Package upstream holds shield's origins (docs/architecture.md §1 step 8):
// for each configured origin its servers (fasthttp.HostClients over HTTP or
// HTTPS, with passive and active health), the protection in front of them
// (the origin budget of admission, the breaker and retry budget of
// breaker) and one protected call, Origin.Call, that the request path
// makes for a miss, a revalidation or a pass-through. A Registry keeps
// that state across reloads: Update rebuilds the origins of a
// configuration and keeps each one's budget, breaker and servers while
// their settings are unchanged, exactly as a restart would not.
//
// It imports proxy/httpx of proxy's packages and never proxy, proxy/cache
// or proxy/cluster (internal/importrules enforces it): the request path
// hands it fasthttp requests and gets back a response head, a Lease on
// the budget slot and, on failure, what to answer.
//
// Files (internal/doccheck checks that the list names every non-test file
// of the directory and nothing else):
//
//	registry.go   Registry: origins by name, state kept across reloads, Check,
//	              Update, overload settings (high-priority reserve, shuffle
//	              shard), servers' health
//	origin.go     Origin, one protected call: budget, breaker, server pick,
//	              retries; Lease, Failure; how errors and statuses are counted
//	servers.go    an origin's servers: pools, shuffle-shard pick, TLS dialing,
//	              health checks
//	metrics.go    per-origin metric handles, scrape-time budget, breaker and
//	              server gauges, the status page's origin rows
package upstream
