package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
)

// captureConn is a client connection that records what is written to it
// (the 103 heads relayed to the edge's client).
type captureConn struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *captureConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(b)
}

func (c *captureConn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// forwardTo is testNode.forward with the edge's client and its hint
// budget.
func (n *testNode) forwardTo(t *testing.T, owner, uri string, client *fasthttp.RequestCtx, maxHints int) (*fasthttp.Response, bool) {
	t.Helper()
	fw, ok := n.node.Begin(owner, time.Now().UnixNano())
	if !ok {
		return nil, false
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(uri)
	req.Header.SetHost("example.test")
	n.node.SetForwardHead(HTTPHead(&req.Header), n.m.View().Current.Generation(), []byte("acme"), []byte("192.0.2.1"))
	return n.node.Do(client, fw, req, maxHints)
}

// TestMuxEarlyHints: the owner's 103 Early Hints reach the edge's client
// over the multiplexed connection as a 103 of their Link fields, at most
// maxHints of them, none when the edge asks for none; the client's
// answer head keeps no Link field of theirs.
func TestMuxEarlyHints(t *testing.T) {
	var httpSeen atomic.Int64
	s := muxSetup(&httpSeen, nil)
	s.local = func(l *fakeLocal) {
		l.before = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) != "/hints" {
				return
			}
			ctx.Response.Header.Set("Link", "</a.css>; rel=preload")
			_ = ctx.EarlyHints()
			ctx.Response.Header.Set("Link", "</b.js>; rel=preload")
			_ = ctx.EarlyHints()
			ctx.Response.Header.Del("Link")
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	a.waitMux(t, "b")
	before := httpSeen.Load()

	cc := &captureConn{}
	var client fasthttp.RequestCtx
	client.Init2(cc, nil, false)
	resp, ok := a.forwardTo(t, "b", "/hints", &client, 1)
	if !ok {
		t.Fatal("forward failed")
	}
	if got := string(resp.Body()); got != "served by b /hints" {
		t.Errorf("body %q", got)
	}
	fasthttp.ReleaseResponse(resp)
	got := cc.String()
	if !strings.HasPrefix(got, "HTTP/1.1 103 Early Hints\r\n") || !strings.Contains(got, "Link: </a.css>; rel=preload\r\n") {
		t.Errorf("client got %q, want a 103 with the first Link", got)
	}
	if strings.Count(got, "103 Early Hints") != 1 || strings.Contains(got, "b.js") {
		t.Errorf("client got %q, want only the first of two hints (maxHints 1)", got)
	}
	if l := client.Response.Header.Peek("Link"); len(l) != 0 {
		t.Errorf("client's answer head keeps Link %q", l)
	}

	// No hint budget: the owner is not asked for hints, the client gets none.
	cc2 := &captureConn{}
	var client2 fasthttp.RequestCtx
	client2.Init2(cc2, nil, false)
	resp, ok = a.forwardTo(t, "b", "/hints", &client2, 0)
	if !ok {
		t.Fatal("forward failed")
	}
	fasthttp.ReleaseResponse(resp)
	if got := cc2.String(); got != "" {
		t.Errorf("client without hint budget got %q", got)
	}
	if n := httpSeen.Load() - before; n != 0 {
		t.Errorf("%d requests went over HTTP", n)
	}
}

// TestSendHintsLinkOnly: only a 103 head's Link fields are relayed; a
// head without any sends nothing.
func TestSendHintsLinkOnly(t *testing.T) {
	cc := &captureConn{}
	var client fasthttp.RequestCtx
	client.Init2(cc, nil, false)
	sendHints(&client, []byte("HTTP/1.1 103 Early Hints\r\nX-Other: 1\r\n\r\n"))
	if got := cc.String(); got != "" {
		t.Errorf("a head without Link sent %q", got)
	}
	sendHints(&client, []byte("HTTP/1.1 103 Early Hints\r\nX-Other: 1\r\nlink:  </c.css>; rel=preload \r\n\r\n"))
	got := cc.String()
	if !strings.Contains(got, "Link: </c.css>; rel=preload\r\n") || strings.Contains(got, "X-Other") {
		t.Errorf("client got %q, want the Link field only", got)
	}
}

// TestMuxStreamedAnswer: an owner's streamed answer body is read whole
// and relayed when within MaxBody; above it, or when the stream fails,
// the edge gets no answer (it serves the request itself) and the
// connection stays.
func TestMuxStreamedAnswer(t *testing.T) {
	const maxBody = 64 << 10
	s := muxSetup(nil, func(o *Options) { o.MaxBody = maxBody })
	s.local = func(l *fakeLocal) {
		l.answer = func(ctx *fasthttp.RequestCtx) bool {
			switch string(ctx.Path()) {
			case "/stream":
				ctx.SetBodyStream(io.LimitReader(endless('s'), maxBody-10), -1)
			case "/stream-large":
				ctx.SetBodyStream(io.LimitReader(endless('l'), maxBody+1), -1)
			case "/stream-broken":
				ctx.SetBodyStream(io.MultiReader(strings.NewReader("part"), errReader{}), -1)
			default:
				return false
			}
			return true
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	mc := a.waitMux(t, "b")
	resp, ok := a.forward(t, "b", "/stream")
	if !ok {
		t.Fatal("streamed answer within MaxBody not relayed")
	}
	if body := resp.Body(); len(body) != maxBody-10 || bytes.Count(body, []byte("s")) != maxBody-10 {
		t.Errorf("streamed body: %d bytes", len(body))
	}
	fasthttp.ReleaseResponse(resp)
	for _, uri := range []string{"/stream-large", "/stream-broken"} {
		if resp, ok := a.forward(t, "b", uri); ok {
			t.Errorf("%s: relayed %d bytes", uri, len(resp.Body()))
			fasthttp.ReleaseResponse(resp)
		}
		a.node.Peer("b").skip = peerSkip{}
	}
	if a.node.Peer("b").mux.cur.Load() != mc {
		t.Error("a refused answer closed the connection")
	}
	if got := fwdBody(t, a, "b", "/after"); got != "served by b /after" {
		t.Errorf("after: %q", got)
	}
}

// endless reads as an unending run of b, a few bytes at a time.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	n := min(len(p), 1000)
	for i := range n {
		p[i] = byte(e)
	}
	return n, nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("stream broke") }

// TestReadLimited: a reader is read whole when within the limit (0: no
// limit); past it, or on a read error, readLimited fails.
func TestReadLimited(t *testing.T) {
	b, err := readLimited(nil, io.LimitReader(endless('x'), 5000), 0)
	if err != nil || len(b) != 5000 {
		t.Errorf("no limit: %d bytes, %v", len(b), err)
	}
	b, err = readLimited(make([]byte, 0, 8), io.LimitReader(endless('x'), 100), 100)
	if err != nil || len(b) != 100 {
		t.Errorf("at the limit: %d bytes, %v", len(b), err)
	}
	if _, err := readLimited(nil, io.LimitReader(endless('x'), 101), 100); !errors.Is(err, errFrameTooLarge) {
		t.Errorf("past the limit: %v", err)
	}
	if _, err := readLimited(nil, errReader{}, 100); err == nil || errors.Is(err, errFrameTooLarge) {
		t.Errorf("read error: %v", err)
	}
}

// TestMuxRequestConn: the connection a multiplexed request's handler
// sees carries the edge's addresses; reading it ends at once, and
// closing it, setting its deadlines or writing to it (no hints asked)
// leaves the shared connection alone.
func TestMuxRequestConn(t *testing.T) {
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		l.answer = func(ctx *fasthttp.RequestCtx) bool {
			if string(ctx.Path()) != "/conn" {
				return false
			}
			c := ctx.Conn()
			n, rerr := c.Read(make([]byte, 8))
			wn, werr := c.Write([]byte("stray bytes"))
			derr := errors.Join(c.SetDeadline(time.Now()), c.SetReadDeadline(time.Now()), c.SetWriteDeadline(time.Now()))
			cerr := c.Close()
			ctx.SetBodyString(fmt.Sprintf("read %d %v write %d %v deadlines %v close %v remote %s", n, rerr, wn, werr, derr, cerr, c.RemoteAddr()))
			return true
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	mc := a.waitMux(t, "b")
	want := "read 0 EOF write 11 <nil> deadlines <nil> close <nil> remote 10.0.0.1:50000"
	for i := range 3 {
		if got := fwdBody(t, a, "b", "/conn"); got != want {
			t.Fatalf("request %d: %q, want %q", i, got, want)
		}
	}
	if a.node.Peer("b").mux.cur.Load() != mc || mc.closed.Load() {
		t.Error("the handler's Close or deadlines reached the shared connection")
	}
}

// TestMuxOwnerChecks: the owner checks each multiplexed request as the
// HTTP path does: an edge no longer in its views gets a 403 (counted as
// forbidden on both sides, not served), one routing by a generation it
// does not accept a 421 with its own (the edge refreshes membership).
func TestMuxOwnerChecks(t *testing.T) {
	var httpSeen atomic.Int64
	h := newHarness(t, muxSetup(&httpSeen, nil), "a", "b", "c", "d")
	a, b := h.node("a"), h.node("b")
	a.waitMux(t, "b")
	before := httpSeen.Load()

	// b's view moves to {a,b,c} by way of {a,b}: a's generation (of
	// {a,b,c,d}) is neither the current nor the previous one.
	h.setPeers([]*testNode{b}, "a", "b")
	h.setPeers([]*testNode{b}, "a", "b", "c")
	refreshes := a.src.refreshes.Load()
	if _, ok := a.forward(t, "b", "/misdirected"); ok {
		t.Fatal("a misdirected request was answered")
	}
	if a.node.PeerOutcomes("b", PeerMisdirected) != 1 || b.counter(`shield_peer_misdirected_total`) != 1 {
		t.Errorf("misdirected: edge %d, owner %d", a.node.PeerOutcomes("b", PeerMisdirected), b.counter(`shield_peer_misdirected_total`))
	}
	if a.src.refreshes.Load() == refreshes {
		t.Error("a 421 did not refresh the edge's membership")
	}

	// Then to {b} by way of {b,c}: a's address is no longer allowed.
	h.setPeers([]*testNode{b}, "b", "c")
	h.setPeers([]*testNode{b}, "b")
	if _, ok := a.forward(t, "b", "/forbidden"); ok {
		t.Fatal("a request from a non-peer was answered")
	}
	if a.node.PeerOutcomes("b", PeerForbidden) != 1 || b.counter(`shield_peer_forbidden_total`) != 1 {
		t.Errorf("forbidden: edge %d, owner %d", a.node.PeerOutcomes("b", PeerForbidden), b.counter(`shield_peer_forbidden_total`))
	}
	b.local.mu.Lock()
	for _, uri := range b.local.served {
		if uri == "/misdirected" || uri == "/forbidden" {
			t.Errorf("%s was served", uri)
		}
	}
	b.local.mu.Unlock()
	if n := httpSeen.Load() - before; n != 0 {
		t.Errorf("%d requests went over HTTP", n)
	}
}

// TestMuxPeerLeavesView: a peer that leaves the view keeps its
// multiplexed connection while it is in the previous view (it serves
// through the overlap), and loses it once it is in neither.
func TestMuxPeerLeavesView(t *testing.T) {
	h := newHarness(t, muxSetup(nil, nil), "a", "b", "c")
	a := h.node("a")
	mc := a.waitMux(t, "b")
	h.setPeers([]*testNode{a}, "a", "c")
	if mc.closed.Load() {
		t.Fatal("the connection to a peer still in the previous view was closed")
	}
	h.setPeers([]*testNode{a}, "a")
	if !mc.closed.Load() {
		t.Error("the connection to a peer in neither view stays open")
	}
}

// fakeOwner serves the multiplexed transport at addr by hand: it accepts
// the hello with max in flight and calls onRequest for each request
// frame (on the connection's reader); HTTP requests are answered "over
// http".
func fakeOwner(t *testing.T, h *harness, addr string, max uint32, onRequest func(conn net.Conn, id uint32)) {
	t.Helper()
	ln := h.net.listen(addr)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				first, err := br.Peek(1)
				if err != nil {
					return
				}
				if first[0] != muxPreface[0] {
					_ = fasthttp.ServeConn(&bufConn{Conn: conn, r: br}, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("over http") })
					return
				}
				if _, err := br.Discard(len(muxPreface)); err != nil {
					return
				}
				var hdr [frameHeaderLen]byte
				if _, _, err := readFrame(br, &hdr, nil, 4096); err != nil {
					return
				}
				ok := appendFrameHeader(nil, frameHelloOK, 0, 4)
				if _, err := conn.Write(append(ok, byte(max>>24), byte(max>>16), byte(max>>8), byte(max))); err != nil {
					return
				}
				for {
					fh, _, err := readFrame(br, &hdr, nil, muxMaxRequest)
					if err != nil {
						return
					}
					onRequest(conn, fh.id)
				}
			}()
		}
	}()
}

// bufConn reads through r (what was peeked stays).
type bufConn struct {
	net.Conn
	r io.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// muxAnswer is a response frame to id.
func muxAnswer(id uint32, body string) []byte {
	var r fasthttp.Response
	r.Header.Set("Cache-Control", "max-age=60")
	payload := appendResponse(nil, &r, []byte(body), false)
	return append(appendFrameHeader(nil, frameResponse, id, uint32(len(payload))), payload...)
}

// openMux has n dial its multiplexed connection to owner (no request
// sent) and returns it.
func openMux(t *testing.T, n *testNode, owner string) *muxConn {
	t.Helper()
	m := n.node.Peer(owner).mux
	var mc *muxConn
	waitUntil(t, "a mux connection to "+owner, func() bool {
		mc = m.conn()
		return mc != nil
	})
	return mc
}

// TestMuxOwnerMisbehaves: an owner that sends what the protocol does not
// allow, or breaks off mid-frame, fails the connection and the requests
// on it at once (not at their timeout).
func TestMuxOwnerMisbehaves(t *testing.T) {
	for name, c := range map[string]struct {
		send []byte
		// hangUp: the owner closes after sending; otherwise it keeps the
		// connection open and the edge must fail it by itself.
		hangUp bool
	}{
		"goaway length":    {send: append(appendFrameHeader(nil, frameGoAway, 0, 3), 0, 0, 0)},
		"request frame":    {send: appendFrameHeader(nil, frameRequest, 1, 0)},
		"unknown type":     {send: appendFrameHeader(nil, 99, 1, 0)},
		"hints too large":  {send: appendFrameHeader(nil, frameHints, 1, httpx.MaxInterimHead+1)},
		"truncated answer": {send: append(appendFrameHeader(nil, frameResponse, 1, 100), "only ten b"...), hangUp: true},
		"truncated hints":  {send: append(appendFrameHeader(nil, frameHints, 1, 100), "only ten b"...), hangUp: true},
		"truncated goaway": {send: append(appendFrameHeader(nil, frameGoAway, 0, 4), 0, 0), hangUp: true},
		"truncated header": {send: []byte{frameResponse, 0, 0}, hangUp: true},
		"unknown id, cut":  {send: append(appendFrameHeader(nil, frameResponse, 77, 100), "only ten b"...), hangUp: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, muxSetup(nil, func(o *Options) { o.PeerTimeout = 5 * time.Second }), "a", "b")
			a := h.node("a")
			fakeOwner(t, h, h.node("b").addr, 16, func(conn net.Conn, _ uint32) {
				_, _ = conn.Write(c.send)
				if c.hangUp {
					_ = conn.Close()
				}
			})
			mc := openMux(t, a, "b")
			start := time.Now()
			if resp, ok := a.forward(t, "b", "/x"); ok {
				t.Errorf("answered %q", resp.Body())
				fasthttp.ReleaseResponse(resp)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("failed after %v, not at once", d)
			}
			waitUntil(t, "the connection failed", mc.closed.Load)
			if a.node.MuxOpen("b") {
				t.Error("the failed connection is still used")
			}
		})
	}
}

// TestMuxOwnerAnswers: an answer to an id the edge is not waiting for is
// skipped, one above the edge's limit fails its request only; the
// connection carries the next request.
func TestMuxOwnerAnswers(t *testing.T) {
	h := newHarness(t, muxSetup(nil, func(o *Options) { o.MaxBody = 1024 }), "a", "b")
	a := h.node("a")
	var n atomic.Int64
	fakeOwner(t, h, h.node("b").addr, 16, func(conn net.Conn, id uint32) {
		switch n.Add(1) {
		case 1:
			_, _ = conn.Write(muxAnswer(id+1000, "stray"))
			big := muxMaxHead + 1024 + 1
			_, _ = conn.Write(append(appendFrameHeader(nil, frameResponse, id, uint32(big)), make([]byte, big)...))
		default:
			_, _ = conn.Write(muxAnswer(id, fmt.Sprintf("answer %d", id)))
		}
	})
	mc := openMux(t, a, "b")
	if resp, ok := a.forward(t, "b", "/big"); ok {
		t.Errorf("an answer above the limit was relayed (%d bytes)", len(resp.Body()))
		fasthttp.ReleaseResponse(resp)
	}
	if got := fwdBody(t, a, "b", "/next"); got != "answer 2" {
		t.Errorf("next: %q", got)
	}
	if mc.closed.Load() || a.node.Peer("b").mux.cur.Load() != mc {
		t.Error("the connection was replaced")
	}
}

// TestMuxGoAwayUnread: requests the owner says it did not read (ids after
// its goodbye's) go over HTTP at once; nothing more is sent on the
// connection.
func TestMuxGoAwayUnread(t *testing.T) {
	h := newHarness(t, muxSetup(nil, nil), "a", "b")
	a := h.node("a")
	fakeOwner(t, h, h.node("b").addr, 16, func(conn net.Conn, id uint32) {
		var last [4]byte
		last[3] = byte(id - 1)
		_, _ = conn.Write(append(appendFrameHeader(nil, frameGoAway, 0, 4), last[:]...))
	})
	mc := openMux(t, a, "b")
	if got := fwdBody(t, a, "b", "/unread"); got != "over http" {
		t.Errorf("a request the owner did not read: %q, want it sent over HTTP", got)
	}
	mc.mu.Lock()
	goingAway := mc.goingAway
	mc.mu.Unlock()
	if !goingAway || a.node.Peer("b").mux.cur.Load() == mc {
		t.Error("the connection is still used after the goodbye")
	}
	// A request on it now is not sent: the caller goes over HTTP.
	mr := AcquireMuxRequest()
	defer ReleaseMuxRequest(mr)
	mr.Start([]byte("GET"), []byte("/late"))
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if sent, err := mc.do(nil, mr, resp, 0, time.Second, nil); sent || err != nil {
		t.Errorf("after the goodbye: sent %v, %v", sent, err)
	}
}

// TestMuxOwnerInflightLimit: beyond the owner's in-flight limit (its
// hello's) requests go over HTTP instead of waiting.
func TestMuxOwnerInflightLimit(t *testing.T) {
	h := newHarness(t, muxSetup(nil, nil), "a", "b")
	a := h.node("a")
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // the fake owner's reader never stays blocked
	fakeOwner(t, h, h.node("b").addr, 1, func(conn net.Conn, id uint32) {
		<-release
		_, _ = conn.Write(muxAnswer(id, "over mux"))
	})
	mc := openMux(t, a, "b")
	first := make(chan string, 1)
	go func() { first <- fwdBody(t, a, "b", "/first") }()
	waitUntil(t, "the first request in flight", func() bool {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		return len(mc.pending) == 1
	})
	if got := fwdBody(t, a, "b", "/second"); got != "over http" {
		t.Errorf("second: %q, want it over HTTP", got)
	}
	unblock()
	if got := <-first; got != "over mux" {
		t.Errorf("first: %q", got)
	}
}

// TestMuxRequestAsBuilt: a request encoded as the edge builds it
// (MuxRequest, its fields and SetForwardHead through ReqHead) reaches the
// owner over the multiplexed connection with every field set — the
// client's and the peer protocol's, the generation accepted, no secret
// per request — and a HEAD's answer keeps its Content-Length without a
// body.
func TestMuxRequestAsBuilt(t *testing.T) {
	var httpSeen atomic.Int64
	s := muxSetup(&httpSeen, nil)
	var seenAuth, seenCustom, seenGen atomic.Value
	s.local = func(l *fakeLocal) {
		l.before = func(ctx *fasthttp.RequestCtx) {
			seenAuth.Store(string(ctx.Request.Header.PeekBytes(hShieldAuth)))
			seenCustom.Store(string(ctx.Request.Header.Peek("X-Custom")))
			seenGen.Store(string(ctx.Request.Header.PeekBytes(hShieldGeneration)))
		}
	}
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	a.waitMux(t, "b")
	before := httpSeen.Load()
	for _, method := range []string{"GET", "HEAD"} {
		fw, ok := a.node.Begin("b", time.Now().UnixNano())
		if !ok || !fw.UseMux([]byte(method)) {
			t.Fatalf("%s: no mux connection to b", method)
		}
		mr := AcquireMuxRequest()
		mr.Start([]byte(method), []byte("/built?x=1"))
		mr.Head().Add([]byte("Host"), []byte("example.test"))
		mr.Head().Add([]byte("X-Custom"), []byte("v1"))
		gen := a.m.View().Current.Generation()
		a.node.SetForwardHead(mr.Head(), gen, []byte("acme"), []byte("192.0.2.7"))
		resp, ok, sent := a.node.DoMux(nil, fw, mr, 0, nil)
		ReleaseMuxRequest(mr)
		if !sent || !ok {
			t.Fatalf("%s: sent %v ok %v", method, sent, ok)
		}
		want := "served by b /built?x=1"
		if method == "HEAD" {
			if len(resp.Body()) != 0 || !resp.SkipBody || resp.Header.ContentLength() != len(want) {
				t.Errorf("HEAD: body %q, skip %v, Content-Length %d, want none, true, %d", resp.Body(), resp.SkipBody, resp.Header.ContentLength(), len(want))
			}
		} else if resp.StatusCode() != 200 || string(resp.Body()) != want {
			t.Errorf("GET: %d %q", resp.StatusCode(), resp.Body())
		}
		fasthttp.ReleaseResponse(resp)
		if got := seenAuth.Load(); got != "" {
			t.Errorf("%s: the owner saw Shield-Auth %q on the request, want none (the hello carries it)", method, got)
		}
		if got := seenCustom.Load(); got != "v1" {
			t.Errorf("%s: X-Custom = %q", method, got)
		}
		if got := seenGen.Load(); got != strconv.FormatUint(gen, 10) {
			t.Errorf("%s: Shield-Generation = %q, want %d", method, got, gen)
		}
		b.local.mu.Lock()
		last := b.local.headers[len(b.local.headers)-1]
		b.local.mu.Unlock()
		if last.tenant != "acme" || last.clientIP != "192.0.2.7" {
			t.Errorf("%s: owner saw %+v", method, last)
		}
	}
	if n := httpSeen.Load() - before; n != 0 {
		t.Errorf("%d requests went over HTTP", n)
	}
}
