package proxy

import (
	"bufio"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// hopRequestHeaders are request fields a proxy must not forward (RFC 9110
// §7.6.1): the fixed list, and X-Foo because Connection names it.
var hopRequestHeaders = []string{
	"Connection: X-Foo",
	"X-Foo: secret",
	"Keep-Alive: timeout=5",
	"TE: trailers",
	"Upgrade: websocket",
	"Proxy-Authorization: Basic c2VjcmV0",
	"X-End-To-End: kept",
}

// hopOrigin answers with hop-by-hop response fields and the
// Cache-Control given in the cc query parameter.
func hopOrigin(w http.ResponseWriter, r *http.Request, n int64) {
	w.Header().Set("Cache-Control", r.URL.Query().Get("cc"))
	w.Header().Set("Connection", "X-Bar")
	w.Header().Set("X-Bar", "origin secret")
	w.Header().Set("Keep-Alive", "timeout=5")
	w.Header().Set("Upgrade", "h2c")
	w.Header().Set("Proxy-Authenticate", "Basic")
	w.Header().Set("X-End-To-End", "kept")
	_, _ = w.Write([]byte("ok"))
}

var hopResponseHeaders = []string{"X-Bar", "Keep-Alive", "Upgrade", "Proxy-Authenticate"}

// TestHopByHopControl proves the test origin sees the hop-by-hop request
// fields when they are sent, and sends its own, so that their absence in
// TestHopByHopNotForwarded means the proxy dropped them.
func TestHopByHopControl(t *testing.T) {
	o := newTestOrigin(t, hopOrigin)
	c, err := net.Dial("tcp", o.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw := "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Join(hopRequestHeaders, "\r\n") + "\r\n\r\n"
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, name := range append(hopResponseHeaders, "Connection") {
		if resp.Header.Get(name) == "" {
			t.Fatalf("direct request: origin response has no %s", name)
		}
	}
	h := o.last(t).header
	for _, line := range hopRequestHeaders {
		name, value, _ := strings.Cut(line, ": ")
		if got := h.Get(name); got != value {
			t.Fatalf("direct request: origin saw %s = %q, want %q", name, got, value)
		}
	}
}

func TestHopByHopNotForwarded(t *testing.T) {
	o := newTestOrigin(t, hopOrigin)
	p := newTestProxy(t, o.addr(), nil)
	tests := []struct {
		name, path string
		extra      string // one more request header
		wantCache  string // Cache-Status prefix
	}{
		{"stored miss", "/s?cc=public,max-age=60", "", "shield; fwd=miss"},
		{"hit", "/s?cc=public,max-age=60", "", "shield; hit"},
		{"unstored miss", "/u?cc=private", "", "shield; fwd=miss"},
		{"hit-for-miss", "/u?cc=private", "", "shield; fwd=bypass"},
		{"uncacheable request", "/r", "Cache-Control: no-store", "shield; fwd=bypass; detail=uncacheable-request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := o.hits.Load()
			hdr := hopRequestHeaders
			if tt.extra != "" {
				hdr = append(slices.Clone(hdr), tt.extra)
			}
			ctx := serve(p, get(t, tt.path, hdr...))
			if cs := string(ctx.Response.Header.Peek("Cache-Status")); !strings.HasPrefix(cs, tt.wantCache) {
				t.Fatalf("Cache-Status = %q, want %q...", cs, tt.wantCache)
			}
			if o.hits.Load() != before {
				h := o.last(t).header
				for _, line := range hopRequestHeaders {
					name, value, _ := strings.Cut(line, ": ")
					got := h.Get(name)
					if name == "X-End-To-End" {
						if got != value {
							t.Errorf("origin saw %s = %q, want %q forwarded", name, got, value)
						}
						continue
					}
					if got != "" {
						t.Errorf("origin saw hop-by-hop %s = %q, want it dropped", name, got)
					}
				}
			}
			for _, name := range hopResponseHeaders {
				if v := ctx.Response.Header.Peek(name); len(v) > 0 {
					t.Errorf("client got hop-by-hop %s = %q, want it dropped", name, v)
				}
			}
			if v := string(ctx.Response.Header.Peek("Connection")); strings.Contains(strings.ToLower(v), "x-bar") {
				t.Errorf("client got Connection = %q naming the origin's field", v)
			}
			if v := string(ctx.Response.Header.Peek("X-End-To-End")); v != "kept" {
				t.Errorf("client got X-End-To-End = %q, want %q", v, "kept")
			}
		})
	}
}

func TestForwardedHeaders(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("Via", "1.1 upstream")
		_, _ = w.Write([]byte("ok"))
	})
	p := newTestProxy(t, o.addr(), nil)
	for _, path := range []string{"/f", "/f"} { // a miss, then a hit
		ctx := serve(p, get(t, path,
			"X-Forwarded-For: 6.6.6.6",
			"X-Forwarded-For: 7.7.7.7",
			"X-Forwarded-Host: evil.example",
			"X-Forwarded-Proto: https",
			"Forwarded: for=6.6.6.6",
			"X-Forwarded-Port: 1",
			"X-Forwarded-Prefix: /evil",
			"X-Forwarded-Ssl: on",
			"X-Forwarded-Scheme: https",
			"x-forwarded-server: evil",
			"Via: 1.0 edge",
		))
		if via := string(ctx.Response.Header.Peek("Via")); via != "1.1 upstream, 1.1 shield" {
			t.Errorf("%s: client got Via %q, want %q", summary(ctx).cacheStatus, via, "1.1 upstream, 1.1 shield")
		}
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin got %d requests, want 1", n)
	}
	h := o.last(t).header
	want := map[string][]string{
		"X-Forwarded-For":   {"203.0.113.7"},
		"X-Forwarded-Host":  {testHost},
		"X-Forwarded-Proto": {"http"},
		"Via":               {"1.0 edge, 1.1 shield"},
	}
	for name, vals := range want {
		if got := h.Values(name); strings.Join(got, "|") != strings.Join(vals, "|") {
			t.Errorf("origin saw %s = %q, want %q", name, got, vals)
		}
	}
	for _, name := range []string{"Forwarded", "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl", "X-Forwarded-Scheme", "X-Forwarded-Server"} {
		if got := h.Values(name); len(got) != 0 {
			t.Errorf("origin saw the client's %s %q, want it dropped", name, got)
		}
	}
}

// TestTrustedProxyForwarding: a client in server.trusted_proxies speaks
// for its own client: X-Forwarded-For gains its address, its -Proto,
// -Host and -Port are kept, the other forwarding fields still dropped; a
// client outside the list gets them replaced.
func TestTrustedProxyForwarding(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "no-store")
	})
	hdrs := []string{"X-Forwarded-For: 198.51.100.1", "X-Forwarded-For: 198.51.100.2", "X-Forwarded-Proto: https",
		"X-Forwarded-Host: www.example", "X-Forwarded-Port: 443", "X-Forwarded-Prefix: /evil", "Forwarded: for=x"}
	for _, tt := range []struct {
		trusted []string
		want    map[string]string
	}{
		{[]string{"203.0.113.0/24"}, map[string]string{"X-Forwarded-For": "198.51.100.1, 198.51.100.2, 203.0.113.7",
			"X-Forwarded-Proto": "https", "X-Forwarded-Host": "www.example", "X-Forwarded-Port": "443"}},
		{[]string{"203.0.113.7", "10.0.0.0/8"}, map[string]string{"X-Forwarded-For": "198.51.100.1, 198.51.100.2, 203.0.113.7"}},
		{[]string{"10.0.0.0/8", "::1"}, map[string]string{"X-Forwarded-For": "203.0.113.7",
			"X-Forwarded-Proto": "http", "X-Forwarded-Host": testHost, "X-Forwarded-Port": ""}},
	} {
		p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Server.TrustedProxies = tt.trusted })
		serve(p, get(t, "/t", hdrs...))
		h := o.last(t).header
		for name, v := range tt.want {
			if got := strings.Join(h.Values(name), "|"); got != v {
				t.Errorf("trusted %v: origin saw %s = %q, want %q", tt.trusted, name, got, v)
			}
		}
		if got := h.Values("X-Forwarded-Prefix"); len(got) != 0 || len(h.Values("Forwarded")) != 0 {
			t.Errorf("trusted %v: origin saw X-Forwarded-Prefix %q or Forwarded, want both dropped", tt.trusted, got)
		}
	}
}

func TestGeneratedResponses(t *testing.T) {
	o := newTestOrigin(t, cacheable("ok"))
	p := newTestProxy(t, o.addr(), nil)
	tests := []struct {
		name string
		head string
		want int
	}{
		{"unknown host", "GET /a HTTP/1.1\nHost: other.example", 404},
		{"absolute-form target", "GET http://example.com/a HTTP/1.1\nHost: example.com", 400},
		{"absolute-form target for another host", "GET http://internal.example/a HTTP/1.1\nHost: example.com", 400},
		{"asterisk target", "OPTIONS * HTTP/1.1\nHost: example.com", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summary(serve(p, newCtx(t, tt.head)))
			if got.code != tt.want || !strings.Contains(got.cacheStatus, "detail=generated") {
				t.Fatalf("response = %+v, want a generated %d", got, tt.want)
			}
		})
	}
	if n := o.hits.Load(); n != 0 {
		t.Fatalf("origin got %d requests, want 0", n)
	}
}

// TestStoredHeadersOwned: the stored fields outlive the origin's
// response (it is released before the entry is encoded), and appending
// to one field's copy cannot write over the next field's: they share one
// buffer.
func TestStoredHeadersOwned(t *testing.T) {
	resp := fasthttp.AcquireResponse()
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Cache-Control", "max-age=60")
	resp.Header.Set("Via", "1.1 upstream")
	resp.Header.Set("Vary", "Accept, X-Lang")
	resp.Header.Set("Connection", "X-Hop")
	resp.Header.Set("X-Hop", "dropped")
	resp.Header.Set("X-Kept", "kept")
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	hs, vary := storedHeaders(resp, now, &route{}, nil)
	want := map[string]string{
		"Content-Type":  "application/json",
		"Cache-Control": "max-age=60",
		"Vary":          "Accept, X-Lang",
		"X-Kept":        "kept",
		"Via":           "1.1 upstream, " + string(httpx.ViaValue),
		"Date":          "Fri, 04 Dec 2026 12:00:00 GMT",
	}
	check := func(when string) {
		t.Helper()
		got := map[string]string{}
		for _, h := range hs {
			got[string(h.Name)] = string(h.Value)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: stored fields %q, want %q", when, got, want)
		}
	}
	check("as returned")
	if !slices.EqualFunc(vary, []string{"accept", "x-lang"}, func(a []byte, b string) bool { return string(a) == b }) {
		t.Errorf("vary = %q, want [accept x-lang]", vary)
	}
	// The response's buffers are reused for another answer with fields
	// of the same sizes (so that they are written in place).
	resp.Reset()
	for _, f := range []string{"Content-Type", "Cache-Control", "Via", "Vary", "X-Kept"} {
		resp.Header.Set(f, strings.Repeat("#", len(want[f])))
	}
	fasthttp.ReleaseResponse(resp)
	check("after the response was reused")
	for i := range hs {
		_ = append(hs[i].Value, "XXXXXXXXXXXXXXXX"...)
	}
	check("after appending to each value")
}
