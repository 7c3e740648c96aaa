//go:build !race

package proxy

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// TestHitAllocs asserts the hot path allocates nothing: a cache HIT
// through the handler, with a reused RequestCtx as the server reuses it,
// for a plain entry and for a vary marker plus variant. (The race
// detector adds allocations, hence the build tag.)
func TestHitAllocs(t *testing.T) {
	tests := []struct {
		name string
		vary bool
	}{
		{"plain", false},
		{"vary", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ctx := warmHit(t, tt.vary)
			h := p.Handler()
			hit := true
			allocs := testing.AllocsPerRun(1000, func() {
				ctx.Response.Reset()
				h(ctx)
				hit = hit && bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix)
			})
			if !hit {
				t.Fatalf("a run was not a hit: Cache-Status = %q", ctx.Response.Header.PeekBytes(httpx.HCacheStatus))
			}
			if allocs != 0 {
				t.Errorf("HIT = %v allocs/op, want 0", allocs)
			}
		})
	}
}

// TestNotModifiedHitAllocs: a conditional request answered 304 from
// cache is a hit too, and as cheap.
func TestNotModifiedHitAllocs(t *testing.T) {
	p, _ := warmHit(t, false)
	ctx := get(t, "/hit?id=42", `If-None-Match: "abc123"`)
	h := p.Handler()
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		h(ctx)
	})
	if ctx.Response.StatusCode() != 304 {
		t.Fatalf("status = %d, want 304", ctx.Response.StatusCode())
	}
	if allocs != 0 {
		t.Errorf("304 HIT = %v allocs/op, want 0", allocs)
	}
}

// TestPreconditionFailedHitAllocs: a hit that If-Match (or
// If-Unmodified-Since) rules out is a 412 from cache, as cheap as a 304.
func TestPreconditionFailedHitAllocs(t *testing.T) {
	p, _ := warmHit(t, false)
	for _, hdr := range []string{`If-Match: "other"`, `If-Match: W/"abc123"`} {
		ctx := get(t, "/hit?id=42", hdr)
		h := p.Handler()
		allocs := testing.AllocsPerRun(1000, func() {
			ctx.Response.Reset()
			h(ctx)
		})
		if ctx.Response.StatusCode() != 412 {
			t.Fatalf("%s: status = %d, want 412", hdr, ctx.Response.StatusCode())
		}
		if allocs != 0 {
			t.Errorf("%s: 412 HIT = %v allocs/op, want 0", hdr, allocs)
		}
	}
}

// TestHitAllocsInMemoryServer counts every allocation in the process for
// a GET answered from cache through a real fasthttp.Server and Client on
// an in-memory listener: server, handler and client together allocate
// nothing.
func TestHitAllocsInMemoryServer(t *testing.T) {
	p, _ := warmHit(t, false)
	c := inMemoryServer(t, p)
	req, resp := hitRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	var err error
	allocs := testing.AllocsPerRun(1000, func() {
		if err == nil {
			err = c.Do(req, resp)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	checkClientHit(t, resp)
	if allocs != 0 {
		t.Errorf("GET through server and client = %v allocs/op, want 0", allocs)
	}
}

// TestRangeHitAllocs: a single-range request answered 206 from cache
// (RFC 9110 §14) allocates nothing either.
func TestRangeHitAllocs(t *testing.T) {
	p, _ := warmHit(t, false)
	ctx := get(t, "/hit?id=42", "Range: bytes=100-199")
	h := p.Handler()
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		h(ctx)
	})
	if ctx.Response.StatusCode() != 206 || len(ctx.Response.Body()) != 100 {
		t.Fatalf("status = %d, %d bytes; want 206 with 100", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	if allocs != 0 {
		t.Errorf("range HIT = %v allocs/op, want 0", allocs)
	}
}

// TestForwardedHitAllocs: a hit on the key's owner reached through
// another node allocates nothing, counted over the whole exchange
// (client, edge, owner) as BenchmarkForwardedHit does.
// The edge's forwarding fields cost nothing either, also when it extends
// a trusted proxy's.
func TestForwardedHitAllocs(t *testing.T) {
	trusted := clusterSetup{cfg: func(c *config.Config) { c.Server.TrustedProxies = []string{"0.0.0.0/0", "::/0"} }}
	for name, do := range map[string]func(){
		"plain":              forwardedHit(t, clusterSetup{}),
		"trusted proxy":      forwardedHit(t, trusted, "X-Forwarded-For", "198.51.100.1, 198.51.100.2", "X-Forwarded-Proto", "https"),
		"mux":                forwardedHitMux(t),
		"mux, trusted proxy": forwardedHitMuxCfg(t, trusted.cfg, "X-Forwarded-For", "198.51.100.1, 198.51.100.2", "X-Forwarded-Proto", "https"),
	} {
		for range 100 { // pools and connections warm
			do()
		}
		if n := testing.AllocsPerRun(1000, do); n != 0 {
			t.Errorf("forwarded hit, %s: %v allocs, want 0", name, n)
		}
	}
}

// TestStreamedHitAllocs: a hit on an entry stored in pieces, its body
// streamed piece by piece (streamhit.go), allocates nothing either:
// through the handler with the answer written as the server writes it,
// and through a real server and client.
func TestStreamedHitAllocs(t *testing.T) {
	const n = memStreamMin + 300<<10
	p, ctx := warmLargeHit(t, n)
	h := p.Handler()
	bw := bufio.NewWriterSize(new(copySink), 4096)
	streamed := true
	allocs := testing.AllocsPerRun(200, func() {
		ctx.Response.Reset()
		h(ctx)
		streamed = streamed && ctx.Response.IsBodyStream()
		_ = ctx.Response.Write(bw)
		_ = bw.Flush()
	})
	if !streamed {
		t.Fatal("a hit was not streamed")
	}
	if allocs != 0 {
		t.Errorf("streamed HIT = %v allocs/op, want 0", allocs)
	}
	c := inMemoryServer(t, p)
	req, resp := hitRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	var err error
	allocs = testing.AllocsPerRun(200, func() {
		if err == nil {
			err = c.Do(req, resp)
		}
	})
	if err != nil || len(resp.Body()) != n {
		t.Fatalf("GET: %v, %d bytes", err, len(resp.Body()))
	}
	if allocs != 0 {
		t.Errorf("streamed GET through server and client = %v allocs/op, want 0", allocs)
	}
}
