package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
)

// FuzzHandler drives the public handler with hostile requests: method,
// target, Host, a header block and a small body come from the fuzzer, are
// framed as one raw HTTP/1.1 request and parsed by fasthttp as the server
// would, then served in front of a real origin on 127.0.0.1. Properties,
// checked on every answer:
//
//   - the status is a valid HTTP status (100..599) and Cache-Status is set;
//   - a Host that matches no route is answered 400 or 404, and no request
//     the origin ever receives carries a Host outside the route table;
//   - no poisoning: the request is sent first with spoofed X-Forwarded-Host,
//     X-Forwarded-Proto and Forwarded values (which shield must replace),
//     then without; the second answer never carries the spoofed values, and
//     when it is a hit its body is the first one's;
//   - no leaks between clients: an answer never carries another request's
//     Authorization (the origin echoes it, and omits "public" then), a hit
//     never carries Set-Cookie, a hit of a Vary: X-V resource echoes this
//     request's X-V, and a hit on the tenant-scoped route echoes this
//     request's tenant.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct {
		method, uri, host, headers string
		body                       []byte
	}{
		{"GET", "/", "example.com", "", nil},
		{"GET", "/a?b=1&a=2", "EXAMPLE.com:80", "Accept: */*", nil},
		{"HEAD", "/a", "example.com.", "", nil},
		{"GET", "/vary/x", "example.com", "X-V: one", nil},
		{"GET", "/vary/x", "example.com", "X-V:  one ,two", nil},
		{"GET", "/cookie/x", "example.com", "Cookie: sid=1", nil},
		{"GET", "/private/x", "example.com", "Authorization: Bearer a", nil},
		{"GET", "/p", "example.com", "Authorization: Bearer b", nil},
		{"GET", "/t/report", "example.com", "X-Tenant: acme", nil},
		{"GET", "/t/report", "example.com", "X-Tenant: globex", nil},
		{"GET", "/t/report", "example.com", "", nil},
		{"POST", "/p", "example.com", "Content-Type: text/plain", []byte("hello")},
		{"DELETE", "/p", "example.com", "", nil},
		{"GET", "/", "other.example", "", nil},
		{"GET", "/", "", "", nil},
		{"GET", "http://example.com/", "example.com", "", nil},
		{"GET", "http://evil.example/", "example.com", "", nil},
		{"CONNECT", "example.com:443", "example.com", "", nil},
		{"OPTIONS", "*", "example.com", "", nil},
		{"GET", "/", "example.com", "Host: evil.example", nil},
		{"GET", "/", "example.com", "Transfer-Encoding: chunked", []byte("0\r\n\r\n")},
		{"GET", "/r", "example.com", "Range: bytes=0-1\nCache-Control: no-cache", nil},
		{"GET", "/c", "example.com", "Connection: X-V, Authorization\nX-V: hop", nil},
		{"GET", "/%2e%2e/x", "example.com", "X-HTTP-Method-Override: DELETE", nil},
		{"GET", "/@scope%2fname?utm_source=x", "example.com", "X-Forwarded-Port: 1\nX-Forwarded-For: 6.6.6.6", nil},
		{"GET", "/p%2F..%2Fx", "example.com", "", nil},
		{"GET", "/s", "example.com", "Shield-Tenant: acme\nShield-Auth: x\nShield-Generation: 1", nil},
	} {
		f.Add(s.method, s.uri, s.host, s.headers, s.body)
	}
	o := newFuzzOrigin(f)
	p := newFuzzProxy(f, o.srv.addr())

	f.Fuzz(func(t *testing.T, method, uri, host, headers string, body []byte) {
		if len(body) > 512 || len(headers) > 2048 {
			return
		}
		raw := fuzzRawRequest(method, uri, host, headers, nil, body)
		plain, ok := fuzzParse(raw)
		if !ok {
			return // fasthttp's server answers 400 itself
		}
		input := strings.ToLower(method + uri + host + headers + string(body))
		spoofable := !strings.Contains(input, fuzzSpoof)
		var first []byte
		if spoofable {
			spoofed, ok := fuzzParse(fuzzRawRequest(method, uri, host, headers, fuzzSpoofHeaders, body))
			if ok {
				fuzzServe(p, spoofed)
				fuzzCheck(t, o, spoofed)
				first = bytes.Clone(spoofed.Response.Body())
			}
		}
		fuzzServe(p, plain)
		fuzzCheck(t, o, plain)
		got := plain.Response.Body()
		if spoofable && bytes.Contains(bytes.ToLower(got), []byte(fuzzSpoof)) {
			t.Fatalf("poisoned: the answer to the request without spoofed headers carries them\nrequest %q\nbody %q", raw, got)
		}
		if first != nil && isHit(plain) && !bytes.Equal(first, got) {
			t.Fatalf("two requests differing only in unkeyed headers got different cached bodies\nrequest %q\nfirst %q\nhit %q", raw, first, got)
		}
	})
}

// fuzzSpoof marks values a client sends in headers shield must replace.
const fuzzSpoof = "spoof-7f3a"

var fuzzSpoofHeaders = []string{
	"X-Forwarded-Host: " + fuzzSpoof + ".example",
	"X-Forwarded-Proto: " + fuzzSpoof,
	"Forwarded: host=" + fuzzSpoof + ".example;proto=" + fuzzSpoof,
	"X-Forwarded-For: " + fuzzSpoof,
}

// fuzzRawRequest frames the fuzz input as one HTTP/1.1 request. The
// header block is used as given (bare LF and all), so the fuzzer can
// reach fasthttp's header parser; extra lines are appended after it.
func fuzzRawRequest(method, uri, host, headers string, extra []string, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, uri, host)
	if h := strings.TrimRight(headers, "\r\n"); h != "" {
		b.WriteString(h + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// fuzzParse parses raw as the public server would, into a fresh context.
func fuzzParse(raw []byte) (*fasthttp.RequestCtx, bool) {
	ctx := new(fasthttp.RequestCtx)
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(bytes.NewReader(raw))); err != nil {
		return nil, false
	}
	ctx.Init(&req, clientAddr, nil)
	return ctx, true
}

// fuzzServe runs the handler and reads a streamed body to the end.
func fuzzServe(p *Proxy, ctx *fasthttp.RequestCtx) {
	p.Handler()(ctx)
	_ = ctx.Response.Body()
	_ = ctx.Response.CloseBodyStream()
}

func isHit(ctx *fasthttp.RequestCtx) bool {
	return bytes.HasPrefix(ctx.Response.Header.Peek("Cache-Status"), []byte("shield; hit"))
}

// fuzzCheck asserts the per-answer properties of FuzzHandler.
func fuzzCheck(t *testing.T, o *fuzzOrigin, ctx *fasthttp.RequestCtx) {
	t.Helper()
	req, resp := &ctx.Request, &ctx.Response
	what := func() string { return fmt.Sprintf("request %q\nanswer %q", req.String(), resp.String()) }
	if code := resp.StatusCode(); code < 100 || code > 599 {
		t.Fatalf("status %d is not a valid HTTP status\n%s", code, what())
	}
	if len(resp.Header.Peek("Cache-Status")) == 0 {
		t.Fatalf("answer without Cache-Status\n%s", what())
	}
	if host := req.Header.Host(); !fuzzRoutable(host) {
		if code := resp.StatusCode(); code != http.StatusNotFound && code != http.StatusBadRequest {
			t.Fatalf("host %q matches no route, yet the answer is %d, not 404 or 400\n%s", host, code, what())
		}
	}
	if h, ok := o.unroutedHost(); ok {
		t.Fatalf("the origin received a request for host %q, which matches no route\n%s", h, what())
	}
	hit := isHit(ctx)
	if hit && len(resp.Header.Peek("Set-Cookie")) > 0 {
		t.Fatalf("a hit carries Set-Cookie\n%s", what())
	}
	var echo fuzzEcho
	if json.Unmarshal(resp.Body(), &echo) != nil {
		return // not the origin's answer (generated, HEAD, 304)
	}
	if len(echo.Auth) > 0 && !bytes.Equal(echo.Auth, fuzzNorm(req.Header.Peek("Authorization"))) {
		t.Fatalf("answer carries another request's Authorization %q\n%s", echo.Auth, what())
	}
	if !hit {
		return
	}
	path := string(req.URI().PathOriginal())
	if echo.Vary && !bytes.Equal(echo.XV, fuzzNorm(req.Header.Peek("X-V"))) {
		t.Fatalf("a hit of a Vary: X-V resource echoes X-V %q, this request sent %q\n%s", echo.XV, req.Header.Peek("X-V"), what())
	}
	if strings.HasPrefix(path, "/t/") && !bytes.Equal(echo.Tenant, fuzzNorm(req.Header.Peek("X-Tenant"))) {
		t.Fatalf("a hit on the tenant-scoped route echoes tenant %q, this request is %q\n%s", echo.Tenant, req.Header.Peek("X-Tenant"), what())
	}
}

// fuzzNorm normalises a header value as the cache key does (OWS trimmed,
// inner runs collapsed), and as net/http reads one.
func fuzzNorm(v []byte) []byte { return cachekey.AppendValue(nil, v) }

// fuzzRoutable is a loose, independent model of the route table: the host
// is example.com in any case, optionally with a trailing dot, optionally
// with anything after a colon. Every host the table routes passes.
func fuzzRoutable(host []byte) bool {
	h := strings.ToLower(string(host))
	rest, ok := strings.CutPrefix(h, testHost)
	if !ok {
		return false
	}
	rest = strings.TrimPrefix(rest, ".")
	return rest == "" || rest[0] == ':'
}

// fuzzEcho is the fuzz origin's JSON body.
type fuzzEcho struct {
	N      int64  `json:"n"`
	Host   string `json:"host"`
	XFH    string `json:"xfh"`
	XFP    string `json:"xfp"`
	XFF    string `json:"xff"`
	Fwd    string `json:"fwd"`
	Auth   []byte `json:"auth"` // []byte: exact bytes, even invalid UTF-8
	XV     []byte `json:"xv"`
	Vary   bool   `json:"vary"`
	Tenant []byte `json:"tenant"`
	Method string `json:"method"`
	URI    string `json:"uri"`
}

// fuzzOrigin is the origin behind the fuzzed proxy. Paths choose the
// answer: "private" → private, "nostore" → no-store, "cookie" → Set-Cookie,
// "vary" → Vary: X-V; a request with Authorization gets no "public"
// (RFC 9111 §3.5: then a shared cache must not store it). The body echoes
// what the origin received and the headers a leak would expose.
type fuzzOrigin struct {
	srv *testOrigin

	mu      sync.Mutex
	checked int      // hosts already checked; guarded by mu
	hosts   []string // Host of every request received; guarded by mu
}

func newFuzzOrigin(t testing.TB) *fuzzOrigin {
	o := &fuzzOrigin{}
	o.srv = newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		o.mu.Lock()
		o.hosts = append(o.hosts, r.Host)
		o.mu.Unlock()
		path := r.URL.EscapedPath()
		cc := "public, max-age=3600"
		switch {
		case strings.Contains(path, "private"):
			cc = "private, max-age=3600"
		case strings.Contains(path, "nostore"):
			cc = "no-store"
		}
		auth := r.Header.Get("Authorization")
		if auth != "" {
			cc = strings.TrimPrefix(cc, "public, ")
		}
		h := w.Header()
		h.Set("Cache-Control", cc)
		if strings.Contains(path, "cookie") {
			h.Set("Set-Cookie", fmt.Sprintf("sid=%d", n))
		}
		vary := strings.Contains(path, "vary")
		if vary {
			h.Set("Vary", "X-V")
		}
		h.Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(fuzzEcho{
			N: n, Host: r.Host, XFH: r.Header.Get("X-Forwarded-Host"), XFP: r.Header.Get("X-Forwarded-Proto"),
			XFF: r.Header.Get("X-Forwarded-For"), Fwd: r.Header.Get("Forwarded"),
			Auth: fuzzNorm([]byte(auth)), XV: fuzzNorm([]byte(r.Header.Get("X-V"))), Vary: vary,
			Tenant: fuzzNorm([]byte(r.Header.Get("X-Tenant"))), Method: r.Method, URI: r.RequestURI,
		})
	})
	return o
}

// unroutedHost returns the first Host received since the last call that
// matches no route.
func (o *fuzzOrigin) unroutedHost() (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for ; o.checked < len(o.hosts); o.checked++ {
		if h := o.hosts[o.checked]; !fuzzRoutable([]byte(h)) {
			o.checked++
			return h, true
		}
	}
	return "", false
}

// fuzzConfig routes example.com only: /t/ is tenant-scoped, the rest is
// shared. Tenants come from X-Tenant; only the class "tiny" is ever
// rate limited (one request, then 429s), so that rejections are fuzzed too.
const fuzzConfig = `
listen: 127.0.0.1:0
admin: {listen: "off"}
cache: {size: 32MiB, max_object_size: 64KiB, hit_for_miss: 1s}
origins:
  o: {servers: [%q], timeout: 2s, max_concurrency: 64}
routes:
  - name: scoped
    hosts: [%q]
    path_prefix: /t/
    origin: o
    cache: {tenant_scoped: true}
  - name: shared
    hosts: [%[2]q]
    origin: o
tenants:
  identify: {header: X-Tenant}
  default: {rate: 1000000000, burst: 1000000000, max_concurrency: 1000}
  classes:
    acme: {rate: 1000000000, burst: 1000000000, max_concurrency: 1000}
    tiny: {rate: 0.001, burst: 1, max_concurrency: 1}
`

func newFuzzProxy(t testing.TB, originAddr string) *Proxy {
	t.Helper()
	cfg, err := config.Parse("fuzz.yaml", fmt.Appendf(nil, fuzzConfig, originAddr, testHost), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		closeOriginConns(p)
	})
	return p
}
