package listener

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/valyala/fasthttp"
)

// h2Handler serves HTTP/2 requests with the fasthttp handler.
type h2Handler struct {
	h       fasthttp.RequestHandler
	onError func(*fasthttp.RequestCtx, error) // nil: a bare 400
	maxBody int64
	logger  fasthttp.Logger
}

// connInfoKey holds a connection's *connInfo in its requests' context
// (newH2Server's ConnContext).
type connInfoKey struct{}

// connInfo is what a request needs of its connection.
type connInfo struct {
	remote net.Addr
	tls    *tls.ConnectionState // nil: cleartext, or a connection Go saw as TLS
}

// h2Request is what serving one HTTP/2 request takes besides net/http's
// own objects. It is pooled, as fasthttp.Server pools its RequestCtx: the
// response body buffer is kept with it (what the hit path writes into).
// It is held for as long as the stream's answer is being sent, so what
// only some requests need (a buffer to read a request body through) is
// not part of it.
type h2Request struct {
	ctx  fasthttp.RequestCtx
	conn h2Conn
	tls  h2TLSConn
	vbuf []byte // response field values, gathered (writeH2Response)
}

var h2Requests = sync.Pool{New: func() any { return new(h2Request) }}

func (hh *h2Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	growStack()
	q := h2Requests.Get().(*h2Request)
	ctx := &q.ctx
	info, _ := r.Context().Value(connInfoKey{}).(*connInfo)
	q.conn = h2Conn{w: w, remote: remoteAddr(r, info), local: localAddr(r), buf: q.conn.buf[:0]}
	var c net.Conn = &q.conn
	state := r.TLS
	if state == nil && info != nil {
		state = info.tls
	}
	if state != nil {
		q.tls = h2TLSConn{h2Conn: &q.conn, state: state}
		c = &q.tls
	}
	ctx.Init2(c, hh.logger, false)
	ctx.Response.Header.SetNoDefaultContentType(true)
	if hh.copyRequest(ctx, r) {
		hh.h(ctx)
	}
	q.conn.finish()
	var complete bool
	q.vbuf, complete = writeH2Response(w, ctx, q.vbuf)
	if cap(q.vbuf) > 64<<10 {
		q.vbuf = nil // one huge answer does not stay in the pool
	}
	_ = ctx.Response.CloseBodyStream()
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
	q.conn.w, q.tls.state = nil, nil // nothing of this request stays reachable
	h2Requests.Put(q)
	if !complete {
		// A body stream that failed after its Content-Length went out (a
		// cache piece evicted meanwhile): reset the stream, as HTTP/1.1
		// closes the connection, so that the client sees a truncated
		// answer, never a short one ended as complete.
		panic(http.ErrAbortHandler)
	}
}

// h2StackFrame is the frame growStack reserves: the stack grows once
// to 16 KiB, enough for a request served through the fasthttp handler
// (a cache hit, HPACK and header copies grew it no further in
// bench/profile.sh h2).
const h2StackFrame = 8 << 10

// growStack grows the calling goroutine's stack once, while it is
// shallow, to what serving a request needs. net/http runs every HTTP/2
// request on a new goroutine, whose small stack otherwise doubles two
// or three times on the way down into the handler, each time copying
// and adjusting every frame above: that was 16 % of shield's CPU under
// h2load (bench/profile.sh h2), 8 % with one growth here.
//
// The frame is reserved, never written: the array lives in a branch
// never taken (growNever), so nothing is zeroed, yet the compiler must
// size the frame for it, and the stack check on entry grows the stack.
//
//go:noinline
func growStack() {
	if growNever {
		var pad [h2StackFrame]byte
		touch(pad[:])
	}
}

// growNever is false; the compiler cannot know it.
var growNever = false

// touch keeps growStack's frame from being optimised away.
//
//go:noinline
func touch(b []byte) { b[len(b)-1] = 0 }

// copyRequest copies r into ctx.Request; false when r cannot be served
// (body over max_body_size, body not read), with the answer in ctx.
func (hh *h2Handler) copyRequest(ctx *fasthttp.RequestCtx, r *http.Request) bool {
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
		hh.fail(ctx, fasthttp.ErrBodyTooLarge)
		return false
	}
	// ContentLength 0: the stream ended with its headers (or said
	// Content-Length: 0), there is nothing to read.
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		bp := h2CopyBufs.Get().(*[]byte)
		defer h2CopyBufs.Put(bp)
		buf := *bp
		for {
			n, err := r.Body.Read(buf)
			req.AppendBody(buf[:n])
			if int64(len(req.Body())) > hh.maxBody {
				hh.fail(ctx, fasthttp.ErrBodyTooLarge)
				return false
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				// Reset by the client, or not sent within read_timeout:
				// answered like fasthttp answers a body it could not read.
				hh.fail(ctx, err)
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
// when nothing pooled may be referenced any more. complete is false when
// a body stream ended early (failed, or short of its length).
func writeH2Response(w http.ResponseWriter, ctx *fasthttp.RequestCtx, vbuf []byte) (_ []byte, complete bool) {
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
		cl := resp.Header.ContentLength()
		if cl >= 0 && !noBody {
			hdr["Content-Length"] = []string{strconv.Itoa(cl)}
		}
		w.WriteHeader(status)
		if !head && !noBody {
			n, err := copyBody(w, resp.BodyStream())
			return vbuf, err == nil && (cl < 0 || n == int64(cl))
		}
		return vbuf, true
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
	return vbuf, true
}

// piecesWriter is a body stream that writes itself a piece at a time
// from a buffer of its own (cache.PieceReader).
type piecesWriter interface {
	WritePieces(w io.Writer) (int64, error)
}

// h2CopyBufs are copyBody's buffers, and copyRequest's for a request
// body.
var h2CopyBufs = sync.Pool{New: func() any {
	b := make([]byte, h2CopyBuf)
	return &b
}}

// h2CopyBuf is the size of h2CopyBufs: a frame's worth (the default
// maximum frame size).
const h2CopyBuf = 16 << 10

// copyBody copies a body stream to an HTTP/2 answer a piece at a time
// (a memory tier stream: its WritePieces) or through a pooled buffer,
// never by the stream's WriteTo: a stream blocked mid-answer by a client
// that does not read (flow control, a full connection) holds one piece
// or this buffer, not a batch buffer (256 KiB for a memory tier stream),
// and up to a hundred streams of one connection can be blocked so.
// io.Copy would also allocate 32 KiB per answer for a stream without
// WriteTo (a disk hit).
func copyBody(w io.Writer, r io.Reader) (int64, error) {
	if pw, ok := r.(piecesWriter); ok {
		return pw.WritePieces(w)
	}
	bp := h2CopyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(w, struct{ io.Reader }{r}, *bp)
	h2CopyBufs.Put(bp)
	return n, err
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
func remoteAddr(r *http.Request, info *connInfo) net.Addr {
	if info != nil && info.remote != nil {
		return info.remote
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

// fail answers a request the HTTP/2 side could not take in, as the
// HTTP/1.x server's ErrorHandler would.
func (hh *h2Handler) fail(ctx *fasthttp.RequestCtx, err error) {
	if hh.onError != nil {
		hh.onError(ctx, err)
		return
	}
	ctx.Error("bad request\n", fasthttp.StatusBadRequest)
}
