package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// TestHitHeadOnTheWire: hits answered from the entry's prepared head
// (proxy/cache/entry.go, serveHead), read off one connection as a client reads them,
// the requests pipelined: every answer keeps the connection open, carries
// its origin's Date once, one Age, a hit Cache-Status, the stored fields,
// the body's length and the reason phrase of its own status — also a
// 304, a 206 and a HEAD answered from the same entry, and a stored 404.
func TestHitHeadOnTheWire(t *testing.T) {
	date := time.Now().Add(-30 * time.Second).UTC().Format(http.TimeFormat)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		h := w.Header()
		h.Set("Date", date)
		h.Set("Cache-Control", "max-age=3600")
		h.Set("ETag", `"v1"`)
		h.Set("X-Stored", "yes")
		h.Set("Content-Type", "text/plain")
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusNotFound)
		}
		_, _ = w.Write([]byte("0123456789"))
	})
	p := newTestProxy(t, o.addr(), nil)
	ln := fasthttputil.NewInmemoryListener()
	srv := p.PublicServer(config.Server{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, MaxHeaderSize: 8192, MaxBodySize: 1 << 20}, nil)
	srv.MaxIdleWorkerDuration = 100 * time.Millisecond
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	conn, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)

	type exchange struct {
		method, path, extra string
		status              string // "200 OK"
		body                string
		stored              bool // carries the stored X-Stored field
	}
	do := func(hit bool, xs ...exchange) {
		t.Helper()
		var b strings.Builder
		for _, x := range xs {
			b.WriteString(x.method + " " + x.path + " HTTP/1.1\r\nHost: " + testHost + "\r\n" + x.extra + "\r\n")
		}
		if _, err := io.WriteString(conn, b.String()); err != nil {
			t.Fatal(err)
		}
		for _, x := range xs {
			resp, err := http.ReadResponse(br, &http.Request{Method: x.method})
			if err != nil {
				t.Fatalf("%s %s %q: %v", x.method, x.path, x.extra, err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			h := resp.Header
			what := x.method + " " + x.path + " " + strings.TrimSpace(x.extra)
			if resp.Status != x.status || string(body) != x.body || resp.Close {
				t.Errorf("%s: %q, body %q, close %v; want %q, body %q, kept open", what, resp.Status, body, resp.Close, x.status, x.body)
			}
			if d := h.Values("Date"); len(d) != 1 || d[0] != date {
				t.Errorf("%s: Date %q, want the origin's %q once", what, d, date)
			}
			if (h.Get("X-Stored") == "yes") != x.stored || h.Get("Etag") != `"v1"` {
				t.Errorf("%s: X-Stored %q, ETag %q", what, h.Get("X-Stored"), h.Get("Etag"))
			}
			if !hit {
				continue
			}
			if len(h.Values("Age")) != 1 || !strings.HasPrefix(h.Get("Cache-Status"), "shield; hit; ttl=") {
				t.Errorf("%s: Age %q, Cache-Status %q; want one Age and a hit", what, h.Values("Age"), h.Get("Cache-Status"))
			}
			if x.method == "GET" && x.status == "200 OK" && h.Get("Content-Length") != "10" {
				t.Errorf("%s: Content-Length %q, want 10", what, h.Get("Content-Length"))
			}
		}
	}
	get := exchange{method: "GET", path: "/obj", status: "200 OK", body: "0123456789", stored: true}
	gone := exchange{method: "GET", path: "/gone", status: "404 Not Found", body: "0123456789", stored: true}
	do(false, get, gone) // misses, stored
	do(true,
		get,
		exchange{method: "HEAD", path: "/obj", status: "200 OK", stored: true},
		exchange{method: "GET", path: "/obj", extra: "If-None-Match: \"v1\"\r\n", status: "304 Not Modified"},
		exchange{method: "GET", path: "/obj", extra: "Range: bytes=2-4\r\n", status: "206 Partial Content", body: "234", stored: true},
		gone,
		get,
	)
}

// TestCanonicalNames: the names the hit path looks up with PeekCanonical
// (httpx/headers.go) are in the form fasthttp stores request names in, or the
// lookups would miss fields the request has.
func TestCanonicalNames(t *testing.T) {
	for _, name := range [][]byte{httpx.HCacheControl, httpx.HPragma, hShieldReadThrough, hRange, httpx.HIfNoneMatch, httpx.HIfModSince, hAcceptEncoding, httpx.HDate, httpx.HAge, httpx.HCacheStatus, hShieldTags} {
		var h fasthttp.RequestHeader
		h.SetBytesKV(bytes.ToLower(name), []byte("v"))
		for k := range h.All() {
			if !bytes.Equal(k, name) {
				t.Errorf("%q is stored as %q", name, k)
			}
		}
		if got := h.PeekCanonical(name); string(got) != "v" {
			t.Errorf("PeekCanonical(%q) = %q after setting it in lower case", name, got)
		}
	}
}

// TestHeadsSharedSlot: two heads that share a slot, served concurrently
// (run with -race) at changing ages: each answer gets its own entry's
// fields and its own Age, whether copied from the slot, parsed while
// another hit holds it, or parsed into it in place of the other head.
func TestHeadsSharedSlot(t *testing.T) {
	mk := func(n int) (cache.Entry, string) {
		v := strconv.Itoa(n)
		enc := cache.AppendEntry(nil, &cache.Entry{Kind: cache.KindResponse, Status: 200, KeyDigest: uint64(n) * headSlots, Body: []byte("b")}, nil,
			[]cache.Header{{Name: []byte("Date"), Value: []byte("Tue, 15 Nov 1994 08:12:31 GMT")}, {Name: []byte("X-N"), Value: []byte(v)}})
		var e cache.Entry
		if err := cache.DecodeEntry(enc, &e); err != nil {
			t.Fatal(err)
		}
		return e, v
	}
	a, av := mk(1)
	b, bv := mk(2) // same slot: keyDigest ≡ 0 mod headSlots
	t.Run("two heads", func(t *testing.T) { servedConcurrently(t, &a, av, &b, bv) })
	// One hot head: hits mostly copy it under the slot's read lock, at
	// once, while one of them stamps it again when the Age changes.
	t.Run("one head", func(t *testing.T) { servedConcurrently(t, &a, av, &a, av) })
}

// servedConcurrently serves a and b alternately from 4 goroutines through
// one heads, checking each answer's fields and Age.
func servedConcurrently(t *testing.T, a *cache.Entry, av string, b *cache.Entry, bv string) {
	hs := new(heads)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := scratchPool.Get().(*scratch)
			defer scratchPool.Put(sc)
			var resp fasthttp.Response
			for i := range 500 {
				e, want := a, av
				if (i+g)%2 == 1 {
					e, want = b, bv
				}
				resp.Reset()
				if !hs.write(&resp, sc, e, int64(i/100), 3600, csHitTTL) {
					t.Error("write refused a prepared head")
					return
				}
				if got := string(resp.Header.Peek("X-N")); got != want || string(resp.Header.Peek("Date")) != "Tue, 15 Nov 1994 08:12:31 GMT" {
					t.Errorf("X-N = %q, want %q; Date %q", got, want, resp.Header.Peek("Date"))
					return
				}
				if age := strconv.Itoa(i / 100); string(resp.Header.Peek("Age")) != age || string(resp.Header.Peek("Cache-Status")) != "shield; hit; ttl=3600" {
					t.Errorf("Age %q, Cache-Status %q; want %s, shield; hit; ttl=3600", resp.Header.Peek("Age"), resp.Header.Peek("Cache-Status"), age)
					return
				}
			}
		}()
	}
	wg.Wait()
}
