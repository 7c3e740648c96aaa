package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/shield-proxy/shield/config"
)

// TestPreconditionsOnHits: a GET or HEAD answered from cache evaluates
// the client's preconditions in RFC 9110 §13.2.2's order — If-Match
// (strong comparison), else If-Unmodified-Since, then If-None-Match,
// else If-Modified-Since — 412 for a false If-Match or
// If-Unmodified-Since, 304 for a false If-None-Match or
// If-Modified-Since; an answer that is not 2xx ignores them (RFC 9110 §13.2.1).
func TestPreconditionsOnHits(t *testing.T) {
	const (
		lm      = "Sun, 06 Nov 1994 08:49:37 GMT"
		before  = "Sat, 05 Nov 1994 08:49:37 GMT"
		after   = "Mon, 07 Nov 1994 08:49:37 GMT"
		noMatch = `"other"`
	)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		switch r.URL.Path {
		case "/strong":
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Last-Modified", lm)
		case "/weak":
			w.Header().Set("ETag", `W/"w1"`)
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
		case "/large": // stored in pieces: its hits are streamed (streamhit.go)
			w.Header().Set("ETag", `"L1"`)
			w.Header().Set("Last-Modified", lm)
			_, _ = w.Write([]byte(strings.Repeat("large body ", 20000)))
			return
		}
		_, _ = w.Write([]byte("body"))
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Cache.MaxObjectSize = config.MiB })
	for _, path := range []string{"/strong", "/weak", "/none", "/missing", "/large"} {
		serve(p, get(t, path))
	}
	hits := o.hits.Load()
	for _, c := range []struct {
		path string
		hdr  []string
		want int
	}{
		{"/strong", []string{`If-Match: "v1"`}, 200},
		{"/strong", []string{`If-Match: "x", "v1"`}, 200},
		{"/strong", []string{`If-Match: *`}, 200},
		{"/strong", []string{"If-Match: " + noMatch}, 412},
		{"/strong", []string{`If-Match: W/"v1"`}, 412}, // strong comparison: a weak tag never matches
		{"/strong", []string{`If-Match: "x", W/"v1"`}, 412},
		{"/strong", []string{`If-Match: "v1"`, `If-None-Match: "v1"`}, 304},       // If-Match true, then If-None-Match false
		{"/strong", []string{"If-Match: " + noMatch, `If-None-Match: "v1"`}, 412}, // If-Match first
		{"/strong", []string{"If-Unmodified-Since: " + before}, 412},
		{"/strong", []string{"If-Unmodified-Since: " + lm}, 200},
		{"/strong", []string{"If-Unmodified-Since: " + after}, 200},
		{"/strong", []string{"If-Unmodified-Since: yesterday"}, 200},                   // not a date: ignored
		{"/strong", []string{`If-Match: "v1"`, "If-Unmodified-Since: " + before}, 200}, // ignored when If-Match is present
		{"/strong", []string{"If-Match: *", "If-Unmodified-Since: " + before}, 200},
		{"/strong", []string{"If-Unmodified-Since: " + before, `If-None-Match: "v1"`}, 412},
		{"/strong", []string{"If-Unmodified-Since: " + after, `If-None-Match: "v1"`}, 304},
		{"/strong", []string{"If-Unmodified-Since: " + after, "If-Modified-Since: " + after}, 304},
		{"/weak", []string{`If-Match: W/"w1"`}, 412},
		{"/weak", []string{`If-Match: "w1"`}, 412},
		{"/weak", []string{`If-Match: *`}, 200},
		{"/weak", []string{`If-None-Match: "w1"`}, 304},            // If-None-Match compares weakly
		{"/weak", []string{"If-Unmodified-Since: " + before}, 200}, // no Last-Modified: ignored
		{"/none", []string{`If-Match: "a"`}, 412},                  // no ETag: no tag matches
		{"/none", []string{`If-Match: *`}, 200},
		{"/large", []string{`If-Match: "L1"`}, 200},
		{"/large", []string{"If-Match: " + noMatch}, 412},
		{"/large", []string{"If-Unmodified-Since: " + before}, 412},
		{"/large", []string{`If-None-Match: "L1"`}, 304},
		{"/missing", []string{"If-Match: " + noMatch}, 404}, // not 2xx: preconditions ignored
		{"/missing", []string{"If-Unmodified-Since: " + before}, 404},
	} {
		for _, method := range []string{"GET", "HEAD"} {
			s := summary(serve(p, newCtx(t, request(method, c.path, c.hdr...))))
			if s.code != c.want || !strings.Contains(s.cacheStatus, "hit") {
				t.Errorf("%s %s %q = %+v, want a %d hit", method, c.path, c.hdr, s, c.want)
			}
			if s.code == 412 && s.body != "" {
				t.Errorf("%s %s %q: 412 with body %q", method, c.path, c.hdr, s.body)
			}
		}
	}
	if o.hits.Load() != hits {
		t.Errorf("the origin saw %d requests: every precondition is answered from cache", o.hits.Load()-hits)
	}
}

// TestPreconditionFailedIsNotCacheable: shield's 412 carries none of the
// stored answer's fields — no Cache-Control a downstream cache could
// store it under for everybody, no validators — and a client's
// preconditions on a miss are not sent to the origin (the answer is
// stored for everybody) but evaluated by shield on the fetched answer.
func TestPreconditionFailedIsNotCacheable(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte("body"))
	})
	p := newTestProxy(t, o.addr(), nil)
	miss := serve(p, get(t, "/m", `If-Match: "other"`))
	if s := summary(miss); s.code != 412 || s.body != "" {
		t.Fatalf("miss with a false If-Match = %+v, want 412 without a body", s)
	}
	if v := o.last(t).header.Get("If-Match"); v != "" {
		t.Errorf("the origin saw If-Match %q on a cache fetch", v)
	}
	hit := serve(p, get(t, "/m", `If-Match: "other"`))
	if s := summary(hit); s.code != 412 || !strings.Contains(s.cacheStatus, "hit") {
		t.Fatalf("hit with a false If-Match = %+v, want a 412 hit", s)
	}
	for _, ctx := range []interface{ Peek(string) []byte }{&miss.Response.Header, &hit.Response.Header} {
		for _, name := range []string{"Cache-Control", "ETag", "Expires", "Last-Modified"} {
			if v := ctx.Peek(name); len(v) > 0 {
				t.Errorf("412 carries %s: %q", name, v)
			}
		}
	}
	if s := summary(serve(p, get(t, "/m", `If-Match: "v1"`))); s.code != 200 || s.body != "body" {
		t.Errorf("hit with a true If-Match = %+v, want the stored 200", s)
	}
}
