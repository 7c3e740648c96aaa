package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// TestCompressForwarded: a request forwarded to the key's owner gets
// the coding its client negotiated at the edge (the edge's own
// Accept-Encoding was set to identity for keying), from one origin
// fetch at the owner.
func TestCompressForwarded(t *testing.T) {
	c := newTestCluster(t, clusterSetup{cfg: func(cfg *config.Config) {
		cfg.Routes[0].Compress.Codings = []string{"br", "gzip"}
	}}, "a", "b")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
		ctx.SetContentType("text/plain")
		ctx.SetBodyString(compressBodyText)
	})
	a := c.node("a")
	path := pathWhere(t, "z", func(p string) bool { return a.owner(t, p) == "b" })
	for _, ce := range []string{"gzip", "br", "identity", "gzip"} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI(path)
		req.Header.SetHost(testHost)
		req.Header.Set("Accept-Encoding", ce)
		if err := a.client.DoTimeout(req, resp, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		want := ce
		if ce == "identity" {
			want = ""
		}
		if got := string(resp.Header.Peek("Content-Encoding")); got != want {
			t.Errorf("%s via the edge: Content-Encoding %q, want %q", ce, got, want)
		}
		if got := decodeBody(t, want, resp.Body()); got != compressBodyText {
			t.Errorf("%s via the edge: body decodes to %d bytes, want %d", ce, len(got), len(compressBodyText))
		}
		if cs := joinValues(resp.Header.PeekAll("Cache-Status")); !strings.Contains(cs, "peer-b") {
			t.Errorf("%s: Cache-Status %q, want an answer from the owner b", ce, cs)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if n := c.origin.hits(path); n != 1 {
		t.Errorf("origin fetches = %d, want 1", n)
	}
}
