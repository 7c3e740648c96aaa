package proxy

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/shield-proxy/shield/config"
)

// TestTargetedCacheControl: RFC 9213 §2.2 — the first targeted field
// present replaces Cache-Control (and Expires) for shield; targeted
// fields are not passed on to clients unless the route says so.
func TestTargetedCacheControl(t *testing.T) {
	t.Run("CDN-Cache-Control overrides no-store RFC 9213 §2.2", func(t *testing.T) {
		o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("CDN-Cache-Control", "max-age=60")
			_, _ = w.Write([]byte("cdn"))
		})
		p := newTestProxy(t, o.addr(), nil)
		for i := range 2 {
			ctx := serve(p, get(t, "/cdn"))
			if got := summary(ctx); got.code != 200 || got.body != "cdn" {
				t.Fatalf("request %d = %+v", i, got)
			}
			if v := ctx.Response.Header.Peek("CDN-Cache-Control"); len(v) > 0 {
				t.Fatalf("request %d: CDN-Cache-Control %q reached the client", i, v)
			}
			if cc := string(ctx.Response.Header.Peek("Cache-Control")); cc != "no-store" {
				t.Fatalf("request %d: Cache-Control = %q, want the origin's no-store for clients", i, cc)
			}
		}
		if n := o.hits.Load(); n != 1 {
			t.Fatalf("origin got %d requests, want 1", n)
		}
	})
	t.Run("targeted no-store overrides max-age RFC 9213 §2.2", func(t *testing.T) {
		o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "public, max-age=3600")
			w.Header().Set("CDN-Cache-Control", "no-store")
			_, _ = w.Write([]byte("x"))
		})
		p := newTestProxy(t, o.addr(), nil)
		serve(p, get(t, "/ns"))
		serve(p, get(t, "/ns"))
		if n := o.hits.Load(); n != 2 {
			t.Fatalf("origin got %d requests, want 2 (targeted no-store)", n)
		}
	})
	t.Run("first listed field wins, forwarded when configured", func(t *testing.T) {
		o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Shield-Cache-Control", "max-age=60")
			w.Header().Set("CDN-Cache-Control", "no-store")
			_, _ = w.Write([]byte("x"))
		})
		p := newTestProxy(t, o.addr(), func(c *config.Config) {
			c.Routes[0].Cache.Targeted = []string{"Shield-Cache-Control", "CDN-Cache-Control"}
			c.Routes[0].Cache.ForwardTargeted = true
		})
		serve(p, get(t, "/first"))
		ctx := serve(p, get(t, "/first"))
		if got := summary(ctx); !strings.HasPrefix(got.cacheStatus, "shield; hit") {
			t.Fatalf("second request = %+v, want a hit under Shield-Cache-Control", got)
		}
		if v := string(ctx.Response.Header.Peek("Shield-Cache-Control")); v != "max-age=60" {
			t.Fatalf("Shield-Cache-Control = %q, want it forwarded", v)
		}
	})
}

// TestQualifiedDirectives: RFC 9111 §5.2.2.4 and §5.2.2.7 — the answer
// is stored without the named fields.
func TestQualifiedDirectives(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", `max-age=60, no-cache="Set-Cookie", private="X-Name"`)
		w.Header().Set("Set-Cookie", "s=1")
		w.Header().Set("X-Name", "alice")
		w.Header().Set("X-Kept", "yes")
		_, _ = w.Write([]byte("q"))
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/q"))
	ctx := serve(p, get(t, "/q"))
	got := summary(ctx)
	if !strings.HasPrefix(got.cacheStatus, "shield; hit") || got.body != "q" {
		t.Fatalf("second request = %+v, want a hit", got)
	}
	for _, name := range []string{"Set-Cookie", "X-Name"} {
		if v := ctx.Response.Header.Peek(name); len(v) > 0 {
			t.Errorf("hit carries %s: %q", name, v)
		}
	}
	if v := string(ctx.Response.Header.Peek("X-Kept")); v != "yes" {
		t.Errorf("X-Kept = %q, want the unnamed field kept", v)
	}
}

// TestAcceptEncodingCanonical: five spellings of one preference are one
// variant and one origin fetch (RFC 9110 §12.5.3, RFC 9111 §4.1).
func TestAcceptEncodingCanonical(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Encoding")
		_, _ = w.Write([]byte("ae=" + r.Header.Get("Accept-Encoding")))
	})
	p := newTestProxy(t, o.addr(), nil)
	for _, ae := range []string{"gzip, deflate, br", "gzip, br", "br, gzip", "br", "BR;q=1.0, gzip;q=0.5"} {
		if got := summary(serve(p, get(t, "/ae", "Accept-Encoding: "+ae))); got.body != "ae=br" {
			t.Fatalf("Accept-Encoding %q: %+v, want the br variant", ae, got)
		}
	}
	if got := summary(serve(p, get(t, "/ae", "Accept-Encoding: gzip, br;q=0"))); got.body != "ae=gzip" {
		t.Fatalf("br;q=0: %+v, want the gzip variant", got)
	}
	if got := summary(serve(p, get(t, "/ae", "Accept-Encoding: deflate"))); got.body != "ae=identity" {
		t.Fatalf("deflate only: %+v, want identity", got)
	}
	if got := summary(serve(p, get(t, "/ae"))); got.body != "ae=identity" {
		t.Fatalf("no Accept-Encoding: %+v, want identity", got)
	}
	if n := o.hits.Load(); n != 3 {
		t.Fatalf("origin got %d requests, want 3 (br, gzip, identity)", n)
	}
}

func TestAccepts(t *testing.T) {
	for _, tc := range []struct {
		ae, coding string
		want       bool
	}{
		{"gzip, br", "br", true},
		{"gzip", "br", false},
		{"*", "br", true},
		{"*;q=0", "br", false},
		{"*, br;q=0", "br", false},
		{"br;q=0.001", "br", true},
		{"br;q=0.000", "br", false},
		{"BR ; Q=1", "br", true},
		{"", "gzip", false},
	} {
		if got := accepts([]byte(tc.ae), []byte(tc.coding)); got != tc.want {
			t.Errorf("accepts(%q, %q) = %v, want %v", tc.ae, tc.coding, got, tc.want)
		}
	}
}

// TestHitKeepsOriginDate: RFC 9110 §6.6.1 and RFC 9111 §4 — a stored
// answer is served with the Date its origin sent; Age says how long it
// has been stored. Through a real server with the public settings.
func TestHitKeepsOriginDate(t *testing.T) {
	date := time.Now().Add(-30 * time.Second).UTC().Format(http.TimeFormat)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Date", date)
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write([]byte("dated"))
	})
	p := newTestProxy(t, o.addr(), nil)
	ln := fasthttputil.NewInmemoryListener()
	srv := p.PublicServer(config.Server{ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second, MaxHeaderSize: 8192, MaxBodySize: 1 << 20}, nil)
	srv.MaxIdleWorkerDuration = 100 * time.Millisecond
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	defer c.CloseIdleConnections()
	for i := range 2 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + testHost + "/dated")
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if got := string(resp.Header.Peek("Date")); got != date {
			t.Errorf("request %d: Date = %q, want the origin's %q", i, got, date)
		}
		if n := len(resp.Header.PeekAll("Date")); n != 1 {
			t.Errorf("request %d: %d Date fields", i, n)
		}
		if i == 1 && !strings.HasPrefix(string(resp.Header.Peek("Cache-Status")), "shield; hit") {
			t.Errorf("second request is not a hit: %q", resp.Header.Peek("Cache-Status"))
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	// shield's own answers are dated with the sending time.
	ctx := serve(p, newCtx(t, "GET /x HTTP/1.1\nHost: unrouted.example\n"))
	if !strings.Contains(ctx.Response.Header.String(), "\r\nDate: ") {
		t.Errorf("generated answer has no Date:\n%s", ctx.Response.Header.String())
	}
}

// TestUnsafeInvalidatesLocation: RFC 9111 §4.4 — a successful unsafe
// request invalidates the Location and Content-Location URLs on the
// request's host, never those on another host.
func TestUnsafeInvalidatesLocation(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/item?id=1")
			w.Header().Set("Content-Location", "http://"+testHost+"/list")
			w.WriteHeader(201)
			return
		}
		cacheable("v")(w, r, n)
	})
	p := newTestProxy(t, o.addr(), nil)
	for _, path := range []string{"/item?id=1", "/list", "/other"} {
		serve(p, get(t, path))
	}
	before := o.hits.Load()
	serve(p, newCtx(t, request("POST", "/create")))
	for _, path := range []string{"/item?id=1", "/list"} {
		if got := summary(serve(p, get(t, path))); strings.HasPrefix(got.cacheStatus, "shield; hit") {
			t.Errorf("%s after POST: %+v, want invalidated", path, got)
		}
	}
	if got := summary(serve(p, get(t, "/other"))); !strings.HasPrefix(got.cacheStatus, "shield; hit") {
		t.Errorf("/other after POST: %+v, want still cached", got)
	}
	if n := o.hits.Load() - before; n != 3 {
		t.Errorf("origin got %d requests after the POST, want 3 (POST + two refetches)", n)
	}
}

// TestUnsafeKeepsForeignLocation: RFC 9111 §4.4 — a Location on another
// host is not invalidated (an origin must not purge another's content).
func TestUnsafeKeepsForeignLocation(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "http://elsewhere.example/item")
			w.WriteHeader(201)
			return
		}
		cacheable("v")(w, r, n)
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/item"))
	serve(p, newCtx(t, request("POST", "/create")))
	if got := summary(serve(p, get(t, "/item"))); !strings.HasPrefix(got.cacheStatus, "shield; hit") {
		t.Errorf("/item after a POST naming another host: %+v, want still cached", got)
	}
}
