package proxy

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
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

// TestEagerRefresh: with eager_refresh 0.8, a hit on an entry 9 s into a
// 10 s lifetime (the origin says Age: 9) is answered from the cache and
// starts one background refresh; the hits that arrive while it runs are
// hits too and start no other; once it is stored the hits carry the new
// body. An entry before the point starts nothing.
func TestEagerRefresh(t *testing.T) {
	release := make(chan struct{})
	// young counts the origin's requests for the young entry alone: a
	// refresh of /e started by the last hits above may still reach the
	// origin while the young entry is checked.
	var young atomic.Int64
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 2 {
			<-release
		}
		age := "9"
		if strings.Contains(r.URL.RawQuery, "young") {
			age = "0"
			young.Add(1)
		}
		w.Header().Set("Cache-Control", "public, max-age=10")
		w.Header().Set("Age", age)
		_, _ = w.Write([]byte("body " + itoa(int(n))))
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.EagerRefresh = 0.8 })
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
	close(release)
	waitUntil(t, "the refreshed entry", func() bool {
		return summary(serve(p, get(t, "/e"))).body == "body 2" || o.hits.Load() > 3
	})
	if n := o.hits.Load(); n != 2 && n != 3 {
		// 3: a hit on the refreshed entry (Age 9 again) may start the next one.
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
