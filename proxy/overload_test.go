package proxy

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// TestJitterLifetime: 1,000 entries stored within one second with
// ttl_jitter 0.2 and a 100 s lifetime get lifetimes in (80 s, 100 s] that
// spread over nearly all of that band, so their expiries spread over
// ≥ 20 % of the lifetime; nothing outside (0, 0.5] or a zero lifetime is
// touched, and no lifetime ever grows.
func TestJitterLifetime(t *testing.T) {
	const life = 100 * time.Second
	rng := rand.New(rand.NewPCG(24, 5))
	start := time.Unix(1_700_000_000, 0)
	var minL, maxL time.Duration = life, 0
	var minE, maxE time.Time
	for i := range 1000 {
		stored := start.Add(time.Duration(rng.Int64N(int64(time.Second))))
		l := jitterLifetime(life, 0.2, rng.Float64())
		if l <= 80*time.Second || l > life {
			t.Fatalf("entry %d: lifetime %v, want in (80s, 100s]", i, l)
		}
		minL, maxL = min(minL, l), max(maxL, l)
		exp := stored.Add(l)
		if i == 0 || exp.Before(minE) {
			minE = exp
		}
		if i == 0 || exp.After(maxE) {
			maxE = exp
		}
	}
	if spread := maxL - minL; spread < 19*time.Second {
		t.Errorf("lifetimes spread over %v, want ≥ 19s of the 20s band", spread)
	}
	if spread := maxE.Sub(minE); spread < life/5 {
		t.Errorf("expiries spread over %v, want ≥ 20%% of %v", spread, life)
	}
	for _, c := range []struct {
		life   time.Duration
		jitter float64
		u      float64
		want   time.Duration
	}{
		{life, 0, 0.99, life},
		{life, 0.6, 0.5, life}, // out of range: unchanged
		{life, -0.1, 0.5, life},
		{0, 0.2, 0.5, 0},
		{-time.Second, 0.2, 0.5, -time.Second},
		{life, 0.2, 0, life},
		{life, 0.2, 1, life}, // u out of range
		{life, 0.5, 0.5, 75 * time.Second},
	} {
		if got := jitterLifetime(c.life, c.jitter, c.u); got != c.want {
			t.Errorf("jitterLifetime(%v, %v, %v) = %v, want %v", c.life, c.jitter, c.u, got, c.want)
		}
	}
}

// TestDecideTTLJitter: decide applies the route's ttl_jitter to the
// lifetime the origin allowed (max-age=100: within (80 s, 100 s]), and
// leaves it alone without jitter.
func TestDecideTTLJitter(t *testing.T) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.Set("Cache-Control", "public, max-age=100")
	now := time.Now()
	plain := &route{}
	if d := decide(false, resp, plain, now, now); !d.storable || d.lifetime != 100*time.Second {
		t.Fatalf("no jitter: %+v, want storable with lifetime 100s", d)
	}
	jit := &route{overload: overload{ttlJitter: 0.2}}
	seen := map[time.Duration]bool{}
	for range 50 {
		d := decide(false, resp, jit, now, now)
		if d.lifetime <= 80*time.Second || d.lifetime > 100*time.Second {
			t.Fatalf("ttl_jitter 0.2: lifetime %v, want in (80s, 100s]", d.lifetime)
		}
		seen[d.lifetime] = true
	}
	if len(seen) < 40 {
		t.Errorf("50 decisions gave %d distinct lifetimes: not jittered", len(seen))
	}
}

// TestEagerRefresh: with eager_refresh 0.8, a hit on an entry 90 s into
// a 100 s lifetime (the origin says Age: 90) is answered from the cache
// and starts one background refresh; the hits that arrive while it runs
// are hits too and start no other; once it is stored the hits carry the
// new body. An entry before the point starts nothing. (The entry stays
// fresh for 10 s of test time: with Age 9 of 10 a loaded machine took
// the 1 s between the fill and a hit, which then revalidated.)
func TestEagerRefresh(t *testing.T) {
	release := make(chan struct{})
	var released sync.Once
	releaseOrigin := func() { released.Do(func() { close(release) }) }
	// young counts the origin's requests for the young entry alone: a
	// refresh of /e started by the last hits above may still reach the
	// origin while the young entry is checked.
	var young atomic.Int64
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 2 {
			<-release
		}
		age := "90"
		if strings.Contains(r.URL.RawQuery, "young") {
			age = "0"
			young.Add(1)
		}
		w.Header().Set("Cache-Control", "public, max-age=100")
		w.Header().Set("Age", age)
		_, _ = w.Write([]byte("body " + itoa(int(n))))
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.EagerRefresh = 0.8 })
	// A failure before the release below must not leave the origin's
	// handler blocked: closing the proxy and the origin would wait for it
	// for ever (cleanups run last first: this one before theirs).
	t.Cleanup(releaseOrigin)
	if s := summary(serve(p, get(t, "/e"))); s.code != 200 || s.body != "body 1" {
		t.Fatalf("first GET: %+v", s)
	}
	for i := range 20 {
		ctx := serve(p, get(t, "/e"))
		s := summary(ctx)
		if s.code != 200 || s.body != "body 1" || !bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) {
			t.Fatalf("hit %d during the refresh: %+v, Cache-Status %q", i, s, ctx.Response.Header.PeekBytes(httpx.HCacheStatus))
		}
	}
	waitUntil(t, "the refresh to reach the origin", func() bool { return o.hits.Load() == 2 })
	releaseOrigin()
	waitUntil(t, "the refreshed entry", func() bool {
		return summary(serve(p, get(t, "/e"))).body == "body 2" || o.hits.Load() > 3
	})
	if n := o.hits.Load(); n != 2 && n != 3 {
		// 3: a hit on the refreshed entry (Age 90 again) may start the next one.
		t.Fatalf("origin saw %d requests, want 2 (one refresh for 21 hits)", n)
	}

	// Young entry: no refresh.
	serve(p, get(t, "/e?young=1"))
	if n := young.Load(); n != 1 {
		t.Fatalf("the young entry's fill reached the origin %d times, want 1", n)
	}
	for range 10 {
		serve(p, get(t, "/e?young=1"))
	}
	if n := young.Load(); n != 1 {
		t.Fatalf("hits on an entry before the eager point reached the origin %d times", n-1)
	}
}

// TestRefreshAfterRacingRefresh: a hit that read an entry before a
// background refresh of its key stored the new answer, and reaches the
// flight check only after that refresh ended, starts no second refresh
// (eager_refresh's and stale-while-revalidate's alike): the origin sees
// one refresh and the key keeps the refreshed answer. The late hit is
// played out in order: its copy is read first, the refresh runs to its
// end, then the hit's refresh is asked for with the copy it read.
func TestRefreshAfterRacingRefresh(t *testing.T) {
	for _, tc := range []struct {
		name, cacheControl string
		late               func(p *Proxy, ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, e *cache.Entry, b []byte)
	}{
		{"eager", "public, max-age=100", func(p *Proxy, ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, e *cache.Entry, b []byte) {
			p.eagerRefresh(ctx, rt, rte, sc, e, b, e.Age(time.Now()))
		}},
		{"stale-while-revalidate", "public, max-age=50, stale-while-revalidate=600", func(p *Proxy, ctx *fasthttp.RequestCtx, rt *runtimeConfig, rte *route, sc *scratch, _ *cache.Entry, b []byte) {
			p.refreshInBackground(ctx, rt, rte, sc, bytes.Clone(b))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Cache-Control", tc.cacheControl)
				w.Header().Set("Age", "90") // past eager_refresh's point (80 s), or stale
				_, _ = w.Write([]byte("body " + itoa(int(n))))
			})
			p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.EagerRefresh = 0.8 })
			serve(p, get(t, "/r"))
			ctx := get(t, "/r")
			key := primaryKey(p, ctx)
			old := p.cache.Get(nil, key) // the late hit's lookup: body 1
			var e cache.Entry
			if err := cache.DecodeEntry(old, &e); err != nil || string(e.Body) != "body 1" {
				t.Fatalf("first fill: %q, %v", e.Body, err)
			}

			// Another hit starts the refresh, which stores body 2 and ends.
			if s := summary(serve(p, get(t, "/r"))); s.body != "body 1" {
				t.Fatalf("hit starting the refresh: %+v", s)
			}
			waitUntil(t, "the first refresh stored and ended", func() bool {
				cur, ok := stored(t, p, key)
				return ok && string(cur.Body) == "body 2" && p.fl.inFlight() == 0
			})

			sc := &scratch{}
			rt := p.rt.Load()
			rte := rt.routes[rt.table.Match(ctx.Request.Header.Host(), ctx.Request.URI().PathOriginal()).Index]
			sc.key = rte.appendKey(nil, ctx, sc, p.cache.Namespaces().Version(rte.name, rte.scoped, nil))
			tc.late(p, ctx, rt, rte, sc, &e, old)
			waitUntil(t, "the late hit's refresh to end", func() bool { return p.fl.inFlight() == 0 })
			if n := o.hits.Load(); n != 2 {
				t.Errorf("origin saw %d requests, want 2: the late hit refreshed a key refreshed after its lookup", n)
			}
			if cur, ok := stored(t, p, key); !ok || string(cur.Body) != "body 2" {
				t.Errorf("stored %q (%v), want body 2", cur.Body, ok)
			}
		})
	}
}
