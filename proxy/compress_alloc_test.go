//go:build !race

package proxy

import (
	"net/http"
	"testing"
)

// TestCompressedHitAllocs: a hit of a coded sibling allocates nothing,
// like an identity hit (TestHitAllocs), and is served coded.
func TestCompressedHitAllocs(t *testing.T) {
	for _, tc := range []struct {
		ae   string
		vary bool
	}{{"identity", false}, {"gzip", false}, {"br", false}, {"identity", true}, {"gzip", true}, {"br", true}} {
		ae := tc.ae
		name := ae
		if tc.vary {
			name += "/vary" // the origin's Vary: Accept-Encoding: a variant and its sibling
		}
		t.Run(name, func(t *testing.T) {
			p, ctx, n := warmCodedFrom(t, ae, hitOrigin(tc.vary))
			run := codedHits(t, p.Handler(), ctx, []byte(ae), n)
			if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
				t.Errorf("%s hit = %v allocs/op, want 0", ae, allocs)
			}
			want := ae
			if ae == "identity" {
				want = ""
			}
			if got := string(ctx.Response.Header.Peek("Content-Encoding")); got != want {
				t.Errorf("Content-Encoding %q, want %q", got, want)
			}
		})
	}
}

// TestUncompressibleHitAllocs: on a compress route, a gzip-accepting
// request for an object that is not compressed (an image) looks for a
// sibling, finds none and is an identity hit, still without allocating.
func TestUncompressibleHitAllocs(t *testing.T) {
	img := func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(hitBody)
	}
	p, ctx, n := warmCodedFrom(t, "gzip, br", img)
	run := codedHits(t, p.Handler(), ctx, []byte("gzip, br"), n)
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Errorf("uncompressible hit = %v allocs/op, want 0", allocs)
	}
	if ce := ctx.Response.Header.Peek("Content-Encoding"); len(ce) > 0 || n != len(hitBody) {
		t.Errorf("Content-Encoding %q, %d bytes; want the image as stored", ce, n)
	}
}

// TestCompressedNotModifiedAllocs: If-None-Match with a coding's own
// ETag is a 304 hit of that coding, allocation-free too.
func TestCompressedNotModifiedAllocs(t *testing.T) {
	p, ctx, _ := warmCoded(t, "gzip")
	ctx.Request.Header.Set("If-None-Match", `"abc123-gzip"`)
	h := p.Handler()
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		ctx.Request.Header.SetBytesKV(hAcceptEncoding, []byte("gzip"))
		h(ctx)
	})
	if ctx.Response.StatusCode() != http.StatusNotModified {
		t.Fatalf("status = %d, want 304", ctx.Response.StatusCode())
	}
	if allocs != 0 {
		t.Errorf("coded 304 hit = %v allocs/op, want 0", allocs)
	}
}
