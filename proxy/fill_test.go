package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// fillBody is a body of n bytes no two 1 KiB blocks of which are alike,
// so a misplaced or repeated piece shows.
func fillBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/1024)
	}
	return b
}

// slowOrigin answers a cacheable body with its Content-Length in pieces:
// the first head bytes, then, once hold is open, the rest (or, with cut,
// half of the rest and then a closed connection).
type slowOrigin struct {
	*testOrigin
	hold *gate
}

func newSlowOrigin(t *testing.T, body []byte, head int, cut bool) *slowOrigin {
	t.Helper()
	return newSlowOriginType(t, body, head, cut, "application/octet-stream")
}

// newSlowOriginType is newSlowOrigin answering Content-Type ctype.
func newSlowOriginType(t *testing.T, body []byte, head int, cut bool, ctype string) *slowOrigin {
	t.Helper()
	so := &slowOrigin{hold: newGate(t)}
	so.testOrigin = newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body[:head])
		w.(http.Flusher).Flush()
		<-so.hold.ch
		if !cut {
			for off := head; off < len(body); off += 64 << 10 {
				_, _ = w.Write(body[off:min(off+64<<10, len(body))])
			}
			return
		}
		_, _ = w.Write(body[head : head+(len(body)-head)/2])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	return so
}

// newFillProxy is a proxy whose objects may be large enough to stream.
func newFillProxy(t *testing.T, originAddr string, edit func(*config.Config)) *Proxy {
	t.Helper()
	return newTestProxy(t, originAddr, func(c *config.Config) {
		c.Cache.Size = 64 << 20
		c.Cache.MaxObjectSize = 8 << 20
		// The origin's timeout bounds the whole fetch, body included:
		// room for slow (-race, loaded) test machines.
		c.Origins["o"].Timeout = 10 * time.Second
		if edit != nil {
			edit(c)
		}
	})
}

// listen serves p's public handler on a real TCP listener and returns
// its address: a streamed body is then written by fasthttp's server
// after the handler returned, as in production.
func listen(t *testing.T, p *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: p.Handler(), MaxIdleWorkerDuration: 10 * time.Millisecond, Logger: quietLogger{}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		<-done
	})
	return ln.Addr().String()
}

// fillClient is one client of the TCP listener: its answer's head, the
// first bytes of its body, and then the rest.
type fillClient struct {
	resp  *http.Response
	first []byte
	err   error
}

var fillTransport = &http.Transport{DisableKeepAlives: true, DisableCompression: true}

// open sends GET path with extra header lines and reads the head and
// the body's first n bytes.
func openFill(t *testing.T, addr, path string, n int, headers ...string) *fillClient {
	t.Helper()
	return openMethod(t, http.MethodGet, addr, path, n, headers...)
}

// openMethod is openFill for any method.
func openMethod(t *testing.T, method, addr, path string, n int, headers ...string) *fillClient {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = testHost
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	c := &fillClient{}
	c.resp, c.err = fillTransport.RoundTrip(req)
	if c.err != nil {
		return c
	}
	c.first = make([]byte, n)
	_, c.err = io.ReadFull(c.resp.Body, c.first)
	return c
}

// rest reads the rest of the body and returns the whole of it.
func (c *fillClient) rest() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	defer c.resp.Body.Close()
	b, err := io.ReadAll(c.resp.Body)
	return append(c.first, b...), err
}

func TestStreamedFillFirstBytesBeforeOriginEnds(t *testing.T) {
	body := fillBody(3 << 20)
	o := newSlowOrigin(t, body, 512<<10, false)
	p := newFillProxy(t, o.addr(), nil)
	addr := listen(t, p)

	// The origin has sent 512 KiB of 3 MiB and waits: the client has
	// its head and first bytes all the same.
	c := openFill(t, addr, "/big", 256<<10)
	if c.err != nil {
		t.Fatalf("first bytes while the origin holds the rest: %v", c.err)
	}
	if cl := c.resp.ContentLength; cl != int64(len(body)) {
		t.Errorf("Content-Length = %d, want the origin's %d", cl, len(body))
	}
	if cs := c.resp.Header.Get("Cache-Status"); !strings.Contains(cs, "fwd=miss") {
		t.Errorf("Cache-Status = %q, want a miss", cs)
	}
	if _, ok := stored(t, p, primaryKey(p, get(t, "/big"))); ok {
		t.Fatal("stored before the body is complete")
	}
	o.hold.open()
	got, err := c.rest()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("body: %d bytes, err %v; want the origin's %d bytes", len(got), err, len(body))
	}
	// A client holding the whole body finds it cached: the next request
	// is a hit with the same bytes.
	h := openFill(t, addr, "/big", 1)
	got, err = h.rest()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("hit body: %d bytes, err %v", len(got), err)
	}
	if cs := h.resp.Header.Get("Cache-Status"); !strings.Contains(cs, "hit") {
		t.Errorf("next request Cache-Status = %q, want a hit", cs)
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1", n)
	}
	if n := p.g.streamedFills.Get(); n != 1 {
		t.Errorf("streamed fills = %d, want 1", n)
	}
}

func TestStreamedFillFanOut(t *testing.T) {
	const clients = 20
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 512<<10, false)
	p := newFillProxy(t, o.addr(), nil)
	addr := listen(t, p)

	// The leader, then late joiners once 512 KiB has arrived: each starts
	// from byte 0 and has its first bytes while the origin holds the rest.
	cs := []*fillClient{openFill(t, addr, "/fan", 64<<10)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range clients - 1 {
		wg.Go(func() {
			c := openFill(t, addr, "/fan", 256<<10)
			mu.Lock()
			cs = append(cs, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, c := range cs {
		if c.err != nil {
			t.Fatalf("client %d: no first bytes while the origin holds the rest: %v", i, c.err)
		}
		if i > 0 && !strings.Contains(c.resp.Header.Get("Cache-Status"), "collapsed") {
			t.Errorf("client %d Cache-Status = %q, want collapsed", i, c.resp.Header.Get("Cache-Status"))
		}
	}
	o.hold.open()
	for i, c := range cs {
		wg.Go(func() {
			got, err := c.rest()
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("client %d: %d bytes, err %v; want the origin's %d bytes", i, len(got), err, len(body))
			}
		})
	}
	wg.Wait()
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1", n)
	}
	if e, ok := stored(t, p, primaryKey(p, get(t, "/fan"))); !ok || !bytes.Equal(e.Body, body) {
		t.Errorf("stored: %v, %d bytes; want the whole body", ok, len(e.Body))
	}
}

func TestStreamedFillFailedIsTruncatedAndNotStored(t *testing.T) {
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 512<<10, true)
	p := newFillProxy(t, o.addr(), nil)
	addr := listen(t, p)

	leader := openFill(t, addr, "/cut", 1024)
	waiter := openFill(t, addr, "/cut", 1024)
	if leader.err != nil || waiter.err != nil {
		t.Fatalf("first bytes: %v, %v", leader.err, waiter.err)
	}
	o.hold.open()
	for name, c := range map[string]*fillClient{"leader": leader, "waiter": waiter} {
		got, err := c.rest()
		// The answer was sent with the origin's Content-Length: the
		// connection closes short of it, and the client knows.
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: err %v after %d bytes, want a truncated transfer", name, err, len(got))
		}
		if len(got) >= len(body) {
			t.Errorf("%s: got %d bytes of a failed fill", name, len(got))
		}
	}
	waitUntil(t, "the failed fill's flight ends", func() bool { return p.fl.inFlight() == 0 })
	if _, ok := stored(t, p, primaryKey(p, get(t, "/cut"))); ok {
		t.Fatal("a failed fill was stored")
	}
	if n := p.g.fillFailures.Get(); n != 1 {
		t.Errorf("fill failures = %d, want 1", n)
	}
	if n := truncatedCount(t, p, "origin"); n != 2 {
		t.Errorf("truncated responses (origin) = %d, want 2 (leader, waiter)", n)
	}
	// Not stored, not remembered: the next request asks the origin.
	next := openFill(t, addr, "/cut", 1)
	_, _ = next.rest()
	if n := o.hits.Load(); n != 2 {
		t.Errorf("origin fetches = %d, want 2", n)
	}
}

// Requests a stream cannot answer as it arrives wait for the fill and
// are answered from the stored entry; HEAD and conditionals are answered
// from the head at once.
func TestStreamedFillRangeHeadConditional(t *testing.T) {
	testStreamedFillRangeHeadConditional(t, nil)
}

// testStreamedFillRangeHeadConditional is
// TestStreamedFillRangeHeadConditional on the proxy edit makes.
func testStreamedFillRangeHeadConditional(t *testing.T, edit func(*config.Config)) *Proxy {
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 512<<10, false)
	p := newFillProxy(t, o.addr(), edit)
	addr := listen(t, p)

	leader := openFill(t, addr, "/rh", 1024)
	if leader.err != nil {
		t.Fatal(leader.err)
	}
	// HEAD: the head, at once.
	head := openMethod(t, http.MethodHead, addr, "/rh", 0)
	if head.err != nil || head.resp.StatusCode != 200 || head.resp.ContentLength != int64(len(body)) ||
		!strings.Contains(head.resp.Header.Get("Cache-Status"), "collapsed") {
		t.Errorf("HEAD: %v %+v", head.err, head.resp)
	} else {
		_ = head.resp.Body.Close()
	}
	// If-None-Match: 304 from the head, at once.
	inm := openFill(t, addr, "/rh", 0, `If-None-Match: "v1"`)
	if inm.err != nil || inm.resp.StatusCode != fasthttp.StatusNotModified {
		t.Errorf("If-None-Match: %v %+v", inm.err, inm.resp)
	} else {
		_ = inm.resp.Body.Close()
	}
	// Range: answered once the fill is complete.
	done := make(chan *fasthttp.RequestCtx)
	go func() { done <- serve(p, get(t, "/rh", "Range: bytes=1048576-1048585")) }()
	select {
	case <-done:
		t.Fatal("a Range was answered before the fill completed")
	case <-time.After(50 * time.Millisecond):
	}
	o.hold.open()
	rg := <-done
	if s := summary(rg); s.code != fasthttp.StatusPartialContent || s.body != string(body[1<<20:1<<20+10]) {
		t.Errorf("Range: %d %q, %d bytes", s.code, s.cacheStatus, len(s.body))
	}
	if got, err := leader.rest(); err != nil || !bytes.Equal(got, body) {
		t.Errorf("leader: %d bytes, %v", len(got), err)
	}
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1", n)
	}
	return p
}

// Small bodies keep the buffered fill: no stream, no goroutine.
func TestSmallMissNotStreamed(t *testing.T) {
	o := newTestOrigin(t, cacheable(strings.Repeat("x", 1024)))
	p := newFillProxy(t, o.addr(), nil)
	ctx := serve(p, get(t, "/small"))
	if s := summary(ctx); s.code != 200 || len(s.body) != 1024 {
		t.Fatalf("%+v", s)
	}
	if n := p.g.streamedFills.Get(); n != 0 {
		t.Errorf("streamed fills = %d, want 0", n)
	}
}

// quietLogger drops fasthttp's server log (a failed fill's connections
// end in an error by design).
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// cache.wait_timeout bounds a waiter's wait for the first byte: one
// attached to a fill that streams is followed to the end, however long
// the body takes; one that waits for the fill to complete (a Range) is
// still bounded by it.
func TestStreamedFillWaitTimeoutIsFirstByte(t *testing.T) {
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 256<<10, false)
	p := newFillProxy(t, o.addr(), func(c *config.Config) { c.Cache.WaitTimeout = 200 * time.Millisecond })
	addr := listen(t, p)

	leader := openFill(t, addr, "/wt", 1024)
	waiter := openFill(t, addr, "/wt", 1024)
	if leader.err != nil || waiter.err != nil {
		t.Fatalf("first bytes: %v, %v", leader.err, waiter.err)
	}
	rg := openFill(t, addr, "/wt", 0, "Range: bytes=0-9")
	if rg.err != nil || rg.resp.StatusCode != fasthttp.StatusGatewayTimeout {
		t.Errorf("Range waiter past wait_timeout: %v %+v, want 504", rg.err, rg.resp)
	} else {
		_ = rg.resp.Body.Close()
	}
	time.Sleep(300 * time.Millisecond) // past wait_timeout, the body still arriving
	o.hold.open()
	for name, c := range map[string]*fillClient{"leader": leader, "waiter": waiter} {
		if got, err := c.rest(); err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: %d bytes, %v; want the whole body", name, len(got), err)
		}
	}
}

// An invalidation of the URL while its fill streams: the fill is not
// stored, and a request after the invalidation does not join it.
func TestStreamedFillOvertakenByInvalidation(t *testing.T) {
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 256<<10, false)
	p := newFillProxy(t, o.addr(), nil)
	addr := listen(t, p)

	leader := openFill(t, addr, "/inv", 1024)
	if leader.err != nil {
		t.Fatal(leader.err)
	}
	ctx := get(t, "/inv")
	sc := &scratch{}
	rt := p.rt.Load()
	rte := rt.routes[rt.table.Match(ctx.Request.Header.Host(), ctx.Request.URI().PathOriginal()).Index]
	sc.key = rte.appendKey(nil, ctx, sc, p.cache.Namespaces().Version(rte.name, rte.scoped, nil))
	p.cache.Invalidations().InvalidateURL(sc.urlDigest(), false)

	// Joins the flight, sees its answer is older than the invalidation,
	// and fetches on its own (the origin's second request).
	late := make(chan *fillClient)
	go func() { late <- openFill(t, addr, "/inv", 1024) }()
	waitUntil(t, "the late request reaches the origin", func() bool { return o.hits.Load() == 2 })
	o.hold.open()
	if got, err := leader.rest(); err != nil || !bytes.Equal(got, body) {
		t.Errorf("leader: %d bytes, %v; want the whole body (its request preceded the invalidation)", len(got), err)
	}
	c := <-late
	if got, err := c.rest(); err != nil || !bytes.Equal(got, body) {
		t.Errorf("late: %d bytes, %v", len(got), err)
	}
	if n := p.g.overtaken.Get(); n != 1 {
		t.Errorf("overtaken = %d, want 1 (the leader's fill)", n)
	}
}

// On a compressing route, a client that wants a coding streams an answer
// the route does not compress, and waits for the coded sibling of one it
// does.
func TestStreamedFillCompressRoute(t *testing.T) {
	body := fillBody(2 << 20)
	for _, tt := range []struct {
		ctype    string
		streamed bool
	}{
		{"image/png", true},
		{"text/plain", false},
	} {
		t.Run(tt.ctype, func(t *testing.T) {
			o := newSlowOriginType(t, body, 256<<10, false, tt.ctype)
			p := newFillProxy(t, o.addr(), func(c *config.Config) {
				c.Routes[0].Compress.Codings = []string{"gzip"}
				c.Routes[0].Cache.AcceptEncoding = nil
			})
			addr := listen(t, p)
			leader := openFill(t, addr, "/c", 1024)
			if leader.err != nil {
				t.Fatal(leader.err)
			}
			coded := make(chan *fillClient, 1)
			go func() { coded <- openFill(t, addr, "/c", 0, "Accept-Encoding: gzip") }()
			var c *fillClient
			select {
			case c = <-coded:
				if !tt.streamed {
					t.Fatal("a coded answer came before the fill completed")
				}
			case <-time.After(200 * time.Millisecond):
				if tt.streamed {
					t.Fatal("no head for the gzip client while the fill streams an uncompressed type")
				}
			}
			o.hold.open()
			if c == nil {
				c = <-coded
			}
			got, err := c.rest()
			if err != nil {
				t.Fatal(err)
			}
			ce := c.resp.Header.Get("Content-Encoding")
			if tt.streamed != (ce == "") {
				t.Errorf("Content-Encoding %q", ce)
			}
			if dec := decodeBody(t, ce, got); dec != string(body) {
				t.Errorf("gzip client: body decodes to %d bytes, want the origin's %d", len(dec), len(body))
			}
			if got, err := leader.rest(); err != nil || !bytes.Equal(got, body) {
				t.Errorf("leader: %d bytes, %v", len(got), err)
			}
		})
	}
}

// A stale-while-revalidate refresh of a large object is a streamed fill
// too, run in the background: the stale copy is served, the refreshed
// one stored.
func TestStreamedFillBackgroundRefresh(t *testing.T) {
	testStreamedFillBackgroundRefresh(t, nil)
}

// testStreamedFillBackgroundRefresh is TestStreamedFillBackgroundRefresh
// on the proxy edit makes.
func testStreamedFillBackgroundRefresh(t *testing.T, edit func(*config.Config)) *Proxy {
	body := fillBody(2 << 20)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		// Only the first answer goes stale soon: a slow (-race, loaded)
		// run must not find the refreshed one stale again.
		maxAge := "60"
		if n == 1 {
			maxAge = "1"
		}
		w.Header().Set("Cache-Control", "public, max-age="+maxAge+", stale-while-revalidate=60")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		b := bytes.Clone(body)
		b[0] = byte(n)
		_, _ = w.Write(b)
	})
	p := newFillProxy(t, o.addr(), edit)
	addr := listen(t, p)
	get1 := func() (*fillClient, []byte) {
		c := openFill(t, addr, "/swr", 1)
		got, err := c.rest()
		if err != nil || len(got) != len(body) {
			t.Fatalf("%d bytes, %v", len(got), err)
		}
		return c, got
	}
	if _, b := get1(); b[0] != 1 {
		t.Fatalf("first answer from origin answer %d", b[0])
	}
	time.Sleep(1100 * time.Millisecond)
	c, b := get1()
	if b[0] != 1 || !strings.Contains(c.resp.Header.Get("Cache-Status"), "stale-while-revalidate") {
		t.Fatalf("stale answer: origin answer %d, Cache-Status %q", b[0], c.resp.Header.Get("Cache-Status"))
	}
	waitUntil(t, "the background fill ends", func() bool { return o.hits.Load() == 2 && p.fl.inFlight() == 0 })
	c, b = get1()
	if b[0] != 2 || !strings.Contains(c.resp.Header.Get("Cache-Status"), "hit") {
		t.Errorf("after the refresh: origin answer %d, Cache-Status %q; want a hit on answer 2", b[0], c.resp.Header.Get("Cache-Status"))
	}
	if n := p.g.streamedFills.Get(); n != 2 {
		t.Errorf("streamed fills = %d, want 2", n)
	}
	return p
}
