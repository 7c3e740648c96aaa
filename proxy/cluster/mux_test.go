package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
)

// muxSetup is a harness whose nodes forward over the multiplexed
// transport; httpSeen counts the requests that reached a peer listener's
// HTTP server.
func muxSetup(httpSeen *atomic.Int64, opts func(*Options)) setup {
	return setup{
		opts: func(o *Options) {
			o.Transport = TransportMux
			if opts != nil {
				opts(o)
			}
		},
		handler: func(_ *testNode, next fasthttp.RequestHandler) fasthttp.RequestHandler {
			return func(ctx *fasthttp.RequestCtx) {
				if httpSeen != nil {
					httpSeen.Add(1)
				}
				next(ctx)
			}
		},
	}
}

// waitMux forwards from n to owner until the request went over the
// multiplexed connection, and returns it.
func (n *testNode) waitMux(t *testing.T, owner string) *muxConn {
	t.Helper()
	pc := n.node.Peer(owner)
	var mc *muxConn
	waitUntil(t, "a mux connection to "+owner, func() bool {
		if resp, ok := n.forward(t, owner, "/warm"); ok {
			fasthttp.ReleaseResponse(resp)
		}
		mc = pc.mux.cur.Load()
		return mc != nil
	})
	return mc
}

// fwdBody forwards uri from n to owner and returns the answer's body.
func fwdBody(t *testing.T, n *testNode, owner, uri string) string {
	t.Helper()
	resp, ok := n.forward(t, owner, uri)
	if !ok {
		return "<fallback>"
	}
	defer fasthttp.ReleaseResponse(resp)
	return string(resp.Body())
}

// TestMuxForward: a forwarded request goes over the multiplexed
// connection once it is open, with the peer protocol's fields, and its
// answer comes back whole (status, fields, body) but the relay-only
// ones.
func TestMuxForward(t *testing.T) {
	var httpSeen atomic.Int64
	h := newHarness(t, muxSetup(&httpSeen, nil), "a", "b")
	a, b := h.node("a"), h.node("b")
	a.waitMux(t, "b")
	before := httpSeen.Load()
	resp, ok := a.forward(t, "b", "/x?q=1")
	if !ok {
		t.Fatal("forward failed")
	}
	if got := string(resp.Body()); got != "served by b /x?q=1" {
		t.Errorf("body %q", got)
	}
	if cc := string(resp.Header.Peek("Cache-Control")); cc != "max-age=60" || resp.StatusCode() != 200 {
		t.Errorf("status %d, Cache-Control %q", resp.StatusCode(), cc)
	}
	if resp.Header.ContentLength() != len("served by b /x?q=1") || len(resp.Header.Peek("Date")) == 0 {
		t.Errorf("Content-Length %d, Date %q", resp.Header.ContentLength(), resp.Header.Peek("Date"))
	}
	fasthttp.ReleaseResponse(resp)
	if n := httpSeen.Load() - before; n != 0 {
		t.Errorf("%d requests went over HTTP", n)
	}
	b.local.mu.Lock()
	last := b.local.headers[len(b.local.headers)-1]
	b.local.mu.Unlock()
	if last.tenant != "acme" || last.clientIP != "192.0.2.1" || last.forwarded != "1" {
		t.Errorf("peer fields %+v", last)
	}
	if got := a.set.GetOrCreateGauge(`shield_peer_mux_connections`, nil).Get(); got != 1 {
		t.Errorf("shield_peer_mux_connections = %v, want 1", got)
	}
	if got := a.counter(`shield_peer_requests_total{peer="b",outcome="ok"}`); got == 0 {
		t.Error("no ok outcome counted")
	}
	// A 504 from the owner is relayed as any answer.
	resp, ok = a.forward(t, "b", "/missing")
	if !ok || resp.StatusCode() != fasthttp.StatusGatewayTimeout {
		t.Fatalf("ok %v", ok)
	}
	fasthttp.ReleaseResponse(resp)
}

// TestMuxConcurrent: many requests at once share one connection and each
// gets its own answer.
func TestMuxConcurrent(t *testing.T) {
	var httpSeen atomic.Int64
	h := newHarness(t, muxSetup(&httpSeen, nil), "a", "b")
	a := h.node("a")
	mc := a.waitMux(t, "b")
	before := httpSeen.Load()
	var wg sync.WaitGroup
	errs := make(chan string, 400)
	for i := range 400 {
		wg.Go(func() {
			uri := fmt.Sprintf("/c/%d", i)
			if got := fwdBody(t, a, "b", uri); got != "served by b "+uri {
				errs <- got
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := httpSeen.Load() - before; n != 0 {
		t.Errorf("%d requests went over HTTP", n)
	}
	if cur := a.node.Peer("b").mux.cur.Load(); cur != mc {
		t.Error("the connection was replaced")
	}
}

// TestMuxOutOfOrder: a slow answer does not hold back a fast one sent
// after it on the same connection.
func TestMuxOutOfOrder(t *testing.T) {
	release := make(chan struct{})
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		l.before = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/slow" {
				<-release
			}
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	a.waitMux(t, "b")
	slow := make(chan string, 1)
	go func() { slow <- fwdBody(t, a, "b", "/slow") }()
	time.Sleep(20 * time.Millisecond)
	if got := fwdBody(t, a, "b", "/fast"); got != "served by b /fast" {
		t.Errorf("fast: %q", got)
	}
	select {
	case got := <-slow:
		t.Fatalf("slow answered before it was released: %q", got)
	default:
	}
	close(release)
	if got := <-slow; got != "served by b /slow" {
		t.Errorf("slow: %q", got)
	}
}

// TestMuxHungRequest: a request the owner never answers costs its
// timeout, while others on the same connection are answered; the
// connection stays.
func TestMuxHungRequest(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	s := muxSetup(nil, func(o *Options) { o.PeerTimeout = 300 * time.Millisecond })
	s.local = func(l *fakeLocal) {
		l.before = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/hang" {
				<-hang
			}
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	mc := a.waitMux(t, "b")
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if resp, ok := a.forward(t, "b", "/hang"); ok {
			fasthttp.ReleaseResponse(resp)
			t.Error("hung request answered")
		}
		done <- time.Since(start)
	}()
	for i := range 20 {
		uri := fmt.Sprintf("/ok/%d", i)
		if got := fwdBody(t, a, "b", uri); got != "served by b "+uri {
			t.Errorf("%s: %q", uri, got)
		}
	}
	select {
	case d := <-done:
		if d < 250*time.Millisecond || d > 2*time.Second {
			t.Errorf("hung request failed after %v, want its 300ms timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hung request never failed")
	}
	if a.node.Peer("b").mux.cur.Load() != mc {
		t.Error("a timeout closed the connection")
	}
	if got := fwdBody(t, a, "b", "/after"); got != "served by b /after" {
		t.Errorf("after: %q", got)
	}
}

// TestMuxConnectionKilled: a connection that breaks fails its requests
// in flight at once (not at their timeout) and is redialled.
func TestMuxConnectionKilled(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	s := muxSetup(nil, func(o *Options) { o.PeerTimeout = 10 * time.Second })
	s.local = func(l *fakeLocal) {
		l.before = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/hang" {
				<-hang
			}
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	mc := a.waitMux(t, "b")
	const n = 10
	done := make(chan bool, n)
	for range n {
		go func() {
			resp, ok := a.forward(t, "b", "/hang")
			if ok {
				fasthttp.ReleaseResponse(resp)
			}
			done <- ok
		}()
	}
	waitUntil(t, "requests in flight", func() bool {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		return len(mc.pending) == n
	})
	start := time.Now()
	_ = mc.conn.Close()
	for range n {
		select {
		case ok := <-done:
			if ok {
				t.Error("a request on the killed connection was answered")
			}
		case <-time.After(3 * time.Second):
			t.Fatal("requests on the killed connection still waiting")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("failed after %v", d)
	}
	if got := a.counter(`shield_peer_requests_total{peer="b",outcome="error"}`); got < n {
		t.Errorf("error outcomes %d, want ≥ %d", got, n)
	}
	// Let the breaker close again, then a new connection carries requests.
	a.node.Peer("b").skip = peerSkip{}
	if mc2 := a.waitMux(t, "b"); mc2 == mc {
		t.Error("not redialled")
	}
}

// rawMux opens a multiplexed connection to n from ip, with secret.
func rawMux(t *testing.T, h *harness, n *testNode, ip net.IP, secret string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := h.net.dialFrom(ip)(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	msg := append([]byte(muxPreface), appendFrameHeader(nil, frameHello, 0, uint32(len(secret)))...)
	if _, err := conn.Write(append(msg, secret...)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn, bufio.NewReader(conn)
}

// TestMuxBadSecret: a hello with the wrong secret, or from an address
// that is not a peer's, is refused and nothing sent after it is served.
func TestMuxBadSecret(t *testing.T) {
	h := newHarness(t, muxSetup(nil, nil), "a", "b")
	b := h.node("b")
	for name, c := range map[string]struct {
		ip     net.IP
		secret string
	}{
		"bad secret":   {net.IPv4(10, 0, 0, 1), "wrong-secret-wrong-secret"},
		"not a peer":   {net.IPv4(192, 0, 2, 9), testSecret},
		"empty secret": {net.IPv4(10, 0, 0, 1), ""},
	} {
		t.Run(name, func(t *testing.T) {
			served := len(b.local.served)
			conn, br := rawMux(t, h, b, c.ip, c.secret)
			req := fasthttp.AcquireRequest()
			req.SetRequestURI("/sneaky")
			req.Header.Set("Shield-Generation", fmt.Sprint(b.m.View().Current.Generation()))
			_, _ = conn.Write(appendFrameHeader(nil, frameRequest, 1, uint32(len(appendRequest(nil, req, 0)))))
			_, _ = conn.Write(appendRequest(nil, req, 0))
			fasthttp.ReleaseRequest(req)
			var hdr [frameHeaderLen]byte
			fh, payload, err := readFrame(br, &hdr, nil, 64)
			if err != nil || fh.typ != frameError || !bytes.Equal(payload, []byte{errCodeForbidden}) {
				t.Fatalf("answer %+v %q %v, want a forbidden error frame", fh, payload, err)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("connection not closed: %v", err)
			}
			b.local.mu.Lock()
			defer b.local.mu.Unlock()
			if len(b.local.served) != served {
				t.Error("a request was served before the hello was accepted")
			}
		})
	}
	if b.counter(`shield_peer_mux_refused_total`) < 3 {
		t.Error("refusals not counted")
	}
	// An edge with the wrong secret falls back to HTTP, which refuses it
	// too: the request is served locally.
	h2 := newHarness(t, muxSetup(nil, nil), "a", "b")
	a2 := h2.node("a")
	a2.node.secret = []byte("another-secret-entirely")
	for range 5 {
		if resp, ok := a2.forward(t, "b", "/x"); ok {
			fasthttp.ReleaseResponse(resp)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a2.node.Peer("b").mux.cur.Load() != nil {
		t.Error("a connection was accepted with the wrong secret")
	}
}

// TestMuxOldPeer: an owner on an older release (HTTP only) answers the
// preface as HTTP: the edge remembers it and forwards over HTTP; and an
// edge sending HTTP to a node serving both is answered as before.
func TestMuxOldPeer(t *testing.T) {
	var httpSeen atomic.Int64
	s := muxSetup(&httpSeen, nil)
	s.httpOnly = func(id string) bool { return id == "b" }
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	for i := range 10 {
		uri := fmt.Sprintf("/old/%d", i)
		if got := fwdBody(t, a, "b", uri); got != "served by b "+uri {
			t.Fatalf("%s: %q", uri, got)
		}
	}
	waitUntil(t, "the refusal remembered", func() bool {
		m := a.node.Peer("b").mux
		m.mu.Lock()
		defer m.mu.Unlock()
		return !m.dialing && m.notBefore > time.Now().Add(muxRefusedFor/2).UnixNano()
	})
	if httpSeen.Load() < 10 {
		t.Errorf("%d requests over HTTP, want 10", httpSeen.Load())
	}
	// b → a: a serves both; HTTP from b's side (transport http) works.
	resp := h.peerReq(t, b.ip, a, "GET", "/plain", "", "Shield-Auth: "+testSecret, a.gen(), "Shield-Client-Ip: 192.0.2.1")
	if resp.StatusCode() != 200 || string(resp.Body()) != "served by a /plain" {
		t.Errorf("HTTP to a mux-serving listener: %d %q", resp.StatusCode(), resp.Body())
	}
}

// TestMuxOldPeerRejoins: a peer that refused the transport is tried
// again at once when it leaves the view and comes back (an upgraded node
// restarting), not a minute later; forwards are counted by transport.
func TestMuxOldPeerRejoins(t *testing.T) {
	s := muxSetup(nil, nil)
	s.httpOnly = func(id string) bool { return id == "b" }
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	m := a.node.Peer("b").mux // b's client outlives its leaving the view
	notBefore := func() int64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.dialing {
			return -1
		}
		return m.notBefore
	}
	for i := range 3 {
		fwdBody(t, a, "b", fmt.Sprintf("/old/%d", i))
	}
	waitUntil(t, "the refusal remembered", func() bool { return notBefore() > time.Now().Add(muxRefusedFor/2).UnixNano() })
	h.setPeers([]*testNode{a}, "a")
	if nb := notBefore(); nb < time.Now().UnixNano() {
		t.Fatalf("the refusal forgotten when b left the view (notBefore %d)", nb)
	}
	h.setPeers([]*testNode{a}, "a", "b")
	if nb := notBefore(); nb != 0 {
		t.Fatalf("b came back into the view: notBefore %d, want 0 (dial at the next request)", nb)
	}
	fwdBody(t, a, "b", "/old/again")
	waitUntil(t, "b refused again at its first request", func() bool { return notBefore() > time.Now().Add(muxRefusedFor/2).UnixNano() })
	viaHTTP := a.set.GetOrCreateCounter(`shield_peer_transport_total{peer="b",transport="http"}`).Get()
	viaMux := a.set.GetOrCreateCounter(`shield_peer_transport_total{peer="b",transport="mux"}`).Get()
	if viaHTTP != 4 || viaMux != 0 {
		t.Errorf("forwards to b by transport: http %d, mux %d; want 4, 0", viaHTTP, viaMux)
	}
}

// TestMuxFrameLimits: a request frame above its limit, or of a type an
// edge does not send, closes the connection; an answer above MaxBody is
// refused and served locally by the edge.
func TestMuxFrameLimits(t *testing.T) {
	s := muxSetup(nil, func(o *Options) { o.MaxBody = 1024 })
	s.local = func(l *fakeLocal) { l.serveLarge = true }
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	for name, frame := range map[string][]byte{
		"too large":  appendFrameHeader(nil, frameRequest, 1, muxMaxRequest+1),
		"wrong type": appendFrameHeader(nil, frameResponse, 1, 0),
		"bad type":   appendFrameHeader(nil, 99, 1, 0),
	} {
		t.Run(name, func(t *testing.T) {
			conn, br := rawMux(t, h, b, a.ip, testSecret)
			var hdr [frameHeaderLen]byte
			if fh, _, err := readFrame(br, &hdr, nil, 64); err != nil || fh.typ != frameHelloOK {
				t.Fatalf("hello: %+v %v", fh, err)
			}
			_, _ = conn.Write(frame)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("connection not closed: %v", err)
			}
		})
	}
	// The owner's 4 KiB answers are above the edge's 1 KiB limit.
	pc := a.node.Peer("b")
	waitUntil(t, "a mux connection", func() bool {
		if resp, ok := a.forward(t, "b", "/big"); ok {
			fasthttp.ReleaseResponse(resp)
			t.Fatal("an answer above MaxBody was relayed")
		}
		pc.skip = peerSkip{}
		return pc.mux.cur.Load() != nil
	})
	if resp, ok := a.forward(t, "b", "/big"); ok {
		fasthttp.ReleaseResponse(resp)
		t.Fatal("an answer above MaxBody was relayed")
	}
	if pc.mux.cur.Load() == nil {
		t.Error("a refused answer closed the connection")
	}
}

// TestMuxFrameRoundTrip: a request and an answer come out of their
// frames as they went in.
func TestMuxFrameRoundTrip(t *testing.T) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod("HEAD")
	req.SetRequestURI("/a%2Fb?x=1")
	req.Header.SetHost("example.test")
	req.Header.Add("Accept", "a")
	req.Header.Add("Accept", "b")
	req.Header.Set("Cookie", "k=v")
	payload := appendRequest(nil, req, reqFlagHints)
	var got fasthttp.Request
	flags, err := decodeRequest(payload, &got)
	if err != nil || flags != reqFlagHints {
		t.Fatal(flags, err)
	}
	if got.Header.String() != req.Header.String() {
		t.Errorf("request\n%q\nwant\n%q", got.Header.String(), req.Header.String())
	}

	var resp fasthttp.Response
	httpx.SetDate(&resp.Header, []byte("Tue, 01 Dec 2026 10:00:00 GMT")) // first: it resets the header
	resp.SetStatusCode(203)
	resp.Header.Set("Content-Type", "text/x")
	resp.Header.Add("Set-Cookie", "a=1")
	resp.Header.Add("Vary", "A")
	resp.Header.Add("Vary", "B")
	resp.Header.SetConnectionClose()
	resp.SetBodyString("hello")
	for _, head := range []bool{false, true} {
		b, h, err := splitResponse(appendResponse(nil, &resp, resp.Body(), head))
		if err != nil {
			t.Fatal(err)
		}
		var out fasthttp.Response
		if err := decodeResponseHead(h, &out); err != nil {
			t.Fatal(err)
		}
		wantBody := "hello"
		if head {
			wantBody = ""
		}
		if string(b) != wantBody || out.StatusCode() != 203 || out.Header.ContentLength() != 5 || out.Header.ConnectionClose() ||
			string(out.Header.ContentType()) != "text/x" || len(out.Header.PeekAll("Vary")) != 2 || !strings.Contains(out.Header.String(), "Set-Cookie: a=1") ||
			string(out.Header.Peek("Date")) != "Tue, 01 Dec 2026 10:00:00 GMT" {
			t.Errorf("head %v: body %q, answer\n%s", head, b, out.Header.String())
		}
	}
}

// FuzzMuxFrame: no byte string makes the decoders panic or read past
// their input.
func FuzzMuxFrame(f *testing.F) {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("/x?y")
	req.Header.SetHost("h")
	req.Header.Set("Shield-Generation", "12")
	f.Add(append(appendFrameHeader(nil, frameRequest, 7, 0), appendRequest(nil, req, 1)...))
	fasthttp.ReleaseRequest(req)
	var resp fasthttp.Response
	resp.Header.Set("Vary", "A")
	resp.SetBodyString("body")
	f.Add(append(appendFrameHeader(nil, frameResponse, 7, 0), appendResponse(nil, &resp, resp.Body(), false)...))
	f.Add(append(appendFrameHeader(nil, frameEntry, 7, 12), 0, 0, 0, 0, 0, 0, 0, 1, 'e', 'n', 't', 'r'))
	f.Add([]byte(muxPreface))
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0, 0, 3, 0, 1, 'G'})
	f.Add(binary.BigEndian.AppendUint32([]byte{4, 0, 0, 0, 1, 0, 0, 0, 8, 0, 200}, 0xffffffff))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		var hdr [frameHeaderLen]byte
		var buf []byte
		for {
			var h frameHeader
			var err error
			h, buf, err = readFrame(r, &hdr, buf, 1<<16)
			if err != nil {
				return
			}
			switch h.typ {
			case frameRequest:
				var req fasthttp.Request
				if _, err := decodeRequest(buf, &req); err == nil {
					// What decodes re-encodes to a request that decodes.
					var again fasthttp.Request
					if _, err := decodeRequest(appendRequest(nil, &req, 0), &again); err != nil {
						t.Fatalf("re-encoded request does not decode: %v", err)
					}
				}
			case frameEntry:
				if now, entry, err := splitEntry(buf); err == nil {
					if len(entry)+8 != len(buf) || len(entry) > EntryAnswerMax || uint64(now) != binary.BigEndian.Uint64(buf) {
						t.Fatal("split entry lost bytes")
					}
					// What an edge does with one: a copy, then a check.
					ent := EntryAnswer{Want: true}
					var mc muxConn
					if err := mc.finish(nil, muxMsg{typ: frameEntry, payload: buf}, false, nil, &ent); err != nil || !ent.Got || !bytes.Equal(ent.Buf, entry) {
						t.Fatalf("entry answer: %v %v", err, ent.Got)
					}
				}
			case frameResponse:
				if body, head, err := splitResponse(buf); err == nil {
					if len(body)+len(head)+4 != len(buf) {
						t.Fatal("split lost bytes")
					}
					var resp fasthttp.Response
					_ = decodeResponseHead(head, &resp)
				}
			}
		}
	})
}

// TestMuxSlowReader: an edge that sends requests and reads no answer
// cannot make the owner serve (and hold) more than its in-flight limit
// and queue allow, whether workers or the reader itself (inline) serve
// them; once it reads, every request is answered.
func TestMuxSlowReader(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) { testMuxSlowReader(t, inline) })
	}
}

func testMuxSlowReader(t *testing.T, inline bool) {
	const size, n = 64 << 10, 1500
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		l.serveLarge, l.size = true, size
		if inline {
			l.hit = func(ctx *fasthttp.RequestCtx) bool { l.ServePeer(ctx); return true }
		}
	}
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	conn, br := rawMux(t, h, b, a.ip, testSecret)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var hdr [frameHeaderLen]byte
	if fh, _, err := readFrame(br, &hdr, nil, 64); err != nil || fh.typ != frameHelloOK {
		t.Fatalf("hello: %+v %v", fh, err)
	}
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("/slow-reader")
	req.Header.SetHost("example.test")
	req.Header.Set("Shield-Generation", fmt.Sprint(b.m.View().Current.Generation()))
	payload := appendRequest(nil, req, 0)
	fasthttp.ReleaseRequest(req)
	go func() {
		var frames []byte
		for id := range uint32(n) {
			frames = appendFrameHeader(frames, frameRequest, id+1, uint32(len(payload)))
			frames = append(frames, payload...)
		}
		_, _ = conn.Write(frames)
	}()
	served := func() int {
		b.local.mu.Lock()
		defer b.local.mu.Unlock()
		return len(b.local.served)
	}
	// Wait until the owner stops serving.
	last := -1
	waitUntil(t, "the owner to stop", func() bool {
		cur := served()
		stable := cur == last && cur > 0
		last = cur
		time.Sleep(100 * time.Millisecond)
		return stable
	})
	// In flight (served, waiting for room in the queue), queued (4 MiB
	// and one answer), the write under way and what the in-memory pipe
	// holds (4 writes, each at most the queue): far below n.
	bound := muxMaxInflight + 7*(muxMaxQueued/size+1) // and one batch of margin
	if got := served(); got > bound || got >= n {
		t.Fatalf("owner served %d of %d requests to an edge reading nothing, want ≤ %d", got, n, bound)
	}
	t.Logf("served %d of %d before the edge read (bound %d, %d inline)", served(), n, bound, b.local.inline.Load())
	answered := 0
	buf := make([]byte, 0, size+1024)
	for answered < n {
		fh, p, err := readFrame(br, &hdr, buf, 1<<30)
		if err != nil {
			t.Fatalf("after %d answers: %v", answered, err)
		}
		buf = p
		if fh.typ != frameResponse {
			t.Fatalf("frame %+v", fh)
		}
		answered++
	}
	if inline && b.local.inline.Load() != n {
		t.Errorf("%d of %d served inline", b.local.inline.Load(), n)
	}
}

// TestMuxGracefulClose: an owner whose peer listener closes (shutdown)
// answers the requests it already read, then closes the connection; the
// edge stops using it.
func TestMuxGracefulClose(t *testing.T) {
	release := make(chan struct{})
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		l.before = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/slow" {
				<-release
			}
		}
	}
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	mc := a.waitMux(t, "b")
	const n = 5
	done := make(chan string, n)
	for range n {
		go func() { done <- fwdBody(t, a, "b", "/slow") }()
	}
	waitUntil(t, "requests in flight", func() bool {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		return len(mc.pending) == n
	})
	time.Sleep(20 * time.Millisecond) // read by the owner
	go func() { _ = b.srv.Shutdown() }()
	waitUntil(t, "the goodbye", func() bool { return !a.node.MuxOpen("b") })
	close(release)
	for range n {
		if got := <-done; got != "served by b /slow" {
			t.Errorf("in-flight request across the owner's shutdown: %q", got)
		}
	}
	waitUntil(t, "the connection closed", func() bool { return mc.closed.Load() })
	if got := a.counter(`shield_peer_requests_total{peer="b",outcome="error"}`); got != 0 {
		t.Errorf("%d peer errors", got)
	}
}

// TestMuxAnswerHeadSlots: an answer head decoded from a slot is the one a
// fresh decode gives, whether the slot held that head, another or none.
func TestMuxAnswerHeadSlots(t *testing.T) {
	hs := newAnswerHeads()
	head := func(status int, age string) []byte {
		var r fasthttp.Response
		httpx.SetDate(&r.Header, []byte("Tue, 01 Dec 2026 10:00:00 GMT"))
		r.SetStatusCode(status)
		r.Header.Set("Age", age)
		r.Header.Add("Vary", "A")
		_, h, err := splitResponse(appendResponse(nil, &r, []byte("body"), false))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	heads := [][]byte{head(200, "1"), head(200, "1"), head(200, "2"), head(404, "2"), head(200, "1")}
	for i, h := range heads {
		if i%2 == 1 {
			// h's slot holds the previous head: it answers only if equal.
			var prev fasthttp.Response
			if err := decodeResponseHead(heads[i-1], &prev); err != nil {
				t.Fatal(err)
			}
			s := &hs.slots[maphash.Bytes(hs.seed, h)%answerHeadSlots]
			prev.Header.CopyTo(&s.hdr)
			s.raw = append(s.raw[:0], heads[i-1]...)
		}
		var got, want fasthttp.Response
		if err := hs.decode(h, &got); err != nil {
			t.Fatal(i, err)
		}
		if err := decodeResponseHead(h, &want); err != nil {
			t.Fatal(i, err)
		}
		if got.Header.String() != want.Header.String() {
			t.Errorf("%d: head\n%q\nwant\n%q", i, got.Header.String(), want.Header.String())
		}
	}
}

// TestMuxRequestFieldSlots: a request whose fields come from a slot has
// its own method and URI, and exactly the fields it was sent with.
func TestMuxRequestFieldSlots(t *testing.T) {
	rf := newRequestFields()
	var last []byte
	for i, c := range []struct{ method, uri, host, tenant string }{
		{"GET", "/a", "h1", "t1"}, {"HEAD", "/b?x=1", "h1", "t1"}, {"GET", "/c", "h2", "t1"},
		{"GET", "/d", "h1", "t2"}, {"GET", "/a", "h1", "t1"},
	} {
		var src fasthttp.Request
		src.Header.SetMethod(c.method)
		src.SetRequestURI(c.uri)
		src.Header.SetHost(c.host)
		src.Header.Set("Shield-Tenant", c.tenant)
		payload := appendRequest(nil, &src, reqFlagHints)
		if i%2 == 1 {
			// The fields' slot holds the previous request's: they
			// answer only if equal.
			var prev fasthttp.Request
			_, _, _, fields, _ := splitRequest(payload)
			if _, err := decodeRequest(last, &prev); err != nil {
				t.Fatal(err)
			}
			_, _, _, prevFields, _ := splitRequest(last)
			s := &rf.slots[maphash.Bytes(rf.seed, fields)%requestFieldSlots]
			prev.Header.CopyTo(&s.hdr)
			s.raw = append(s.raw[:0], prevFields...)
		}
		last = payload
		var got fasthttp.Request
		flags, err := rf.decode(payload, &got)
		if err != nil || flags != reqFlagHints {
			t.Fatal(i, flags, err)
		}
		if got.Header.String() != src.Header.String() {
			t.Errorf("%d: request\n%q\nwant\n%q", i, got.Header.String(), src.Header.String())
		}
		if string(got.Header.Method()) != c.method || string(got.RequestURI()) != c.uri || string(got.Host()) != c.host {
			t.Errorf("%d: %s %s host %s", i, got.Header.Method(), got.RequestURI(), got.Host())
		}
	}
}
