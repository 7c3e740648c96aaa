package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// HTTP/2 on the public listener. fasthttp speaks HTTP/1.x only, so the
// listener is shared: each new connection is classified once — by the
// protocol the TLS handshake negotiated (ALPN), or, with server.h2c, by
// whether it opens with the HTTP/2 connection preface — and handed either
// to the fasthttp server, as before, or to the standard library's HTTP/2
// server (net/http, which carries the fixes for the HTTP/2 attacks of
// recent years: rapid reset, CONTINUATION floods, HPACK bombs, settings
// and ping floods). Each HTTP/2 request is then copied into a
// fasthttp.RequestCtx and served by the same handler as HTTP/1.1, so no
// feature exists on one protocol only; the copy costs the HTTP/2 path
// allocations the HTTP/1.1 hit path does not have, and that path is
// untouched.

// Public is the public listener's servers: fasthttp for HTTP/1.x and,
// when server.http2 or server.h2c is on, an HTTP/2 server beside it.
type Public struct {
	// H1 serves HTTP/1.x (PublicServer).
	H1 *fasthttp.Server

	h2          *http.Server // nil: HTTP/2 off
	http2, h2c  bool
	readTimeout time.Duration
	logger      *slog.Logger

	mu  sync.Mutex
	mux *connMux // set by Serve when the listener is shared
}

// NewPublic builds the public listener's servers for s.
func (p *Proxy) NewPublic(s config.Server, logger *slog.Logger) *Public {
	pub := &Public{H1: p.PublicServer(s, logger), http2: s.HTTP2, h2c: s.H2C, readTimeout: s.ReadTimeout, logger: logger}
	if s.HTTP2 || s.H2C {
		pub.h2 = newH2Server(pub.H1.Handler, s, logger)
	}
	return pub
}

// newH2Server is the HTTP/2 server of the public listener, with its
// limits from s: the header list is bounded like HTTP/1.1's header block
// (max_header_size), timeouts are the listener's, the rest comes from
// server.http2_limits.
func newH2Server(h fasthttp.RequestHandler, s config.Server, logger *slog.Logger) *http.Server {
	var protos http.Protocols
	// HTTP/1 stays with fasthttp: this server only ever receives
	// connections already known to speak HTTP/2.
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	l := s.HTTP2Limits
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:   &h2Handler{h: h, maxBody: int64(s.MaxBodySize), logger: slogPrinter{logger}},
		Protocols: &protos,
		// The client's address, parsed once per connection.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, remoteAddrKey{}, c.RemoteAddr())
		},
		ReadTimeout:    s.ReadTimeout,
		WriteTimeout:   s.WriteTimeout,
		IdleTimeout:    s.IdleTimeout,
		MaxHeaderBytes: int(s.MaxHeaderSize),
		// OPTIONS * goes to shield's handler (400, as on HTTP/1.1), not to
		// net/http's built-in 200.
		DisableGeneralOptionsHandler: true,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          l.MaxConcurrentStreams,
			MaxReadFrameSize:              int(l.MaxFrameSize),
			MaxReceiveBufferPerStream:     int(l.StreamWindow),
			MaxReceiveBufferPerConnection: int(l.ConnectionWindow),
		},
		// The server's messages name protocol errors of clients (floods,
		// resets): debug level, like fasthttp's.
		ErrorLog: slog.NewLogLogger(logger.With("component", "http2").Handler(), slog.LevelDebug),
	}
}

// Serve serves ln until it is closed, over TLS when tc is set. With
// HTTP/2 off (or plain HTTP without h2c) fasthttp gets the listener
// directly, exactly as before HTTP/2 existed.
func (pub *Public) Serve(ln net.Listener, tc *tls.Config) error {
	shared := pub.h2 != nil && (tc != nil && pub.http2 || tc == nil && pub.h2c)
	if tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
		if shared {
			tc.NextProtos = []string{"h2", "http/1.1"}
		}
	}
	if !shared {
		if tc != nil {
			ln = tls.NewListener(ln, tc)
		}
		return pub.H1.Serve(ln)
	}
	m := newConnMux(ln, tc, pub.readTimeout, pub.logger)
	pub.mu.Lock()
	pub.mux = m
	pub.mu.Unlock()
	go m.run()
	go func() { _ = pub.h2.Serve(m.h2) }() // returns when the mux closes
	return pub.H1.Serve(m.h1)
}

// ShutdownWithContext stops accepting connections and waits for the
// requests in flight on both protocols (HTTP/2 clients get a GOAWAY), at
// most until ctx is done.
func (pub *Public) ShutdownWithContext(ctx context.Context) error {
	var h2err error
	var wg sync.WaitGroup
	if pub.h2 != nil {
		wg.Go(func() { h2err = pub.h2.Shutdown(ctx) })
	}
	err := pub.H1.ShutdownWithContext(ctx)
	wg.Wait()
	pub.mu.Lock()
	if pub.mux != nil {
		pub.mux.close()
	}
	pub.mu.Unlock()
	return errors.Join(err, h2err)
}

// Shutdown is ShutdownWithContext without a bound.
func (pub *Public) Shutdown() error { return pub.ShutdownWithContext(context.Background()) }

// h2Preface opens every HTTP/2 connection (RFC 9113 §3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// connMux accepts connections and sorts them onto two listeners, h1 for
// fasthttp and h2 for the HTTP/2 server. The TLS handshake or the look at
// the preface runs on a goroutine per connection, within read_timeout,
// so a slow client delays nobody else.
type connMux struct {
	ln      net.Listener
	tls     *tls.Config // nil: cleartext, sorted by the preface (h2c)
	timeout time.Duration
	logger  *slog.Logger
	h1, h2  *muxListener
	done    chan struct{}
	once    sync.Once
}

func newConnMux(ln net.Listener, tc *tls.Config, timeout time.Duration, logger *slog.Logger) *connMux {
	m := &connMux{ln: ln, tls: tc, timeout: timeout, logger: logger, done: make(chan struct{})}
	m.h1 = &muxListener{m: m, c: make(chan net.Conn)}
	m.h2 = &muxListener{m: m, c: make(chan net.Conn)}
	return m
}

func (m *connMux) close() {
	m.once.Do(func() {
		close(m.done)
		_ = m.ln.Close()
	})
}

// run accepts until the listener closes. A failed Accept that is not the
// end (out of file descriptors) is retried after a growing pause, as
// net/http and fasthttp do, instead of ending the listener.
func (m *connMux) run() {
	defer m.close()
	var pause time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			if m.logger != nil {
				m.logger.Warn("accept", "err", err, "retry_in", pause.String())
			}
			select {
			case <-time.After(pause):
			case <-m.done:
				return
			}
			continue
		}
		pause = 0
		go m.sort(c)
	}
}

// sort finds c's protocol and hands c to the server that speaks it.
func (m *connMux) sort(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(m.timeout))
	var out net.Conn
	h2 := false
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return
		}
		h2 = tc.ConnectionState().NegotiatedProtocol == "h2"
		out = tc
	} else {
		seen, isH2, err := readPreface(c)
		if err != nil && len(seen) == 0 {
			_ = c.Close()
			return
		}
		// A read error after some bytes goes to fasthttp with them,
		// which answers a partial HTTP/1 request as it always has.
		h2 = isH2
		out = &replayConn{Conn: c, pending: seen}
		if h2 {
			out = &bufferedConn{Conn: c, r: bufio.NewReaderSize(out, h2ReadBuffer)}
		}
	}
	_ = c.SetDeadline(time.Time{})
	dst := m.h1
	if h2 {
		dst = m.h2
	}
	select {
	case dst.c <- out:
	case <-m.done:
		_ = out.Close()
	}
}

// readPreface reads c until its bytes either differ from the HTTP/2
// preface or are all of it. An HTTP/1 request differs at its first byte,
// so only a client that is sending the preface is waited for.
func readPreface(c net.Conn) (seen []byte, isH2 bool, err error) {
	buf := make([]byte, 0, 512)
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		k := min(len(buf), len(h2Preface))
		if string(buf[:k]) != h2Preface[:k] {
			return buf, false, nil
		}
		if k == len(h2Preface) {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
}

// replayConn returns the bytes read to sort the connection before
// reading further.
type replayConn struct {
	net.Conn
	pending []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(b, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.Conn.Read(b)
}

// h2ReadBuffer is the read buffer of a cleartext HTTP/2 connection.
const h2ReadBuffer = 4 << 10

// bufferedConn reads c through a buffer. net/http's HTTP/2 server reads
// its connection unbuffered, a frame header then its payload: two read
// calls per frame, so two system calls per request on a cleartext
// connection (over TLS, crypto/tls buffers). Through this buffer one read
// takes every frame the client has sent, e.g. a hundred requests' HEADERS.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// muxListener is one side of a connMux.
type muxListener struct {
	m *connMux
	c chan net.Conn
}

func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

// Close closes the shared listener: both servers stop accepting.
func (l *muxListener) Close() error { l.m.close(); return nil }

func (l *muxListener) Addr() net.Addr { return l.m.ln.Addr() }

// h2Handler serves HTTP/2 requests with the fasthttp handler.
type h2Handler struct {
	h       fasthttp.RequestHandler
	maxBody int64
	logger  fasthttp.Logger
}

// remoteAddrKey holds a connection's client address in its requests'
// context (newH2Server's ConnContext).
type remoteAddrKey struct{}

// h2Request is what serving one HTTP/2 request takes besides net/http's
// own objects. It is pooled, as fasthttp.Server pools its RequestCtx: the
// response body buffer is kept with it (what the hit path writes into).
type h2Request struct {
	ctx  fasthttp.RequestCtx
	conn h2Conn
	tls  h2TLSConn
	buf  [8 << 10]byte // request body reads
	vbuf []byte        // response field values, gathered (writeH2Response)
}

var h2Requests = sync.Pool{New: func() any { return new(h2Request) }}

func (hh *h2Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := h2Requests.Get().(*h2Request)
	ctx := &q.ctx
	q.conn = h2Conn{w: w, remote: remoteAddr(r), local: localAddr(r), buf: q.conn.buf[:0]}
	var c net.Conn = &q.conn
	if r.TLS != nil {
		q.tls = h2TLSConn{h2Conn: &q.conn, state: r.TLS}
		c = &q.tls
	}
	ctx.Init2(c, hh.logger, false)
	ctx.Response.Header.SetNoDefaultContentType(true)
	if hh.copyRequest(ctx, r, q.buf[:]) {
		hh.h(ctx)
	}
	q.conn.finish()
	q.vbuf = writeH2Response(w, ctx, q.vbuf)
	if cap(q.vbuf) > 64<<10 {
		q.vbuf = nil // one huge answer does not stay in the pool
	}
	_ = ctx.Response.CloseBodyStream()
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
	q.conn.w, q.tls.state = nil, nil // nothing of this request stays reachable
	h2Requests.Put(q)
}

// copyRequest copies r into ctx.Request; false when r cannot be served
// (body over max_body_size, body not read), with the answer in ctx.
func (hh *h2Handler) copyRequest(ctx *fasthttp.RequestCtx, r *http.Request, buf []byte) bool {
	req := &ctx.Request
	req.Header.SetMethod(r.Method)
	req.SetRequestURI(r.RequestURI)
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	// :authority is the request's host (RFC 9113 §8.3.1); net/http has
	// put it, or Host when absent, in r.Host.
	req.Header.SetHost(r.Host)
	if r.ContentLength > hh.maxBody {
		requestError(ctx, fasthttp.ErrBodyTooLarge)
		return false
	}
	// ContentLength 0: the stream ended with its headers (or said
	// Content-Length: 0), there is nothing to read.
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		for {
			n, err := r.Body.Read(buf)
			req.AppendBody(buf[:n])
			if int64(len(req.Body())) > hh.maxBody {
				requestError(ctx, fasthttp.ErrBodyTooLarge)
				return false
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				// Reset by the client, or not sent within read_timeout:
				// answered like fasthttp answers a body it could not read.
				requestError(ctx, err)
				return false
			}
		}
	}
	if n := len(req.Body()); n > 0 {
		req.Header.SetContentLength(n)
	} else {
		req.Header.Del("Content-Length")
	}
	return true
}

// h2Skip are response fields HTTP/2 forbids (RFC 9113 §8.2.2) and the
// length, which writeH2Response sets itself.
var h2Skip = [][]byte{
	[]byte("Connection"), []byte("Keep-Alive"), []byte("Proxy-Connection"),
	[]byte("Transfer-Encoding"), []byte("Upgrade"), []byte("Content-Length"),
}

// h2BufferedBody is the body net/http's HTTP/2 server buffers whole
// (its handler write buffer, 4 KiB): when the handler returns with the
// body in that buffer, the server sends the Content-Length itself, from
// the buffer, so writeH2Response sets none — a string and a []string less
// per answer, and no Content-Length parsed back. Larger bodies are sent in
// chunks before the handler returns, so they get theirs from here.
const h2BufferedBody = 4 << 10

// writeH2Response writes ctx's answer to w. The header map is filled by
// direct assignment with canonical keys; all values share one string and
// one backing array (two allocations, whatever the number of fields),
// because net/http encodes the fields after the handler has returned,
// when nothing pooled may be referenced any more.
func writeH2Response(w http.ResponseWriter, ctx *fasthttp.RequestCtx, vbuf []byte) []byte {
	resp := &ctx.Response
	hdr := w.Header()
	clear(hdr) // a 103's Link fields
	n := 0
	vbuf = vbuf[:0]
	for k, v := range resp.Header.All() {
		if skipH2Field(k) {
			continue
		}
		n++
		vbuf = append(vbuf, v...)
	}
	all := string(vbuf)
	vals := make([]string, n)
	i, off := 0, 0
	for k, v := range resp.Header.All() {
		if skipH2Field(k) {
			continue
		}
		key, ok := h2Names[string(k)]
		if !ok {
			key = http.CanonicalHeaderKey(string(k))
		}
		vals[i] = all[off : off+len(v)]
		off += len(v)
		if prev, ok := hdr[key]; ok {
			hdr[key] = append(prev, vals[i])
		} else {
			hdr[key] = vals[i : i+1 : i+1]
		}
		i++
	}
	// Like the HTTP/1.1 listener: no Content-Type guessed. A stored
	// answer keeps its Date; one without gets the sending time, as
	// fasthttp gives shield's own answers (httpx.EnsureDate).
	if _, ok := hdr["Content-Type"]; !ok {
		hdr["Content-Type"] = nil
	}
	status := resp.StatusCode()
	head := ctx.IsHead() || resp.SkipBody
	noBody := status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified || status < 200
	if resp.IsBodyStream() {
		if cl := resp.Header.ContentLength(); cl >= 0 && !noBody {
			hdr["Content-Length"] = []string{strconv.Itoa(cl)}
		}
		w.WriteHeader(status)
		if !head && !noBody {
			_, _ = io.Copy(w, resp.BodyStream())
		}
		return vbuf
	}
	body := resp.Body()
	if !noBody && (head || len(body) > h2BufferedBody) {
		cl := len(body)
		if head && cl == 0 && resp.Header.ContentLength() >= 0 {
			cl = resp.Header.ContentLength()
		}
		hdr["Content-Length"] = []string{strconv.Itoa(cl)}
	}
	w.WriteHeader(status)
	if !head && !noBody && len(body) > 0 {
		_, _ = w.Write(body)
	}
	return vbuf
}

// h2Names are the canonical names of fields shield's answers carry
// (fasthttp normalises names the same way), so that writing them costs no
// string.
var h2Names = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept-Ranges", "Age", "Cache-Control", "Cache-Status", "Content-Encoding",
		"Content-Language", "Content-Range", "Content-Type", "Date", "Etag", "Expires", "Last-Modified",
		"Link", "Location", "Retry-After", "Server", "Set-Cookie", "Vary", "Via", "X-Content-Type-Options"} {
		m[k] = k
	}
	return m
}()

func skipH2Field(k []byte) bool {
	for _, s := range h2Skip {
		if bytes.EqualFold(k, s) {
			return true
		}
	}
	return false
}

// h2Conn is the connection a RequestCtx of an HTTP/2 request sees: the
// stream's addresses, and a Write that turns the 103 heads
// RequestCtx.EarlyHints writes into 103 answers on the stream.
type h2Conn struct {
	w             http.ResponseWriter
	remote, local net.Addr

	mu   sync.Mutex
	done bool   // the final answer is being written: no more 103s
	buf  []byte // an interim head not yet complete
}

// h2TLSConn is an h2Conn over TLS: RequestCtx.IsTLS and
// TLSConnectionState see the connection's state.
type h2TLSConn struct {
	*h2Conn
	state *tls.ConnectionState
}

func (c *h2TLSConn) Handshake() error                     { return nil }
func (c *h2TLSConn) ConnectionState() tls.ConnectionState { return *c.state }

// Write takes interim heads ("HTTP/1.1 103 Early Hints\r\nLink: …\r\n\r\n")
// and sends each as a 103 with its Link fields. Nothing else writes to a
// RequestCtx's connection outside fasthttp.Server.
func (c *h2Conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return len(b), nil
	}
	c.buf = append(c.buf, b...)
	for {
		i := bytes.Index(c.buf, []byte("\r\n\r\n"))
		if i < 0 {
			break
		}
		c.interim(c.buf[:i])
		c.buf = c.buf[i+4:]
	}
	if len(c.buf) > httpx.MaxInterimHead {
		c.buf = c.buf[:0]
	}
	return len(b), nil
}

// interim sends head, a 103's status line and fields, as a 103.
func (c *h2Conn) interim(head []byte) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 103")) {
		return
	}
	hdr := c.w.Header()
	n := 0
	for len(rest) > 0 {
		var f []byte
		f, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		k, v, ok := bytes.Cut(f, []byte(":"))
		if ok && bytes.EqualFold(k, httpx.HLink) {
			hdr.Add("Link", string(bytes.TrimSpace(v)))
			n++
		}
	}
	if n > 0 {
		c.w.WriteHeader(http.StatusEarlyHints)
		hdr.Del("Link")
	}
}

// finish ends the interim answers: the handler has returned.
func (c *h2Conn) finish() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}

func (c *h2Conn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *h2Conn) Close() error                     { return nil }
func (c *h2Conn) LocalAddr() net.Addr              { return c.local }
func (c *h2Conn) RemoteAddr() net.Addr             { return c.remote }
func (c *h2Conn) SetDeadline(time.Time) error      { return nil }
func (c *h2Conn) SetReadDeadline(time.Time) error  { return nil }
func (c *h2Conn) SetWriteDeadline(time.Time) error { return nil }

// remoteAddr is the client's address (X-Forwarded-For, tenant
// identification, allow-lists): the connection's, else net/http's
// RemoteAddr parsed.
func remoteAddr(r *http.Request) net.Addr {
	if a, ok := r.Context().Value(remoteAddrKey{}).(net.Addr); ok {
		return a
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return &net.TCPAddr{}
	}
	return net.TCPAddrFromAddrPort(ap)
}

func localAddr(r *http.Request) net.Addr {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a
	}
	return &net.TCPAddr{}
}
