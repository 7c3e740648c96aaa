package proxy

import (
	"bytes"
	"net/http"
	"testing"
)

// TestAcceptEncodingReducedWhenRead: on a plain route the request's
// Accept-Encoding is reduced only when something reads it. The origin
// always sees the reduced field (a miss, a revalidation the request asks
// for, a Vary variant); a fresh hit of a primary entry leaves the field
// as sent, its rewrite saved.
func TestAcceptEncodingReducedWhenRead(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=60")
		if r.URL.Path == "/vary" {
			w.Header().Set("Vary", "Accept-Encoding")
		}
		_, _ = w.Write([]byte("ae=" + r.Header.Get("Accept-Encoding")))
	})
	p := newTestProxy(t, o.addr(), nil)
	const sent = "gzip, deflate, br"
	for i, want := range []string{"fwd=miss", "hit"} {
		ctx := serve(p, get(t, "/plain", "Accept-Encoding: "+sent))
		if got := summary(ctx); got.body != "ae=br" || !bytes.Contains([]byte(got.cacheStatus), []byte(want)) {
			t.Fatalf("request %d: %+v, want %s of the origin's br answer", i, got, want)
		}
		reduced := string(ctx.Request.Header.Peek("Accept-Encoding"))
		if i == 0 && reduced != "br" {
			t.Errorf("miss: request's Accept-Encoding %q, want it reduced to br", reduced)
		}
		if i == 1 && reduced != sent {
			t.Errorf("hit: request's Accept-Encoding %q, want it left as sent", reduced)
		}
	}
	// Not fresh for this request: revalidated, asking for the reduced field.
	if got := summary(serve(p, get(t, "/plain", "Accept-Encoding: "+sent, "Cache-Control: no-cache"))); o.hits.Load() != 2 {
		t.Fatalf("no-cache: %+v, origin requests %d, want 2", got, o.hits.Load())
	}
	if got := o.last(t).header.Get("Accept-Encoding"); got != "br" {
		t.Errorf("revalidation sent Accept-Encoding %q, want br", got)
	}
	// A Vary marker's variant is keyed on the reduced field: one variant.
	for i, ae := range []string{sent, "br", "br, gzip"} {
		if got := summary(serve(p, get(t, "/vary", "Accept-Encoding: "+ae))); got.body != "ae=br" {
			t.Fatalf("vary request %d (%q): %+v, want the br variant", i, ae, got)
		}
	}
	if n := o.hits.Load(); n != 3 {
		t.Errorf("origin got %d requests, want 3 (plain twice, one br variant)", n)
	}
}

// FuzzPickPlain: pickPlain, canonicalEncoding's one-pass fast path,
// picks what the general loop over accepts picks whenever it answers.
func FuzzPickPlain(f *testing.F) {
	for _, s := range []string{"", "gzip", "br", "gzip, br", "gzip, deflate, br", "BR , Gzip", "identity", "deflate",
		"gzip;q=0, br", "*", "br,", ",,gzip", " br ", "gzip, br, zstd", "xbr, gzipx", "br\t,gzip"} {
		f.Add(s)
	}
	routes := []*route{
		{codings: [][]byte{[]byte("br"), []byte("gzip")}},
		{codings: [][]byte{[]byte("gzip")}},
		{codings: [][]byte{[]byte("zstd"), []byte("br"), []byte("gzip")}},
	}
	f.Fuzz(func(t *testing.T, ae string) {
		for _, r := range routes {
			got := r.pickPlain([]byte(ae))
			if got == nil {
				continue
			}
			var want []byte
			for _, c := range r.codings {
				if accepts([]byte(ae), c) {
					want = c
					break
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("codings %q, Accept-Encoding %q: pickPlain %q, accepts loop %q", r.codings, ae, got, want)
			}
		}
	})
}
