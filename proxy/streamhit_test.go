package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// memBigBody is a random body of n bytes (no run of equal pieces could
// hide a piece sent twice or out of order).
func memBigBody(n int) []byte {
	rng := rand.New(rand.NewPCG(uint64(n), 99))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// memBigProxy is a test proxy keeping objects up to 4 MiB in memory, in
// front of an origin answering body (on /vary, a variant per
// Accept-Encoding: its first byte is the field's length).
func memBigProxy(t testing.TB, body []byte, edit func(*config.Config)) (*Proxy, *testOrigin) {
	t.Helper()
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Tue, 15 Nov 1994 12:45:26 GMT")
		if r.URL.Path == "/vary" {
			w.Header().Set("Vary", "Accept-Encoding")
			_, _ = w.Write([]byte{byte(len(r.Header.Get("Accept-Encoding")))})
		}
		_, _ = w.Write(body)
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) {
		c.Cache.Size = 64 * config.MiB
		c.Cache.MaxObjectSize = 4 * config.MiB
		if edit != nil {
			edit(c)
		}
	})
	return p, o
}

// streamedHit runs the handler on ctx and reports whether the answer's
// body is a stream, then reads it.
func streamedHit(p *Proxy, ctx *fasthttp.RequestCtx) (streamed bool, s status) {
	p.Handler()(ctx)
	streamed = ctx.Response.IsBodyStream()
	return streamed, summary(ctx)
}

// TestMemHitStreamed: a fresh hit on an object stored in pieces is its
// pieces streamed, byte for byte, with the hit's fields; a variant of a
// Vary object too; 304s carry no body; a stale hit reads the entry whole.
func TestMemHitStreamed(t *testing.T) {
	body := memBigBody(memStreamMin + 300<<10 + 5)
	p, o := memBigProxy(t, body, nil)
	if s := summary(serve(p, get(t, "/big"))); s.body != string(body) || !strings.Contains(s.cacheStatus, "stored") {
		t.Fatalf("miss: %q, %d bytes", s.cacheStatus, len(s.body))
	}
	for range 3 {
		ctx := get(t, "/big")
		streamed, s := streamedHit(p, ctx)
		if !streamed || !strings.HasPrefix(s.cacheStatus, "shield; hit") || s.code != 200 || s.body != string(body) {
			t.Fatalf("hit: streamed %v, %d %q, %d bytes (equal %v)", streamed, s.code, s.cacheStatus, len(s.body), s.body == string(body))
		}
		if len(ctx.Response.Header.Peek("Age")) == 0 || string(ctx.Response.Header.Peek("Etag")) != `"v1"` {
			t.Fatalf("hit fields: Age %q, ETag %q", ctx.Response.Header.Peek("Age"), ctx.Response.Header.Peek("Etag"))
		}
	}
	ctx := get(t, "/big", `If-None-Match: "v1"`)
	if streamed, s := streamedHit(p, ctx); streamed || s.code != 304 || s.body != "" {
		t.Fatalf("conditional hit: streamed %v, %d with %d bytes", streamed, s.code, len(s.body))
	}
	variants := map[string]bool{}
	for _, ae := range []string{"gzip", "identity"} {
		want := summary(serve(p, get(t, "/vary", "Accept-Encoding: "+ae))).body
		if !strings.HasSuffix(want, string(body)) || len(want) != len(body)+1 {
			t.Fatalf("variant %q: miss of %d bytes", ae, len(want))
		}
		if streamed, s := streamedHit(p, get(t, "/vary", "Accept-Encoding: "+ae)); !streamed || !strings.HasPrefix(s.cacheStatus, "shield; hit") || s.body != want {
			t.Fatalf("variant %q: streamed %v, %q, %d bytes (equal %v)", ae, streamed, s.cacheStatus, len(s.body), s.body == want)
		}
		variants[want[:1]] = true
	}
	if len(variants) != 2 {
		t.Fatalf("the two Accept-Encoding values got one variant")
	}
	if n := o.hits.Load(); n != 3 {
		t.Fatalf("origin fetches = %d, want 3", n)
	}
	// A request that takes a stale answer (max-stale) is served from the
	// whole entry.
	ctx = get(t, "/big", "Cache-Control: max-age=0")
	if streamed, _ := streamedHit(p, ctx); streamed {
		t.Fatal("a request refusing the fresh copy was answered from the stream")
	}
}

// TestMemHitRanges: single ranges — across piece boundaries, suffixes,
// open ends — are cut from the stream; unsatisfiable ones are 416;
// several ranges are a multipart answer built from the whole entry; an
// If-Range that does not match sends the whole body.
func TestMemHitRanges(t *testing.T) {
	n := memStreamMin + 300<<10 + 5
	body := memBigBody(n)
	p, _ := memBigProxy(t, body, nil)
	serve(p, get(t, "/big"))
	for _, tc := range []struct {
		rng, ifRange string
		status       int
		want         string // body; "" with status 206: multipart
		streamed     bool
	}{
		{"bytes=0-0", "", 206, string(body[:1]), true},
		{"bytes=32000-99999", "", 206, string(body[32000:100000]), true},
		{"bytes=32703-32704", "", 206, string(body[32703:32705]), true},
		{"bytes=65407-65409", "", 206, string(body[65407:65410]), true},
		{"bytes=-5000", "", 206, string(body[n-5000:]), true},
		{"bytes=250000-", "", 206, string(body[250000:]), true},
		{"bytes=0-" + strconv.Itoa(n+100), "", 206, string(body), true},
		{"bytes=" + strconv.Itoa(n) + "-", "", 416, "", false},
		{"bytes=10-20", `"v0"`, 200, string(body), true},
		{"bytes=10-20", `"v1"`, 206, string(body[10:21]), true},
		{"bytes=0-9,40000-40009", "", 206, "", false},
	} {
		h := []string{"Range: " + tc.rng}
		if tc.ifRange != "" {
			h = append(h, "If-Range: "+tc.ifRange)
		}
		ctx := get(t, "/big", h...)
		streamed, s := streamedHit(p, ctx)
		if s.code != tc.status || streamed != tc.streamed {
			t.Fatalf("%s (If-Range %s): %d, streamed %v; want %d, %v", tc.rng, tc.ifRange, s.code, streamed, tc.status, tc.streamed)
		}
		if tc.status == 206 && tc.want == "" {
			for _, part := range []string{string(body[:10]), string(body[40000:40010]), "Content-Range: bytes 40000-40009/" + strconv.Itoa(n)} {
				if !strings.Contains(s.body, part) {
					t.Fatalf("%s: multipart answer lacks %q", tc.rng, part)
				}
			}
			continue
		}
		if s.body != tc.want {
			t.Fatalf("%s (If-Range %s): %d bytes, want %d (equal %v)", tc.rng, tc.ifRange, len(s.body), len(tc.want), s.body == tc.want)
		}
		if cl := ctx.Response.Header.ContentLength(); cl != len(tc.want) {
			t.Fatalf("%s: Content-Length %d, want %d", tc.rng, cl, len(tc.want))
		}
		if tc.status == 416 && string(ctx.Response.Header.Peek("Content-Range")) != "bytes */"+strconv.Itoa(n) {
			t.Fatalf("416 Content-Range %q", ctx.Response.Header.Peek("Content-Range"))
		}
	}
}

// TestMemHitOverServer: through a real fasthttp.Server and Client (on an
// in-memory listener) a streamed hit arrives whole, a HEAD says the
// length and sends nothing, and the connection serves the next request.
func TestMemHitOverServer(t *testing.T) {
	body := memBigBody(1<<20 + 3)
	p, _ := memBigProxy(t, body, nil)
	serve(p, get(t, "/big"))
	c := inMemoryServer(t, p)
	for _, method := range []string{"GET", "HEAD", "GET"} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + testHost + "/big")
		req.Header.SetMethod(method)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		want := body
		if method == "HEAD" {
			want = nil
		}
		if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), want) || resp.Header.ContentLength() != len(body) ||
			!bytes.HasPrefix(resp.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) {
			t.Fatalf("%s: %d, %q, Content-Length %d, %d bytes", method, resp.StatusCode(), resp.Header.PeekBytes(httpx.HCacheStatus), resp.Header.ContentLength(), len(resp.Body()))
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}

// hookListener calls hook once its connections have written more than
// after bytes in all: an eviction in the middle of a response.
type hookListener struct {
	net.Listener
	after int
	once  sync.Once
	hook  func()
	mu    sync.Mutex
	n     int
}

func (l *hookListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: c, l: l}, nil
}

type hookConn struct {
	net.Conn
	l *hookListener
}

func (c *hookConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.mu.Lock()
	c.l.n += n
	fire := c.l.n > c.l.after
	c.l.mu.Unlock()
	if fire {
		c.l.once.Do(c.l.hook)
	}
	return n, err
}

// TestMemHitEvictedWhileSentClosesConnection: when the cache drops the
// entry's pieces while its body is on the wire, the server closes the
// connection after the bytes it had: the client sees fewer bytes than
// the Content-Length and the end of the connection, never a short body
// ending a complete answer on a connection that goes on.
func TestMemHitEvictedWhileSentClosesConnection(t *testing.T) {
	n := 2 << 20
	body := memBigBody(n)
	p, _ := memBigProxy(t, body, nil)
	serve(p, get(t, "/big"))
	if k := truncatedCount(t, p, "evicted"); k != 0 {
		t.Fatalf("truncated responses (evicted) = %d before the eviction", k)
	}
	ln := &hookListener{Listener: fasthttputil.NewInmemoryListener(), after: 256 << 10, hook: func() { p.cache.Fastcache().Reset() }}
	srv := &fasthttp.Server{Handler: p.Handler(), NoDefaultDate: true, MaxIdleWorkerDuration: 100 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
	}()
	conn, err := ln.Listener.(*fasthttputil.InmemoryListener).Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Two requests on one connection: the second must not be answered.
	if _, err := fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: %s\r\n\r\nGET /big HTTP/1.1\r\nHost: %s\r\n\r\n", testHost, testHost); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading until the server closes: %v (%d bytes)", err, len(got))
	}
	br := bufio.NewReader(bytes.NewReader(got))
	var resp fasthttp.Response
	resp.SkipBody = true
	if err := resp.Header.Read(br); err != nil {
		t.Fatalf("no answer head: %v", err)
	}
	rest, _ := io.ReadAll(br)
	if resp.StatusCode() != 200 || resp.Header.ContentLength() != n || !bytes.HasPrefix(resp.Header.PeekBytes(httpx.HCacheStatus), hitPrefix) {
		t.Fatalf("answer: %d, Content-Length %d, %q", resp.StatusCode(), resp.Header.ContentLength(), resp.Header.PeekBytes(httpx.HCacheStatus))
	}
	if len(rest) >= n || !bytes.Equal(rest, body[:len(rest)]) {
		t.Fatalf("got %d body bytes of %d after the eviction (a prefix: %v), want a truncated prefix", len(rest), n, bytes.Equal(rest, body[:min(len(rest), n)]))
	}
	// Counted before the connection closed, once.
	for cause, want := range map[string]uint64{"evicted": 1, "disk": 0, "origin": 0} {
		if k := truncatedCount(t, p, cause); k != want {
			t.Errorf("truncated responses (%s) = %d, want %d", cause, k, want)
		}
	}
}

// truncatedCount is shield_truncated_responses_total{cause=cause}.
func truncatedCount(t *testing.T, p *Proxy, cause string) uint64 {
	t.Helper()
	var m bytes.Buffer
	p.writeTruncatedMetrics(&m)
	prefix := `shield_truncated_responses_total{cause="` + cause + `"} `
	for line := range strings.Lines(m.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			k, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return k
		}
	}
	t.Fatalf("no %s series in:\n%s", prefix, m.String())
	return 0
}

// TestMemHitSnapshotEntryReadWhole: an entry loaded from a snapshot is
// another process's: its hit reads it whole, so its checksum is checked
// before anything is sent, and the answer is the same bytes.
func TestMemHitSnapshotEntryReadWhole(t *testing.T) {
	body := memBigBody(memStreamMin + 300<<10)
	path := filepath.Join(t.TempDir(), "cache")
	edit := func(c *config.Config) { c.Cache.Path = path }
	p, o := memBigProxy(t, body, edit)
	serve(p, get(t, "/big"))
	if streamed, _ := streamedHit(p, get(t, "/big")); !streamed {
		t.Fatal("the writing process's hit is not streamed")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	q := newTestProxy(t, o.addr(), func(c *config.Config) {
		c.Cache.Size = 64 * config.MiB
		c.Cache.MaxObjectSize = 4 * config.MiB
		edit(c)
	})
	streamed, s := streamedHit(q, get(t, "/big"))
	if streamed || !strings.HasPrefix(s.cacheStatus, "shield; hit") || s.body != string(body) {
		t.Fatalf("hit after restart: streamed %v, %q, %d bytes (equal %v); want a whole-entry hit", streamed, s.cacheStatus, len(s.body), s.body == string(body))
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin fetches = %d, want 1", n)
	}
}
