package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	brrr "github.com/molecule-man/go-brrr"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

func TestNegotiate(t *testing.T) {
	c := &compression{codings: [][]byte{[]byte("br"), []byte("gzip")}}
	tests := []struct {
		ae   string
		want string
	}{
		{"", "identity"},
		{"gzip", "gzip"},
		{"br", "br"},
		{"gzip, br", "br"},                   // equal q: route order
		{"gzip, deflate, br, zstd", "br"},    // unknown codings ignored
		{"gzip;q=1.0, br;q=0.5", "gzip"},     // q honoured
		{"gzip;q=0, br", "br"},               // q=0 excludes
		{"gzip;q=0, br;q=0", "identity"},     // none acceptable
		{"*", "br"},                          // any coding
		{"*;q=0.5, gzip", "gzip"},            // explicit beats *
		{"*;q=0", "identity"},                // identity excluded too: disregarded
		{"identity", "identity"},             //
		{"identity;q=0", "identity"},         // nothing acceptable: identity, not 406
		{"GZIP ; Q=0.8", "gzip"},             // case-insensitive
		{"gzip;q=0.5, identity", "identity"}, // identity weighs more
		{"gzip;q=0.5, identity;q=0.5", "gzip"},
		{"gzip;q=abc", "identity"}, // malformed q is 0
		{"br;q=0.001", "br"},
		{"deflate", "identity"},
	}
	for _, tt := range tests {
		got := "identity"
		if idx := c.negotiate([]byte(tt.ae)); idx != 0 {
			got = string(c.name(idx))
		}
		if got != tt.want {
			t.Errorf("negotiate(%q) = %s, want %s", tt.ae, got, tt.want)
		}
	}
}

func TestMatchType(t *testing.T) {
	c := newCompression(&config.RouteCompress{Codings: []string{"gzip"}, Types: config.DefaultCompressTypes}, 1<<20)
	for ct, want := range map[string]bool{
		"text/html; charset=utf-8": true, "TEXT/CSS": true, "application/json": true,
		"application/problem+json": true, "application/atom+xml": true, "image/svg+xml": true,
		"application/javascript": true, "image/png": false, "application/octet-stream": false,
		"": false, "text/": false, "application/jsonx": false,
	} {
		if got := c.matchType([]byte(ct)); got != want {
			t.Errorf("matchType(%q) = %v, want %v", ct, got, want)
		}
	}
}

// compressBodyText is a compressible origin body of a few KiB.
var compressBodyText = strings.Repeat(`{"id":42,"name":"shield","tags":["cache","proxy"]},`, 100)

// compressProxy is a proxy in front of an origin answering
// compressBodyText as JSON with a strong ETag, compress on [br, gzip].
func compressProxy(t testing.TB, h func(w http.ResponseWriter, r *http.Request, n int64)) (*Proxy, *testOrigin) {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "public, max-age=3600")
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("ETag", `"abc"`)
			w.Header().Set("Vary", "Origin")
			_, _ = w.Write([]byte(compressBodyText))
		}
	}
	o := newTestOrigin(t, h)
	p := newTestProxy(t, o.addr(), func(c *config.Config) {
		c.Routes[0].Compress.Codings = []string{"br", "gzip"}
		c.Routes[0].Cache.AcceptEncoding = nil
	})
	return p, o
}

func decodeBody(t testing.TB, ce string, b []byte) string {
	t.Helper()
	switch ce {
	case "":
		return string(b)
	case "gzip":
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		return string(out)
	case "br":
		out, err := brrr.Decompress(b)
		if err != nil {
			t.Fatalf("br: %v", err)
		}
		return string(out)
	}
	t.Fatalf("unexpected Content-Encoding %q", ce)
	return ""
}

// TestCompressCodings: one origin fetch serves every coding; each answer
// has its Content-Encoding, Vary (merged with the origin's), its own
// ETag, and decodes to the origin's bytes; the sibling is a hit.
func TestCompressCodings(t *testing.T) {
	p, o := compressProxy(t, nil)
	tests := []struct{ ae, ce, etag string }{
		{"gzip, br", "br", `"abc-br"`},
		{"gzip", "gzip", `"abc-gzip"`},
		{"br", "br", `"abc-br"`},
		{"gzip;q=0, br", "br", `"abc-br"`},
		{"*", "br", `"abc-br"`},
		{"identity", "", `"abc"`},
		{"", "", `"abc"`},
	}
	for round := range 2 {
		for _, tt := range tests {
			var hs []string
			if tt.ae != "" {
				hs = append(hs, "Accept-Encoding: "+tt.ae)
			}
			ctx := serve(p, get(t, "/c", hs...))
			r := &ctx.Response
			if r.StatusCode() != 200 {
				t.Fatalf("%q: status %d", tt.ae, r.StatusCode())
			}
			if got := string(r.Header.Peek("Content-Encoding")); got != tt.ce {
				t.Errorf("%q: Content-Encoding %q, want %q", tt.ae, got, tt.ce)
			}
			if got := string(r.Header.Peek("ETag")); got != tt.etag {
				t.Errorf("%q: ETag %q, want %q", tt.ae, got, tt.etag)
			}
			if got := string(r.Header.Peek("Vary")); got != "Origin, Accept-Encoding" {
				t.Errorf("%q: Vary %q, want \"Origin, Accept-Encoding\"", tt.ae, got)
			}
			if got := decodeBody(t, tt.ce, r.Body()); got != compressBodyText {
				t.Errorf("%q: body decodes to %d bytes, want the origin's %d", tt.ae, len(got), len(compressBodyText))
			}
			if cs := string(r.Header.Peek("Cache-Status")); round == 1 && !strings.HasPrefix(cs, "shield; hit") {
				t.Errorf("%q: second round Cache-Status %q, want a hit", tt.ae, cs)
			}
		}
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1 for every coding", n)
	}
	if ae := o.last(t).header.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("origin was asked with Accept-Encoding %q, want identity", ae)
	}
}

// TestCompressConditional: If-None-Match is answered 304 for the coding
// whose ETag it names, 200 for the others; If-Range matches only its own
// coding, and a range addresses the coded bytes.
func TestCompressConditional(t *testing.T) {
	p, _ := compressProxy(t, nil)
	full := map[string][]byte{}
	for _, ce := range []string{"gzip", "br", "identity"} {
		ctx := serve(p, get(t, "/c", "Accept-Encoding: "+ce))
		full[ce] = bytes.Clone(ctx.Response.Body())
	}
	for _, tt := range []struct {
		ae, inm string
		want    int
	}{
		{"gzip", `"abc-gzip"`, 304},
		{"br", `"abc-br"`, 304},
		{"identity", `"abc"`, 304},
		{"gzip", `"abc"`, 200},
		{"identity", `"abc-gzip"`, 200},
		{"br", `W/"abc-br"`, 304}, // If-None-Match compares weakly
	} {
		ctx := serve(p, get(t, "/c", "Accept-Encoding: "+tt.ae, "If-None-Match: "+tt.inm))
		if got := ctx.Response.StatusCode(); got != tt.want {
			t.Errorf("%s with If-None-Match %s: %d, want %d", tt.ae, tt.inm, got, tt.want)
		}
	}
	for _, ce := range []string{"gzip", "br", "identity"} {
		ctx := serve(p, get(t, "/c", "Accept-Encoding: "+ce, "Range: bytes=0-9"))
		r := &ctx.Response
		if r.StatusCode() != 206 || !bytes.Equal(r.Body(), full[ce][:10]) {
			t.Errorf("%s range: %d %q, want 206 with the coded bytes %q", ce, r.StatusCode(), r.Body(), full[ce][:10])
		}
		want := "bytes 0-9/" + itoa(len(full[ce]))
		if got := string(r.Header.Peek("Content-Range")); got != want {
			t.Errorf("%s range: Content-Range %q, want %q", ce, got, want)
		}
	}
	// If-Range with the identity's strong ETag on a gzip request: the
	// representation differs, so the whole gzip body.
	ctx := serve(p, get(t, "/c", "Accept-Encoding: gzip", "Range: bytes=0-9", `If-Range: "abc"`))
	if ctx.Response.StatusCode() != 200 || !bytes.Equal(ctx.Response.Body(), full["gzip"]) {
		t.Errorf("gzip with If-Range of identity's ETag: %d, %d bytes; want 200 with the whole gzip body", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	ctx = serve(p, get(t, "/c", "Accept-Encoding: gzip", "Range: bytes=0-9", `If-Range: "abc-gzip"`))
	if ctx.Response.StatusCode() != 206 {
		t.Errorf("gzip with If-Range of its own ETag: %d, want 206", ctx.Response.StatusCode())
	}
}

// TestCompressPurge: a URL purge makes every coding a miss.
func TestCompressPurge(t *testing.T) {
	p, o := compressProxy(t, nil)
	codings := []string{"gzip", "br", "identity"}
	for _, ce := range codings {
		serve(p, get(t, "/c", "Accept-Encoding: "+ce))
	}
	if _, err := p.Purge(url.Values{"url": {"http://" + testHost + "/c"}}); err != nil {
		t.Fatal(err)
	}
	for i, ce := range codings {
		ctx := serve(p, get(t, "/c", "Accept-Encoding: "+ce))
		cs := string(ctx.Response.Header.Peek("Cache-Status"))
		if i == 0 && !strings.Contains(cs, "fwd=miss") {
			t.Errorf("%s after purge: Cache-Status %q, want a miss", ce, cs)
		}
		if i > 0 && !strings.HasPrefix(cs, "shield; hit") {
			t.Errorf("%s after the refetch: Cache-Status %q, want a hit", ce, cs)
		}
	}
	if n := o.hits.Load(); n != 2 {
		t.Errorf("origin fetches = %d, want 2 (one before, one after the purge)", n)
	}
}

// TestCompressPurgeEachCodingMisses checks that no sibling survives a
// purge by URL or by tag: each coding's first request after it is not a
// hit.
func TestCompressPurgeEachCodingMisses(t *testing.T) {
	for _, by := range []url.Values{{"url": {"http://" + testHost + "/c"}}, {"tag": {"doc"}}} {
		for _, ce := range []string{"gzip", "br", "identity"} {
			t.Run(by.Encode()+"/"+ce, func(t *testing.T) {
				p, o := compressProxy(t, func(w http.ResponseWriter, r *http.Request, n int64) {
					w.Header().Set("Cache-Control", "public, max-age=3600")
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Surrogate-Key", "doc other")
					_, _ = w.Write([]byte(compressBodyText))
				})
				for _, c := range []string{"gzip", "br", "identity"} {
					serve(p, get(t, "/c", "Accept-Encoding: "+c))
				}
				if _, err := p.Purge(by); err != nil {
					t.Fatal(err)
				}
				ctx := serve(p, get(t, "/c", "Accept-Encoding: "+ce))
				if cs := string(ctx.Response.Header.Peek("Cache-Status")); strings.HasPrefix(cs, "shield; hit") {
					t.Errorf("first %s request after purge: Cache-Status %q, want a miss", ce, cs)
				}
				if n := o.hits.Load(); n != 2 {
					t.Errorf("origin fetches = %d, want 2", n)
				}
			})
		}
	}
}

// TestCompressSkips: what must not be compressed is served as the
// origin sent it, without Vary: Accept-Encoding added.
func TestCompressSkips(t *testing.T) {
	big := strings.Repeat("x", 4096)
	tests := []struct {
		name string
		h    func(w http.ResponseWriter)
		body string
	}{
		{"image", func(w http.ResponseWriter) { w.Header().Set("Content-Type", "image/png") }, big},
		{"small", func(w http.ResponseWriter) { w.Header().Set("Content-Type", "text/plain") }, "tiny"},
		{"no-transform", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Cache-Control", "public, max-age=60, no-transform")
		}, big},
		{"coded by origin", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Encoding", "deflate")
		}, big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := compressProxy(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Cache-Control", "public, max-age=60")
				tt.h(w)
				_, _ = w.Write([]byte(tt.body))
			})
			for range 2 {
				ctx := serve(p, get(t, "/s", "Accept-Encoding: gzip, br"))
				r := &ctx.Response
				ce := string(r.Header.Peek("Content-Encoding"))
				if ce == "gzip" || ce == "br" || string(r.Body()) != tt.body {
					t.Errorf("Content-Encoding %q, %d bytes; want the origin's answer as sent", ce, len(r.Body()))
				}
				if strings.Contains(string(r.Header.Peek("Vary")), "Accept-Encoding") {
					t.Errorf("Vary %q on an answer that does not depend on Accept-Encoding", r.Header.Peek("Vary"))
				}
			}
		})
	}
}

// TestCompressPassThrough: an answer that is not stored (no-store) is
// compressed on its way to the client, as is a bypassed request's.
func TestCompressPassThrough(t *testing.T) {
	p, o := compressProxy(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"p1"`)
		_, _ = w.Write([]byte(compressBodyText))
	})
	for _, hs := range [][]string{
		{"Accept-Encoding: gzip"},
		{"Accept-Encoding: gzip", "Cache-Control: no-store"}, // bypass
	} {
		ctx := serve(p, get(t, "/p", hs...))
		r := &ctx.Response
		if string(r.Header.Peek("Content-Encoding")) != "gzip" || decodeBody(t, "gzip", r.Body()) != compressBodyText {
			t.Errorf("%v: Content-Encoding %q; want gzip decoding to the origin's body", hs, r.Header.Peek("Content-Encoding"))
		}
		if got := string(r.Header.Peek("ETag")); got != `"p1-gzip"` {
			t.Errorf("%v: ETag %q, want \"p1-gzip\"", hs, got)
		}
		if !strings.Contains(string(r.Header.Peek("Vary")), "Accept-Encoding") {
			t.Errorf("%v: Vary %q lacks Accept-Encoding", hs, r.Header.Peek("Vary"))
		}
	}
	ctx := serve(p, get(t, "/p", "Accept-Encoding: identity"))
	if ce := ctx.Response.Header.Peek("Content-Encoding"); len(ce) > 0 || string(ctx.Response.Body()) != compressBodyText {
		t.Errorf("identity pass-through: Content-Encoding %q", ce)
	}
	if n := o.hits.Load(); n != 3 {
		t.Errorf("origin fetches = %d, want 3 (nothing stored)", n)
	}
}

// TestCompressEvictedSibling: a sibling that is gone (evicted, or stored
// before the route compressed) is compressed again from the identity
// entry, without an origin fetch.
func TestCompressEvictedSibling(t *testing.T) {
	p, o := compressProxy(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(compressBodyText))
	})
	ctx := serve(p, get(t, "/c", "Accept-Encoding: gzip"))
	key := primaryKey(p, ctx)
	p.cache.Del(appendSiblingKey(nil, key, []byte("gzip")))
	ctx = serve(p, get(t, "/c", "Accept-Encoding: gzip"))
	r := &ctx.Response
	if string(r.Header.Peek("Content-Encoding")) != "gzip" || decodeBody(t, "gzip", r.Body()) != compressBodyText {
		t.Errorf("after eviction: Content-Encoding %q", r.Header.Peek("Content-Encoding"))
	}
	if _, ok := stored(t, p, appendSiblingKey(nil, key, []byte("gzip"))); !ok {
		t.Error("the sibling was not stored again")
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1", n)
	}
}

// warmCoded stores the hit object on a compress route and returns a
// ctx asking for it with Accept-Encoding ae.
func warmCoded(tb testing.TB, ae string) (*Proxy, *fasthttp.RequestCtx, int) {
	tb.Helper()
	return warmCodedFrom(tb, ae, hitOrigin(false))
}

// warmCodedFrom is warmCoded in front of the origin handler h.
func warmCodedFrom(tb testing.TB, ae string, h func(w http.ResponseWriter, r *http.Request, n int64)) (*Proxy, *fasthttp.RequestCtx, int) {
	tb.Helper()
	o := newTestOrigin(tb, h)
	p := newTestProxy(tb, o.addr(), func(c *config.Config) {
		c.Routes[0].Compress.Codings = []string{"br", "gzip"}
	})
	ctx := hitCtx(tb)
	ctx.Request.Header.Set("Accept-Encoding", ae)
	serve(p, ctx)
	for range 2 {
		ctx.Response.Reset()
		ctx.Request.Header.Set("Accept-Encoding", ae)
		p.Handler()(ctx)
	}
	if cs := ctx.Response.Header.PeekBytes(httpx.HCacheStatus); !bytes.HasPrefix(cs, hitPrefix) {
		tb.Fatalf("Cache-Status = %q, want a hit", cs)
	}
	return p, ctx, len(ctx.Response.Body())
}

// codedHits serves ctx through h again and again with Accept-Encoding
// ae (the handler sets the field to identity, so each run sets it back,
// as a new request would have it), each answer a hit of n bytes.
func codedHits(tb testing.TB, h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, ae []byte, n int) func() {
	return func() {
		ctx.Response.Reset()
		ctx.Request.Header.SetBytesKV(hAcceptEncoding, ae)
		h(ctx)
		if !bytes.HasPrefix(ctx.Response.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) || len(ctx.Response.Body()) != n {
			tb.Fatalf("Cache-Status = %q, %d bytes; want a hit of %d", ctx.Response.Header.PeekBytes(httpx.HCacheStatus), len(ctx.Response.Body()), n)
		}
	}
}

// BenchmarkCompressedHit: gzip and br hits on a compress route (the
// sibling read directly) against an identity hit of the same 1 KiB
// object on the same route (BenchmarkHit is a route without compress).
func BenchmarkCompressedHit(b *testing.B) {
	for _, ae := range []string{"identity", "gzip", "br"} {
		b.Run(ae, func(b *testing.B) {
			p, ctx, n := warmCoded(b, ae)
			run := codedHits(b, p.Handler(), ctx, []byte(ae), n)
			b.SetBytes(int64(len(hitBody)))
			b.ReportAllocs()
			for b.Loop() {
				run()
			}
		})
	}
}

// TestCompressRevalidated: a coded request that makes shield revalidate
// (no-cache) sends the origin the identity's validator, never a coded
// one, and gets its coding from the refreshed entry (compressed again:
// the old sibling belongs to the old store).
func TestCompressRevalidated(t *testing.T) {
	p, o := compressProxy(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"abc"`)
		w.Header().Set("Vary", "Origin") // in the 304 too: it replaces the stored Vary
		if r.Header.Get("If-None-Match") == `"abc"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(compressBodyText))
	})
	serve(p, get(t, "/r", "Accept-Encoding: gzip"))
	ctx := serve(p, get(t, "/r", "Accept-Encoding: gzip", "Cache-Control: no-cache"))
	r := &ctx.Response
	if cs := string(r.Header.Peek("Cache-Status")); !strings.Contains(cs, "fwd-status=304") {
		t.Fatalf("Cache-Status %q, want a revalidation", cs)
	}
	if inm := o.last(t).header.Get("If-None-Match"); inm != `"abc"` {
		t.Errorf("origin got If-None-Match %q, want the identity's \"abc\"", inm)
	}
	if string(r.Header.Peek("Content-Encoding")) != "gzip" || string(r.Header.Peek("ETag")) != `"abc-gzip"` || decodeBody(t, "gzip", r.Body()) != compressBodyText {
		t.Errorf("revalidated answer: Content-Encoding %q, ETag %q", r.Header.Peek("Content-Encoding"), r.Header.Peek("ETag"))
	}
	ctx = serve(p, get(t, "/r", "Accept-Encoding: br"))
	if cs := string(ctx.Response.Header.Peek("Cache-Status")); !strings.HasPrefix(cs, "shield; hit") || string(ctx.Response.Header.Peek("Content-Encoding")) != "br" {
		t.Errorf("br after the revalidation: Cache-Status %q, Content-Encoding %q; want a br hit", cs, ctx.Response.Header.Peek("Content-Encoding"))
	}
	ctx = serve(p, get(t, "/r", "Accept-Encoding: identity"))
	if v := string(ctx.Response.Header.Peek("Vary")); v != "Origin, Accept-Encoding" {
		t.Errorf("identity after the revalidation: Vary %q, want \"Origin, Accept-Encoding\"", v)
	}
	if n := o.hits.Load(); n != 2 {
		t.Errorf("origin requests = %d, want 2 (fetch, revalidation)", n)
	}
}
