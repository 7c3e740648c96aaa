package proxy

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// hitBody is the 1 KiB body of the benchmarked object.
var hitBody = bytes.Repeat([]byte("0123456789abcdef"), 64)

// hitOrigin answers every path with hitBody, cacheable for an hour, with
// the usual handful of headers; with vary it varies on Accept-Encoding.
func hitOrigin(vary bool) func(w http.ResponseWriter, r *http.Request, n int64) {
	return func(w http.ResponseWriter, r *http.Request, n int64) {
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Content-Type", "application/json")
		h.Set("ETag", `"abc123"`)
		h.Set("Last-Modified", "Tue, 15 Nov 1994 12:45:26 GMT")
		h.Set("X-Request-Id", "0f8fad5b-d9cb-469f-a165-70867728950e")
		if vary {
			h.Set("Vary", "Accept-Encoding")
		}
		_, _ = w.Write(hitBody)
	}
}

// warmHit builds a proxy in front of a real origin, stores the object at
// /hit and returns a ctx whose request hits it. The ctx is reused by the
// caller: reset its response, keep its request.
func warmHit(tb testing.TB, vary bool) (*Proxy, *fasthttp.RequestCtx) {
	tb.Helper()
	o := newTestOrigin(tb, hitOrigin(vary))
	p := newTestProxy(tb, o.addr(), nil)
	ctx := hitCtx(tb)
	serve(p, ctx)
	if cs := ctx.Response.Header.Peek("Cache-Status"); !bytes.Contains(cs, []byte("stored")) {
		tb.Fatalf("warming request: Cache-Status = %q, want a stored miss", cs)
	}
	ctx.Response.Reset()
	p.Handler()(ctx)
	checkHit(tb, ctx)
	return p, ctx
}

// hitCtx is a typical browser-ish GET for /hit. Its response keeps its
// body buffer across Reset, as fasthttp.Server does for every request by
// default (ReduceMemoryUsage false, which cmd/shield keeps): ctx.Init
// alone would return it to fasthttp's body pool on each Reset instead.
func hitCtx(tb testing.TB) *fasthttp.RequestCtx {
	ctx := get(tb, "/hit?id=42",
		"User-Agent: Mozilla/5.0 (bench)",
		"Accept: application/json",
		"Accept-Encoding: gzip, br",
		"Accept-Language: en",
	)
	ctx.Response.KeepBodyBuffer = true
	return ctx
}

var hitPrefix = []byte("shield; hit")

func checkHit(tb testing.TB, ctx *fasthttp.RequestCtx) {
	if cs := ctx.Response.Header.PeekBytes(httpx.HCacheStatus); !bytes.HasPrefix(cs, hitPrefix) {
		tb.Fatalf("Cache-Status = %q, want %q...", cs, hitPrefix)
	}
	if len(ctx.Response.Body()) != len(hitBody) {
		tb.Fatalf("hit body is %d bytes, want %d", len(ctx.Response.Body()), len(hitBody))
	}
}

func benchmarkHit(b *testing.B, vary bool) {
	p, ctx := warmHit(b, vary)
	benchmarkHits(b, p.Handler(), ctx, len(hitBody))
}

// benchmarkHits serves ctx again and again through h, each answer a hit
// of a bodyLen-byte body.
func benchmarkHits(b *testing.B, h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, bodyLen int) {
	b.SetBytes(int64(bodyLen))
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
		if !bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) || len(ctx.Response.Body()) != bodyLen {
			b.Fatalf("Cache-Status = %q, %d bytes; want a hit of %d", ctx.Response.Header.PeekBytes(httpx.HCacheStatus), len(ctx.Response.Body()), bodyLen)
		}
	}
}

// BenchmarkHit is the hot path: route, key, lookup, decode, respond.
func BenchmarkHit(b *testing.B) { benchmarkHit(b, false) }

// BenchmarkHitVary adds the vary marker and the variant lookup.
func BenchmarkHitVary(b *testing.B) { benchmarkHit(b, true) }

func BenchmarkHitParallel(b *testing.B) {
	p, _ := warmHit(b, false)
	h := p.Handler()
	b.SetBytes(int64(len(hitBody)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := hitCtx(b)
		for pb.Next() {
			ctx.Response.Reset()
			h(ctx)
			if !bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) {
				b.Errorf("Cache-Status = %q, want a hit", ctx.Response.Header.PeekBytes(httpx.HCacheStatus))
				return
			}
		}
	})
}

// BenchmarkMiss fetches a new key from the local origin each time: the
// origin round trip over loopback TCP dominates.
func BenchmarkMiss(b *testing.B) {
	o := newTestOrigin(b, hitOrigin(false))
	p := newTestProxy(b, o.addr(), nil)
	h := p.Handler()
	ctx := hitCtx(b)
	uri := make([]byte, 0, 64)
	n := 0
	b.SetBytes(int64(len(hitBody)))
	b.ReportAllocs()
	for b.Loop() {
		n++
		uri = strconv.AppendInt(append(uri[:0], "/miss/"...), int64(n), 10)
		ctx.Request.SetRequestURIBytes(uri)
		ctx.Response.Reset()
		h(ctx)
		if cs := ctx.Response.Header.PeekBytes(httpx.HCacheStatus); !bytes.HasPrefix(cs, []byte("shield; fwd=miss")) {
			b.Fatalf("Cache-Status = %q, want a miss", cs)
		}
	}
}

// BenchmarkHitPooledBody is BenchmarkHit with the RequestCtx as ctx.Init
// leaves it (and fasthttp.Server with ReduceMemoryUsage): Reset returns
// the body buffer to fasthttp's pool. Once that pool calibrates its
// sizes (after 42000 returns) it keeps only buffers up to the size class
// of their length — the body — while the entry buffer's capacity also
// held the entry's meta, so each hit then allocates a new buffer.
func BenchmarkHitPooledBody(b *testing.B) {
	p, _ := warmHit(b, false)
	h := p.Handler()
	ctx := hitCtx(b)
	ctx.Response.KeepBodyBuffer = false
	b.SetBytes(int64(len(hitBody)))
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
		if !bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) {
			b.Fatalf("Cache-Status = %q, want a hit", ctx.Response.Header.PeekBytes(httpx.HCacheStatus))
		}
	}
}

// inMemoryServer serves p's handler with a fasthttp.Server on an
// in-memory listener and returns a client connected to it.
func inMemoryServer(tb testing.TB, p *Proxy) *fasthttp.Client {
	tb.Helper()
	ln := fasthttputil.NewInmemoryListener()
	// The worker pool's cleaner notices Shutdown only when it next wakes,
	// every MaxIdleWorkerDuration (10s by default); 100ms keeps goleak
	// content without ignoring it, and a busy worker is never idle.
	srv := &fasthttp.Server{Handler: p.Handler(), NoDefaultDate: true, MaxIdleWorkerDuration: 100 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	tb.Cleanup(func() {
		c.CloseIdleConnections()
		if err := srv.Shutdown(); err != nil {
			tb.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return c
}

// hitRequest is the client side of hitCtx.
func hitRequest() *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("http://" + testHost + "/hit?id=42")
	req.Header.Set("Accept-Encoding", "gzip, br")
	return req
}

// checkClientHit fails unless resp is a hit with the whole body.
func checkClientHit(tb testing.TB, resp *fasthttp.Response) {
	if !bytes.HasPrefix(resp.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) || len(resp.Body()) != len(hitBody) {
		tb.Fatalf("status %d, Cache-Status %q, %d bytes; want a hit of %d bytes",
			resp.StatusCode(), resp.Header.PeekBytes(httpx.HCacheStatus), len(resp.Body()), len(hitBody))
	}
}

// BenchmarkHitInMemoryServer is the end-to-end in-process figure: a
// fasthttp.Client GET through a fasthttp.Server serving the proxy on an
// in-memory listener (HTTP parsing and writing included, no sockets).
func BenchmarkHitInMemoryServer(b *testing.B) {
	p, _ := warmHit(b, false)
	c := inMemoryServer(b, p)
	req, resp := hitRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	b.SetBytes(int64(len(hitBody)))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(req, resp); err != nil {
			b.Fatal(err)
		}
		checkClientHit(b, resp)
	}
}

// BenchmarkRangeHit: a 100-byte range of a stored object, through the
// handler with a reused RequestCtx.
func BenchmarkRangeHit(b *testing.B) {
	p, _ := warmHit(b, false)
	ctx := get(b, "/hit?id=42", "Range: bytes=100-199")
	// As fasthttp.Server leaves it (ReduceMemoryUsage off): the response
	// keeps its body buffer across requests (BenchmarkHitPooledBody).
	ctx.Response.KeepBodyBuffer = true
	h := p.Handler()
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
	}
	if ctx.Response.StatusCode() != 206 {
		b.Fatalf("status %d, want 206", ctx.Response.StatusCode())
	}
}

// BenchmarkLargeHit: a 100 KiB object (stored in pieces, proxy/cache/store.go)
// through the handler with a reused RequestCtx.
func BenchmarkLargeHit(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	o := newTestOrigin(b, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(body)
	})
	p := newTestProxy(b, o.addr(), func(c *config.Config) { c.Cache.MaxObjectSize = 1 << 20 })
	ctx := hitCtx(b)
	serve(p, ctx)
	benchmarkHits(b, p.Handler(), ctx, len(body))
}
