package e2e

import (
	"bytes"
	"net/http"
	"testing"
)

// TestMissThenHit: the first request is a stored miss, the second a hit
// with Age and the same body; the origin saw one request.
func TestMissThenHit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	miss := e.get("/hit")
	cs := wantForwarded(t, "first GET /hit", miss)
	if cs.fwd != "miss" || !cs.stored {
		t.Errorf("first GET /hit: Cache-Status %q, want fwd=miss; stored", miss.header.Get("Cache-Status"))
	}
	hit := e.get("/hit")
	wantHit(t, "second GET /hit", hit)
	if !bytes.Equal(hit.body, miss.body) {
		t.Errorf("hit body %q differs from the stored miss %q", hit.body, miss.body)
	}
	e.wantOriginCount("/hit", 1)
}

// TestVary: one URL with Vary: Accept-Language holds one variant per
// language; each repeat is a hit carrying its own language's body.
func TestVary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/vary", "vary", "Accept-Language")
	first := map[string]result{}
	for _, lang := range []string{"en", "fr"} {
		r := e.get(u, "Accept-Language", lang)
		wantForwarded(t, "first GET for "+lang, r)
		first[lang] = r
	}
	for _, lang := range []string{"en", "fr", "en"} {
		r := e.get(u, "Accept-Language", lang)
		wantHit(t, "repeat GET for "+lang, r)
		if got := decode(t, r).Vary["Accept-Language"]; got != lang {
			t.Errorf("repeat GET for %s: body echoes Accept-Language %q (variants mixed up)", lang, got)
		}
		if !bytes.Equal(r.body, first[lang].body) {
			t.Errorf("repeat GET for %s: body %q, want the stored %q", lang, r.body, first[lang].body)
		}
	}
	e.wantOriginCount("/vary", 2)
}

// TestNoStore: a no-store response is never served from the cache.
func TestNoStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/nostore", "cc", "no-store")
	seen := map[int64]bool{}
	for i := range 3 {
		r := e.get(u)
		wantForwarded(t, "GET no-store", r)
		n := decode(t, r).N
		if seen[n] {
			t.Errorf("request %d got origin answer n=%d again: it was served from a cache", i+1, n)
		}
		seen[n] = true
	}
	e.wantOriginCount("/nostore", 3)
}

// TestHeadAndConditional: HEAD and If-None-Match are answered from a GET
// entry without the origin; request Cache-Control: no-cache goes to it.
func TestHeadAndConditional(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := target("/cond", "etag", "1")
	full := e.get(u)
	wantForwarded(t, "GET", full)
	etag := full.header.Get("ETag")
	if etag == "" {
		t.Fatalf("GET %s: no ETag in %v", u, full.header)
	}

	head := e.do(http.MethodHead, u)
	wantHit(t, "HEAD after GET", head)
	if len(head.body) != 0 {
		t.Errorf("HEAD: body of %d bytes, want none", len(head.body))
	}
	if got := head.header.Get("ETag"); got != etag {
		t.Errorf("HEAD: ETag %q, want %q", got, etag)
	}

	nm := e.get(u, "If-None-Match", etag)
	if nm.status != http.StatusNotModified {
		t.Errorf("GET If-None-Match %s: status %d, want 304 (%v)", etag, nm.status, nm)
	}
	if cs := parseCacheStatus(nm.header); !cs.hit {
		t.Errorf("GET If-None-Match: Cache-Status %q, want a hit", nm.header.Get("Cache-Status"))
	}
	if len(nm.body) != 0 {
		t.Errorf("304: body %q, want none", nm.body)
	}
	s := e.stats()
	if s.ByPath["/cond"] != 1 || s.NotModified != 0 {
		t.Errorf("after GET, HEAD, conditional GET: origin saw %d requests (%d 304s), want 1 (0)",
			s.ByPath["/cond"], s.NotModified)
	}

	nc := e.get(u, "Cache-Control", "no-cache")
	if cs := wantForwarded(t, "GET Cache-Control: no-cache", nc); cs.fwd != "request" {
		t.Errorf("GET Cache-Control: no-cache: Cache-Status %q, want fwd=request", nc.header.Get("Cache-Status"))
	}
	e.wantOriginCount("/cond", 2)
}

// TestFreshness: Expires alone makes a response fresh; max-age=0 never
// yields a hit.
func TestFreshness(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name    string
		path    string
		query   []string
		wantHit bool
	}{
		{"expires only", "/expires", []string{"cc", "", "expires", "60"}, true},
		{"max-age=0", "/maxage0", []string{"cc", "max-age=0"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			u := target(tt.path, tt.query...)
			wantForwarded(t, "first GET "+u, e.get(u))
			second := e.get(u)
			want := int64(2)
			if tt.wantHit {
				wantHit(t, "second GET "+u, second)
				want = 1
			} else {
				wantForwarded(t, "second GET "+u, second)
			}
			e.wantOriginCount(tt.path, want)
		})
	}
}
