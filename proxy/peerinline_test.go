package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
)

// requestsCounted sums the proxy's first route's request counters.
func requestsCounted(p *Proxy) uint64 {
	var n uint64
	for r := range numResults {
		n += p.rt.Load().routes[0].m.requests.get(r)
	}
	return n
}

// TestServePeerHit: a forwarded fresh hit from memory is served inline
// (ServePeerHit true, counted once, as a hit). Anything else — a miss, an
// entry the request does not take as fresh, an unsafe method — is
// answered with nothing, counted nowhere and fetches nothing; ServePeer
// then serves it as before.
func TestServePeerHit(t *testing.T) {
	o := newTestOrigin(t, hitOrigin(false))
	p := newTestProxy(t, o.addr(), nil)
	serve(p, hitCtx(t))
	l := peerLocal{p}
	hits := p.rt.Load().routes[0].m.requests
	h0, n0, o0 := hits.get(resHit), requestsCounted(p), o.hits.Load()
	ctx := hitCtx(t)
	if !l.ServePeerHit(ctx) {
		t.Fatal("a fresh hit was not served inline")
	}
	checkHit(t, ctx)
	if hits.get(resHit) != h0+1 || requestsCounted(p) != n0+1 || o.hits.Load() != o0 {
		t.Errorf("inline hit: %d hits, %d requests counted, %d origin requests; want 1, 1, 0",
			hits.get(resHit)-h0, requestsCounted(p)-n0, o.hits.Load()-o0)
	}
	for name, req := range map[string]func() *fasthttp.RequestCtx{
		"miss":              func() *fasthttp.RequestCtx { return get(t, "/cold") },
		"max-age=0 request": func() *fasthttp.RequestCtx { return get(t, "/hit?id=42", "Cache-Control: max-age=0") },
		"POST":              func() *fasthttp.RequestCtx { return newCtxBody(t, request("POST", "/hit?id=42"), "x") },
	} {
		n0, o0 := requestsCounted(p), o.hits.Load()
		ctx := req()
		if l.ServePeerHit(ctx) {
			t.Errorf("%s: served inline", name)
			continue
		}
		if len(ctx.Response.Header.PeekBytes(httpx.HCacheStatus)) > 0 || len(ctx.Response.Body()) > 0 {
			t.Errorf("%s: not served inline, but answered: %q", name, ctx.Response.Header.PeekBytes(httpx.HCacheStatus))
		}
		if requestsCounted(p) != n0 || o.hits.Load() != o0 {
			t.Errorf("%s: not served inline, but %d requests counted, %d sent to the origin", name, requestsCounted(p)-n0, o.hits.Load()-o0)
		}
		ctx = req()
		l.ServePeer(ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK || requestsCounted(p) != n0+1 {
			t.Errorf("%s: ServePeer answered %d, %d requests counted", name, ctx.Response.StatusCode(), requestsCounted(p)-n0)
		}
	}
}

// TestServePeerHitLarge: an entry of memStreamMin bytes or more (stored
// in pieces, streamed by a worker) is not served inline.
func TestServePeerHitLarge(t *testing.T) {
	p, ctx := warmLargeHit(t, memStreamMin+300<<10)
	ctx.Response.Reset()
	n0 := requestsCounted(p)
	if (peerLocal{p}).ServePeerHit(ctx) {
		t.Fatal("a large entry was served inline")
	}
	if requestsCounted(p) != n0 || len(ctx.Response.Body()) > 0 {
		t.Fatalf("not served inline, but counted (%d) or answered (%d bytes)", requestsCounted(p)-n0, len(ctx.Response.Body()))
	}
	ctx.Response.Reset()
	(peerLocal{p}).ServePeer(ctx)
	if n := len(ctx.Response.Body()); n != memStreamMin+300<<10 {
		t.Fatalf("ServePeer: %d bytes", n)
	}
}
