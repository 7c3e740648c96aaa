// Package admission decides, without blocking, whether a request may enter
// the proxy (per-tenant token bucket and concurrency limit) and whether a
// cache miss may go to its origin (per-origin concurrency budget, optional
// fetch rate, slow start after the breaker closes, per-tenant origin share).
// It holds no fasthttp types and no metrics library: counters are atomics,
// read at scrape time through Stats snapshots.
//
// # Tenants
//
// A tenant class has a token bucket (Limits.Rate per second, Limits.Burst
// tokens) checked on every request, and a limit on its in-flight requests
// (Limits.MaxConcurrency). Tenants.Lookup maps a tenant name to its class;
// an unknown or empty name gets the default class, whose Name is
// DefaultClass ("default"), so metric labels only ever carry configured
// names. Names match exactly (case-sensitive); "default" cannot be used as
// a class name.
//
// Decisions the design leaves open, and why:
//
//   - Every limit must be finite and positive (Rate > 0, MaxConcurrency ≥ 1).
//     There is no "0 = unlimited": an operator who wants a very high limit
//     writes it down. Burst 0 defaults to ceil(Rate) (one second of traffic,
//     at least 1); OriginShare 0 defaults to 1.
//   - Fleet awareness: each node enforces Rate × share and ceil(Burst ×
//     share) (at least 1). With n live peers the share starts at 1/n
//     (SetPeers); the usage exchange (Fleet, Shares) then moves it to follow
//     where the tenant's demand lands, the shares summing to at most 1. With
//     share 1/n: a burst of ceil(Burst/n). The burst is divided too, so the fleet
//     admits about Burst + Rate·t in any window t, which is what the operator
//     configured; an undivided burst would let one tenant send n·Burst at once
//     to a cold origin, exactly what admission is there to stop. Rounding up
//     errs in the tenant's favour by less than one token per node.
//     MaxConcurrency is per node and not divided: in-flight requests hold
//     local resources (goroutines, sockets, memory).
//   - Membership changes and reloads keep each bucket's state: the limiter is
//     advanced to now at the old rate, then given the new rate and burst
//     (rate.Limiter.SetLimitAt / SetBurstAt). Tokens are kept as an absolute
//     count, clamped to a smaller burst; a change never mints tokens, so
//     SetPeers 1→3→1 leaves a full bucket at ceil(Burst/3) tokens, refilling
//     at the restored rate. Reload: classes that remain keep their limiter
//     and in-flight count, new classes start with a full bucket, removed
//     classes disappear from Lookup (requests already holding one finish
//     normally).
//   - Admit takes the concurrency slot first and the token second. A request
//     refused for concurrency therefore costs no token, and no token ever has
//     to be given back (rate.Limiter cannot return one without an allocating
//     Reservation). The price: while a request that will be refused for rate
//     holds its slot for a few nanoseconds, a concurrent request of the same
//     tenant may see the limit one lower than it is.
//   - Retry-After is a whole number of seconds, rounded up, at least 1 s and
//     at most MaxRetryAfter. For a rate rejection it is the time until one
//     token is available at the per-node rate, (1 − tokens)/rate; for
//     concurrency and origin-share rejections, where no bucket predicts the
//     future, it is 1 s.
//
// # Origins
//
// An Origin is one upstream's budget on this node: at most MaxConcurrency
// in-flight fetches, and at most MaxRate fetches per second (token bucket
// with a burst of ceil(MaxRate), i.e. one second's worth, so simultaneous
// misses are not refused while the average is low). Both are per node,
// like the configuration's origin max_concurrency.
//
//   - Slow start: StartRamp(now), called by the proxy when the origin's breaker
//     closes, makes the effective concurrency limit ramp linearly from
//     max(1, MaxConcurrency/10) to MaxConcurrency over SlowStart. A new Origin
//     starts at full budget.
//   - Origin share: a tenant may hold at most floor(OriginShare × limit)
//     (at least 1) of the origin's effective limit, so one tenant's cold keys
//     cannot take the whole origin. Only origin fetches call Acquire, so hits
//     cost no share; a coalesced fetch is charged to the tenant that leads
//     it; a nil tenant (background refresh) is checked against the budget
//     only.
//   - Acquire checks, in order, concurrency, the priority's cap, tenant
//     share, then rate, and takes the token last, so a refused fetch
//     consumes nothing.
//   - Waiting: AcquireWait waits up to OriginLimits.QueueTimeout for a slot
//     when the budget (or the priority's cap) refuses; every Release wakes
//     the waiters, who compete again. Past the timeout the fetch is
//     refused (QueueTimeout, or Shed when only its priority's cap was
//     full), so a surge is answered within about QueueTimeout, never
//     parked until the origin's timeout. Rate and origin-share refusals do
//     not wait: a freed slot would not change them.
//   - Priority: Low fetches may start while fewer than 50% of the slots
//     are taken, Normal 80% when SetReserveHigh is on (100% otherwise),
//     High 100% (see Priority). The caps bound the total in flight, so
//     shedding needs no per-priority bookkeeping.
//
// Everything on the request path (Lookup, Admit, Done, Acquire, Release,
// accepted or refused) does 0 allocations; alloc_test.go asserts it.
package admission
