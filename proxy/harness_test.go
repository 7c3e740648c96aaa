package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
)

// testHost is the host every test route serves.
const testHost = "example.com"

// clientAddr is the client address requests appear to come from.
var clientAddr = &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 40000}

// seenRequest is what the test origin received.
type seenRequest struct {
	method string
	uri    string
	header http.Header
}

// testOrigin is a real HTTP server on 127.0.0.1 (the proxy dials origins
// by TCP address) that records every request it gets.
type testOrigin struct {
	srv  *httptest.Server
	hits atomic.Int64

	mu   sync.Mutex
	seen []seenRequest // guarded by mu
}

// newTestOrigin starts an origin whose handler gets the request's serial
// number (1 for the first request).
func newTestOrigin(t testing.TB, h func(w http.ResponseWriter, r *http.Request, n int64)) *testOrigin {
	t.Helper()
	o := &testOrigin{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := o.hits.Add(1)
		o.mu.Lock()
		o.seen = append(o.seen, seenRequest{method: r.Method, uri: r.RequestURI, header: r.Header.Clone()})
		o.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *testOrigin) addr() string { return o.srv.Listener.Addr().String() }

// last returns the last request the origin received.
func (o *testOrigin) last(t testing.TB) seenRequest {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		t.Fatal("the origin received no request")
	}
	return o.seen[len(o.seen)-1]
}

// cacheable answers body with a shared-cacheable Cache-Control.
func cacheable(body string) func(w http.ResponseWriter, r *http.Request, n int64) {
	return func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(body))
	}
}

// testConfig is the YAML every test proxy starts from: one origin, one
// route for testHost.
const testConfig = `
listen: 127.0.0.1:0
admin: {listen: "off"}
cache:
  size: 32MiB
  max_object_size: 64KiB
origins:
  o:
    servers: [%q]
    timeout: 2s
routes:
  - name: r
    hosts: [%q]
    origin: o
`

// newTestProxy builds a proxy in front of originAddr; edit, when set,
// adjusts the parsed configuration before New.
func newTestProxy(t testing.TB, originAddr string, edit func(*config.Config)) *Proxy {
	t.Helper()
	cfg, err := config.Parse("test.yaml", fmt.Appendf(nil, testConfig, originAddr, testHost), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	if edit != nil {
		edit(cfg)
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

// closeOriginConns closes the proxy's idle origin connections, so that
// the origin server can shut down and no connection outlives the test.
func closeOriginConns(p *Proxy) {
	for _, r := range p.rt.Load().routes {
		r.origin.CloseIdleConnections()
	}
}

// newCtx parses a raw HTTP/1.1 request head (lines joined by "\n", no
// trailing blank line needed) into a fresh RequestCtx.
func newCtx(t testing.TB, head string) *fasthttp.RequestCtx {
	t.Helper()
	raw := strings.ReplaceAll(strings.TrimRight(head, "\n"), "\n", "\r\n") + "\r\n\r\n"
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("parse request %q: %v", head, err)
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, clientAddr, nil)
	return ctx
}

// newCtxBody is newCtx for a request with a body.
func newCtxBody(t testing.TB, head, body string) *fasthttp.RequestCtx {
	t.Helper()
	raw := strings.ReplaceAll(strings.TrimRight(head, "\n"), "\n", "\r\n") +
		fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n", len(body)) + body
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("parse request %q: %v", head, err)
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, clientAddr, nil)
	return ctx
}

// get builds a GET for path on testHost with extra header lines.
func get(t testing.TB, path string, headers ...string) *fasthttp.RequestCtx {
	t.Helper()
	return newCtx(t, request("GET", path, headers...))
}

func request(method, path string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\n", method, path, testHost)
	for _, h := range headers {
		b.WriteString(h + "\n")
	}
	return b.String()
}

// serve runs the proxy's handler on ctx and reads a streamed body, as
// the server would when writing the response.
func serve(p *Proxy, ctx *fasthttp.RequestCtx) *fasthttp.RequestCtx {
	p.Handler()(ctx)
	_ = ctx.Response.Body()
	return ctx
}

// status is a response summary for assertions and failure messages.
type status struct {
	code        int
	cacheStatus string
	body        string
}

func summary(ctx *fasthttp.RequestCtx) status {
	return status{
		code:        ctx.Response.StatusCode(),
		cacheStatus: string(ctx.Response.Header.Peek("Cache-Status")),
		body:        string(ctx.Response.Body()),
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// waitUntil polls cond until it holds or a deadline passes.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// primaryKey is the primary cache key the proxy uses for ctx.
func primaryKey(p *Proxy, ctx *fasthttp.RequestCtx) []byte {
	rt := p.rt.Load()
	r := rt.table.Match(ctx.Request.Header.Host(), ctx.Request.URI().PathOriginal())
	rte := rt.routes[r.Index]
	return rte.appendKey(nil, ctx, &scratch{}, p.cache.Namespaces().Version(rte.name, rte.scoped, nil))
}

// stored decodes the entry under key; ok is false when there is none.
func stored(t testing.TB, p *Proxy, key []byte) (e cache.Entry, ok bool) {
	t.Helper()
	b := p.cache.Get(nil, key)
	if len(b) == 0 {
		return e, false
	}
	if err := cache.DecodeEntry(b, &e); err != nil {
		t.Fatalf("stored entry does not decode: %v", err)
	}
	return e, true
}

// storedHeader returns the first stored value of name in e.
func storedHeader(e *cache.Entry, name string) (string, bool) {
	it := e.Headers()
	for k, ok := it.Next(); ok; k, ok = it.Next() {
		v, _ := it.Next()
		if strings.EqualFold(string(k), name) {
			return string(v), true
		}
	}
	return "", false
}

// putEntry stores enc under key through the cache's one write path, as
// a fill would.
func putEntry(t testing.TB, p *Proxy, key, enc []byte) {
	t.Helper()
	var e cache.Entry
	if err := cache.DecodeEntry(enc, &e); err != nil {
		t.Fatal(err)
	}
	if !p.cache.Put(key, enc, &e, cache.PutOptions{}) {
		t.Fatal("cache.Put refused the planted entry")
	}
}
