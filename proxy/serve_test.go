package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
)

func TestMissThenHit(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Age", "100") // the origin's own cache held it for 100s
		_, _ = fmt.Fprintf(w, "body %d", n)
	})
	p := newTestProxy(t, o.addr(), nil)

	first := summary(serve(p, get(t, "/a")))
	if first.code != 200 || first.body != "body 1" || !strings.HasPrefix(first.cacheStatus, "shield; fwd=miss") ||
		!strings.Contains(first.cacheStatus, "stored") {
		t.Fatalf("first request = %+v, want 200 %q and a stored miss", first, "body 1")
	}
	ctx := serve(p, get(t, "/a"))
	second := summary(ctx)
	if second.code != 200 || second.body != "body 1" || !strings.HasPrefix(second.cacheStatus, "shield; hit") {
		t.Fatalf("second request = %+v, want a hit with %q", second, "body 1")
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin got %d requests, want 1", n)
	}
	// Age counts the origin's 100s plus our time in cache (RFC 9111 §4.2.3).
	age, err := strconv.Atoi(string(ctx.Response.Header.Peek("Age")))
	if err != nil || age < 100 || age > 110 {
		t.Fatalf("hit Age = %q, want 100..110", ctx.Response.Header.Peek("Age"))
	}
	ttl, err := strconv.Atoi(strings.TrimPrefix(second.cacheStatus, "shield; hit; ttl="))
	if err != nil || ttl > 3600-age || ttl < 3600-age-2 {
		t.Fatalf("hit Cache-Status = %q, want ttl about %d", second.cacheStatus, 3600-age)
	}
	if got := string(ctx.Response.Header.Peek("Cache-Control")); got != "public, max-age=3600" {
		t.Fatalf("hit Cache-Control = %q, want the stored one", got)
	}
	// Another path is another key.
	if other := summary(serve(p, get(t, "/b"))); other.body != "body 2" {
		t.Fatalf("/b = %+v, want a miss with %q", other, "body 2")
	}
}

func TestHeadAndGetShareEntry(t *testing.T) {
	tests := []struct {
		name          string
		first, second string
	}{
		{"HEAD served from a GET entry", "GET", "HEAD"},
		{"HEAD miss stored for a later GET", "HEAD", "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newTestOrigin(t, cacheable("payload"))
			p := newTestProxy(t, o.addr(), nil)
			first := summary(serve(p, newCtx(t, request(tt.first, "/x"))))
			if first.code != 200 || !strings.Contains(first.cacheStatus, "stored") {
				t.Fatalf("%s = %+v, want a stored miss", tt.first, first)
			}
			if m := o.last(t).method; m != "GET" {
				t.Fatalf("origin saw %s for a %s miss, want GET (so the answer can be stored)", m, tt.first)
			}
			ctx := serve(p, newCtx(t, request(tt.second, "/x")))
			second := summary(ctx)
			if second.code != 200 || !strings.HasPrefix(second.cacheStatus, "shield; hit") {
				t.Fatalf("%s = %+v, want a hit", tt.second, second)
			}
			if tt.second == "GET" && second.body != "payload" {
				t.Fatalf("GET body = %q, want %q", second.body, "payload")
			}
			if n := o.hits.Load(); n != 1 {
				t.Fatalf("origin got %d requests, want 1", n)
			}
		})
	}
}

func TestConditionalFromCache(t *testing.T) {
	const lastMod = "Tue, 15 Nov 1994 12:45:26 GMT"
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", lastMod)
		w.Header().Set("X-Extra", "not in a 304")
		_, _ = w.Write([]byte("full body"))
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/c")) // warm

	tests := []struct {
		name     string
		header   string
		wantCode int
	}{
		{"matching If-None-Match", `If-None-Match: "v1"`, 304},
		{"weak match", `If-None-Match: W/"v1"`, 304},
		{"one of a list", `If-None-Match: "v0", "v1"`, 304},
		{"star", `If-None-Match: *`, 304},
		{"other tag", `If-None-Match: "v2"`, 200},
		{"If-Modified-Since equal", "If-Modified-Since: " + lastMod, 304},
		{"If-Modified-Since earlier", "If-Modified-Since: Mon, 14 Nov 1994 12:45:26 GMT", 200},
		{"If-None-Match wins over If-Modified-Since", "If-None-Match: \"v2\"\nIf-Modified-Since: " + lastMod, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := serve(p, get(t, "/c", strings.Split(tt.header, "\n")...))
			got := summary(ctx)
			if got.code != tt.wantCode || !strings.HasPrefix(got.cacheStatus, "shield; hit") {
				t.Fatalf("response = %+v, want %d from cache", got, tt.wantCode)
			}
			switch tt.wantCode {
			case 304:
				if got.body != "" || len(ctx.Response.Header.Peek("X-Extra")) != 0 {
					t.Fatalf("304 carries body %q or X-Extra, want neither", got.body)
				}
				if et := string(ctx.Response.Header.Peek("ETag")); et != `"v1"` {
					t.Fatalf("304 ETag = %q, want %q", et, `"v1"`)
				}
			case 200:
				if got.body != "full body" {
					t.Fatalf("body = %q, want the stored one", got.body)
				}
			}
		})
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin got %d requests, want 1 (conditionals answered from cache)", n)
	}
}

func TestRequestNoCacheRevalidates(t *testing.T) {
	for _, reqHeader := range []string{"Cache-Control: no-cache", "Cache-Control: max-age=0", "Pragma: no-cache"} {
		t.Run(reqHeader, func(t *testing.T) {
			o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("X-Rev", strconv.FormatInt(n, 10))
				if r.Header.Get("If-None-Match") == `"v1"` {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				_, _ = w.Write([]byte("original body"))
			})
			p := newTestProxy(t, o.addr(), nil)
			serve(p, get(t, "/r"))
			key := primaryKey(p, get(t, "/r"))
			before, _ := stored(t, p, key)
			storedAt := before.StoredAt

			got := summary(serve(p, get(t, "/r", reqHeader)))
			if got.code != 200 || got.body != "original body" || !strings.Contains(got.cacheStatus, "fwd-status=304") {
				t.Fatalf("revalidating request = %+v, want 200 with the stored body after an origin 304", got)
			}
			if o.hits.Load() != 2 {
				t.Fatalf("origin got %d requests, want 2", o.hits.Load())
			}
			if inm := o.last(t).header.Get("If-None-Match"); inm != `"v1"` {
				t.Fatalf("origin saw If-None-Match %q, want the stored ETag", inm)
			}
			after, ok := stored(t, p, key)
			if !ok || after.StoredAt <= storedAt || string(after.Body) != "original body" {
				t.Fatalf("entry after 304: found %v, storedAt %d (was %d), body %q; want refreshed with the body kept",
					ok, after.StoredAt, storedAt, after.Body)
			}
			if rev, _ := storedHeader(&after, "X-Rev"); rev != "2" {
				t.Fatalf("stored X-Rev = %q, want %q from the 304", rev, "2")
			}
			hit := serve(p, get(t, "/r"))
			if s := summary(hit); !strings.HasPrefix(s.cacheStatus, "shield; hit") || s.body != "original body" {
				t.Fatalf("next request = %+v, want a hit with the kept body", s)
			}
			if rev := string(hit.Response.Header.Peek("X-Rev")); rev != "2" {
				t.Fatalf("hit X-Rev = %q, want %q", rev, "2")
			}
		})
	}
}

// TestRevalidationCacheStatus: a revalidation the request asked for is
// fwd=request in Cache-Status (RFC 9211 §2.2), not fwd=stale.
func TestRevalidationCacheStatus(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") != "" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("body"))
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/r"))
	got := summary(serve(p, get(t, "/r", "Cache-Control: no-cache")))
	if !strings.HasPrefix(got.cacheStatus, "shield; fwd=request") {
		t.Fatalf("Cache-Status = %q, want fwd=request", got.cacheStatus)
	}
}

func TestUnsafeMethodInvalidates(t *testing.T) {
	tests := []struct {
		method     string
		status     int // the origin's answer to the unsafe request
		invalidate bool
	}{
		{"POST", 200, true},
		{"PUT", 201, true},
		{"DELETE", 204, true},
		{"PATCH", 303, true},
		{"POST", 500, false},
		{"DELETE", 404, false},
		{"OPTIONS", 200, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d", tt.method, tt.status), func(t *testing.T) {
			o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				if r.Method != "GET" {
					w.WriteHeader(tt.status)
					return
				}
				w.Header().Set("Cache-Control", "public, max-age=3600")
				_, _ = fmt.Fprintf(w, "version %d", n)
			})
			p := newTestProxy(t, o.addr(), nil)
			serve(p, get(t, "/doc?id=1"))
			unsafe := summary(serve(p, newCtxBody(t, request(tt.method, "/doc?id=1"), "body")))
			if unsafe.code != tt.status || unsafe.cacheStatus != "shield; fwd=method" {
				t.Fatalf("%s = %+v, want the origin's %d passed through", tt.method, unsafe, tt.status)
			}
			if m := o.last(t).method; m != tt.method {
				t.Fatalf("origin saw %s, want %s", m, tt.method)
			}
			next := summary(serve(p, get(t, "/doc?id=1")))
			hit := strings.HasPrefix(next.cacheStatus, "shield; hit")
			if hit == tt.invalidate {
				t.Fatalf("GET after %s %d = %+v; want invalidated = %v", tt.method, tt.status, next, tt.invalidate)
			}
			if want := map[bool]string{true: "version 3", false: "version 1"}[tt.invalidate]; next.body != want {
				t.Fatalf("GET after %s body = %q, want %q", tt.method, next.body, want)
			}
		})
	}
}

func TestVaryVariants(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Vary", "Accept-Language")
		_, _ = fmt.Fprintf(w, "lang=%s", r.Header.Get("Accept-Language"))
	})
	p := newTestProxy(t, o.addr(), nil)
	steps := []struct {
		lang      string
		wantBody  string
		wantHit   bool
		wantHits  int64
		wantMatch string // Cache-Status prefix
	}{
		{"en", "lang=en", false, 1, "shield; fwd=miss"},
		{"fr", "lang=fr", false, 2, "shield; fwd=vary-miss"},
		{"en", "lang=en", true, 2, "shield; hit"},
		{"fr", "lang=fr", true, 2, "shield; hit"},
		{"", "lang=", false, 3, "shield; fwd=vary-miss"},
		{"", "lang=", true, 3, "shield; hit"},
	}
	for i, s := range steps {
		var hdr []string
		if s.lang != "" {
			hdr = append(hdr, "Accept-Language: "+s.lang)
		}
		got := summary(serve(p, get(t, "/v", hdr...)))
		if got.body != s.wantBody || !strings.HasPrefix(got.cacheStatus, s.wantMatch) {
			t.Fatalf("step %d (%q) = %+v, want %q with Cache-Status %q...", i, s.lang, got, s.wantBody, s.wantMatch)
		}
		if n := o.hits.Load(); n != s.wantHits {
			t.Fatalf("step %d: origin got %d requests, want %d", i, n, s.wantHits)
		}
	}
}

// TestNotSharedSequential: responses a shared cache must not store reach
// only the client that asked.
func TestNotSharedSequential(t *testing.T) {
	tests := []struct {
		name   string
		header [2]string
	}{
		{"private", [2]string{"Cache-Control", "private, max-age=3600"}},
		{"no-store", [2]string{"Cache-Control", "public, no-store"}},
		{"Set-Cookie", [2]string{"Set-Cookie", "session=secret"}},
		{"Vary *", [2]string{"Vary", "*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				if tt.header[0] != "Cache-Control" {
					w.Header().Set("Cache-Control", "public, max-age=3600")
				}
				w.Header().Set(tt.header[0], tt.header[1])
				_, _ = fmt.Fprintf(w, "for client %d", n)
			})
			p := newTestProxy(t, o.addr(), nil)
			for i := 1; i <= 3; i++ {
				got := summary(serve(p, get(t, "/p")))
				if want := fmt.Sprintf("for client %d", i); got.body != want || strings.Contains(got.cacheStatus, "stored") {
					t.Fatalf("request %d = %+v, want %q, not stored", i, got, want)
				}
			}
			key := primaryKey(p, get(t, "/p"))
			if e, ok := stored(t, p, key); ok && e.Kind != cache.KindHitForMiss {
				t.Fatalf("stored entry of kind %d, want none or hit-for-miss", e.Kind)
			}
		})
	}
}

// TestApplyAllOrNothing: a configuration that fails part-way (here a
// route's key rules, checked after tenants and origins) changes nothing:
// the origin budget keeps its old limit and the old routes keep serving.
func TestApplyAllOrNothing(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	var good *config.Config
	p := newTestProxy(t, o.addr(), func(c *config.Config) { good = c })
	name := good.Routes[0].Origin
	budget := func() int {
		for _, o := range p.origins.Status(time.Now()) {
			if o.Name == name {
				return o.Budget
			}
		}
		t.Fatalf("no origin %q on the status page", name)
		return 0
	}
	before := budget()

	bad := *good
	bad.Origins = map[string]*config.Origin{}
	for n, oc := range good.Origins {
		cp := *oc
		cp.MaxConcurrency = before + 7
		bad.Origins[n] = &cp
	}
	r := *good.Routes[0]
	r.Cache.IgnoreQuery = []string{"a=b"} // refused by cachekey.NewRules
	bad.Routes = []*config.Route{&r}
	if err := p.Apply(&bad); err == nil {
		t.Fatal("Apply accepted a route with an invalid ignore_query entry")
	}
	if after := budget(); after != before {
		t.Fatalf("a rejected Apply changed the origin budget from %d to %d", before, after)
	}
	if s := summary(serve(p, get(t, "/still"))); s.code != 200 {
		t.Fatalf("after a rejected Apply: %+v", s)
	}
}

// FuzzParsePeerTags: a peer's Shield-Tags value never panics and never
// yields more tags than an entry may hold.
func FuzzParsePeerTags(f *testing.F) {
	f.Add([]byte("t00000000000000010102030405060708"))
	f.Add([]byte("t"))
	f.Add([]byte("x0000000000000001"))
	f.Fuzz(func(t *testing.T, v []byte) {
		_, tags, ok := parsePeerTags(v)
		if ok && (len(tags)%8 != 0 || len(tags) > cache.MaxTags*8) {
			t.Fatalf("parsePeerTags(%q) = %d tag bytes", v, len(tags))
		}
	})
}
