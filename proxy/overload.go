package proxy

import (
	"bytes"
	"github.com/VictoriaMetrics/metrics"
	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/valyala/fasthttp"
	"time"
)

// overload is a route's overload controls (docs/configuration.md,
// routes[].cost …), compiled once per load.
type overload struct {
	// cost is the tokens one request takes from its tenant's bucket, ≥ 1.
	cost int
	// prio orders the route's fetches when the origin budget is short.
	prio admission.Priority
	// ttlJitter is cache.ttl_jitter: stored lifetimes are shortened by a
	// random fraction below it.
	ttlJitter float64
	// eagerRefresh is cache.eager_refresh: the fraction of an entry's
	// lifetime from which a hit starts a background refresh (0: off).
	eagerRefresh float64
	// eagerRefreshes counts the refreshes eager_refresh started, counted
	// when started: one that finds the key refreshed meanwhile
	// (refreshedMeanwhile) or another fetch leading asks the origin
	// nothing, so the count may exceed the origin requests it caused.
	eagerRefreshes *metrics.Counter
	// shed counts the route's origin budget refusals by detail
	// (shield_shed_total{route,priority,reason}).
	shed [len(shedReasons)]*metrics.Counter
}

// shedReasons are the Cache-Status details of budget refusals, which are
// also the reason label of shield_shed_total.
var shedReasons = [...]string{"budget", "origin-share", "shed", "queue-timeout"}

func (p *Proxy) routeOverload(rc *config.Route) overload {
	prio, _ := admission.ParsePriority(rc.Priority) // validated by config
	o := overload{cost: max(rc.Cost, 1), prio: prio, ttlJitter: rc.Cache.TTLJitter, eagerRefresh: rc.Cache.EagerRefresh}
	o.eagerRefreshes = p.g.set.GetOrCreateCounter(`shield_eager_refreshes_total{route="` + rc.Name + `"}`)
	for i, r := range shedReasons {
		o.shed[i] = p.g.set.GetOrCreateCounter(`shield_shed_total{route="` + rc.Name + `",priority="` + prio.String() + `",reason="` + r + `"}`)
	}
	return o
}

// countShed counts a fetch failure that was an origin budget refusal.
func (o *overload) countShed(f failure) {
	for i, r := range shedReasons {
		if f.detail == r {
			o.shed[i].Inc()
			return
		}
	}
}

// jitterLifetime shortens lifetime by the fraction u·jitter (u uniform in
// [0, 1)), so entries stored at the same moment expire spread over
// jitter × lifetime instead of all at once. It never lengthens it; a
// jitter outside (0, 0.5] (or a u outside [0, 1)) changes nothing.
func jitterLifetime(lifetime time.Duration, jitter, u float64) time.Duration {
	if lifetime <= 0 || !(jitter > 0 && jitter <= 0.5) || !(u >= 0 && u < 1) {
		return lifetime
	}
	return lifetime - time.Duration(float64(lifetime)*jitter*u)
}

// eagerRefresh starts one background refresh of a fresh entry e (decoded
// from b, read age ago) that is past the route's eager_refresh point of
// its lifetime, so the key is refreshed before it goes stale. It reuses
// stale-while-revalidate's refresh: coalesced on the key's flight, a
// conditional request when e has a validator. Before the point, or while
// a fetch of the key is in flight, it does nothing and allocates nothing;
// only starting the refresh allocates (a copy of b, the request).
func (p *Proxy) eagerRefresh(ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, e *cache.Entry, b []byte, age time.Duration) {
	if e.Kind == cache.KindNearCopy || float64(age) < float64(e.Lifetime)*rte.eagerRefresh {
		return
	}
	key := sc.flightKey()
	if p.fl.has(key, cachekey.Digest(key)) {
		return
	}
	rte.eagerRefreshes.Inc()
	p.refreshInBackground(ctx, rt, rte, sc, bytes.Clone(b))
}

// has reports whether a fetch of key is in flight, without joining it.
func (fs *flights) has(key []byte, digest uint64) bool {
	s := &fs.shards[digest%flightShards]
	s.mu.Lock()
	_, ok := s.m[string(key)]
	s.mu.Unlock()
	return ok
}
