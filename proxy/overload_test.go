package proxy

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
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
