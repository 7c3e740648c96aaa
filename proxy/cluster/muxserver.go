package cluster

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
	"github.com/shield-proxy/shield/proxy/rawio"
)

// The owner's side of the multiplexed transport (mux.go): the peer
// listener sorts its connections by their first byte, serves the
// multiplexed ones here and hands every other to the HTTP server.

// muxHelloTimeout bounds the first byte and the hello of a connection.
const muxHelloTimeout = 5 * time.Second

// Listener wraps the peer listener ln: a connection that opens with the
// multiplexed transport's preface is served by the node, every other is
// returned by Accept for the HTTP server, so both protocols share the
// port (an edge on an older release keeps sending HTTP). Closing it
// closes ln and every multiplexed connection.
func (c *Node) Listener(ln net.Listener) net.Listener {
	l := &peerListener{ln: ln, c: c, conns: make(chan net.Conn), done: make(chan struct{}), open: map[*muxServer]struct{}{}}
	go l.run()
	return l
}

// peerListener is what Listener returns.
type peerListener struct {
	ln    net.Listener
	c     *Node
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	open map[*muxServer]struct{}
}

func (l *peerListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *peerListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		_ = l.ln.Close()
		l.mu.Lock()
		for s := range l.open {
			go s.drain()
		}
		l.mu.Unlock()
	})
	return nil
}

func (l *peerListener) Addr() net.Addr { return l.ln.Addr() }

// run accepts until the listener closes; a failed Accept that is not the
// end is retried after a growing pause (as proxy/listener's does).
func (l *peerListener) run() {
	defer l.Close()
	var pause time.Duration
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			l.c.logger.Warn("peer accept", "err", err, "retry_in", pause.String())
			select {
			case <-time.After(pause):
			case <-l.done:
				return
			}
			continue
		}
		pause = 0
		go l.sort(conn)
	}
}

// sort reads conn's first byte (after the TLS handshake, on a TLS
// listener) on its own goroutine, within muxHelloTimeout, and serves
// conn by the protocol it selects. A plain TCP connection reads and
// writes with raw system calls from here on, multiplexed or HTTP
// (proxy/rawio: the runtime's sysmon stays asleep); a TLS connection
// already runs over one (rawio.Listener under the TLS listener).
func (l *peerListener) sort(conn net.Conn) {
	conn = rawio.Wrap(conn)
	_ = conn.SetReadDeadline(time.Now().Add(muxHelloTimeout))
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		_ = conn.Close()
		return
	}
	if first[0] == muxPreface[0] {
		l.serveMux(conn)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var out net.Conn = &replayConn{Conn: conn, b: first[0], has: true}
	if tc, ok := conn.(*tls.Conn); ok {
		out = &tlsReplayConn{Conn: tc, b: first[0], has: true}
	}
	select {
	case l.conns <- out:
	case <-l.done:
		_ = conn.Close()
	}
}

// replayConn returns the byte read to sort the connection first.
type replayConn struct {
	net.Conn
	b   byte
	has bool
}

func (r *replayConn) Read(p []byte) (int, error) {
	if r.has && len(p) > 0 {
		p[0], r.has = r.b, false
		return 1, nil
	}
	return r.Conn.Read(p)
}

// tlsReplayConn is a replayConn over TLS: fasthttp sees the connection's
// TLS state (RequestCtx.IsTLS).
type tlsReplayConn struct {
	*tls.Conn
	b   byte
	has bool
}

func (r *tlsReplayConn) Read(p []byte) (int, error) {
	if r.has && len(p) > 0 {
		p[0], r.has = r.b, false
		return 1, nil
	}
	return r.Conn.Read(p)
}

// muxServer is one multiplexed connection on the owner.
type muxServer struct {
	c    *Node
	conn net.Conn
	br   *bufio.Reader
	w    *muxWriter
	sem  chan struct{} // one per request in flight
	work chan *muxTask // idle workers take tasks here
	done chan struct{}
	once sync.Once
	log  fasthttp.Logger // the RequestCtx's

	draining atomic.Bool   // the listener closed: read no more, answer what was read
	lastID   atomic.Uint32 // the last request id read
}

// serveMux checks conn's preface and hello, then serves its requests
// until it breaks or the listener closes.
func (l *peerListener) serveMux(conn net.Conn) {
	c := l.c
	br := bufio.NewReaderSize(conn, 16<<10)
	var pre [len(muxPreface) - 1]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil || string(pre[:]) != muxPreface[1:] {
		_ = conn.Close()
		return
	}
	var hdr [frameHeaderLen]byte
	h, secret, err := readFrame(br, &hdr, nil, 4096)
	if err != nil || h.typ != frameHello {
		_ = conn.Close()
		return
	}
	// The hello is the connection's authentication: the secret, as the
	// HTTP path's Shield-Auth, and the caller's address, as its
	// allow-list (checked again per request: membership changes).
	if subtle.ConstantTimeCompare(secret, c.secret) != 1 || !c.allowedAddr(conn.RemoteAddr()) {
		c.muxRefused.Inc()
		_ = conn.SetWriteDeadline(time.Now().Add(muxHelloTimeout))
		_, _ = conn.Write(appendFrameHeader(nil, frameError, 0, 1))
		_, _ = conn.Write([]byte{errCodeForbidden})
		_ = conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	s := c.newMuxServer(conn, br)
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		_ = conn.Close()
		return
	default:
	}
	l.open[s] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.open, s)
		l.mu.Unlock()
	}()
	var ok [4]byte
	binary.BigEndian.PutUint32(ok[:], muxMaxInflight)
	go s.w.run()
	s.w.send(frameHelloOK, 0, ok[:])
	s.read()
	s.finish()
}

// newMuxServer serves conn, whose requests are read from br (its writer
// runs once started: go s.w.run()).
func (c *Node) newMuxServer(conn net.Conn, br *bufio.Reader) *muxServer {
	s := &muxServer{c: c, conn: conn, br: br,
		sem: make(chan struct{}, muxMaxInflight), work: make(chan *muxTask), done: make(chan struct{}),
		log: httpx.SlogPrinter{L: c.logger}}
	s.w = newMuxWriter(conn, writeTimeout(c.timeout), func(error) { s.close() })
	return s
}

// drain stops the connection gracefully: its reader stops at once
// (finish then answers what it read, says goodbye and closes).
func (s *muxServer) drain() {
	s.draining.Store(true)
	_ = s.conn.SetReadDeadline(time.Now())
}

// finish closes the connection once its reader stopped. When draining,
// it first tells the edge the last request it read (the edge sends the
// others over HTTP), and waits, at most a peer timeout, for the requests
// in flight to be answered and written.
func (s *muxServer) finish() {
	if s.draining.Load() {
		var last [4]byte
		binary.BigEndian.PutUint32(last[:], s.lastID.Load())
		s.w.send(frameGoAway, 0, last[:])
		deadline := time.Now().Add(writeTimeout(s.c.timeout))
		for (len(s.sem) > 0 || !s.w.flushed()) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	s.close()
}

// writeTimeout bounds one write of a connection: an edge that reads
// nothing for that long is gone.
func writeTimeout(peerTimeout time.Duration) time.Duration {
	return max(peerTimeout, 10*time.Second)
}

// allowedAddr reports whether addr's IP is a peer's.
func (c *Node) allowedAddr(addr net.Addr) bool {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		return false
	}
	a, ok := netip.AddrFromSlice(ip)
	return ok && c.peers.Load().allowed[a.Unmap().String()]
}

func (s *muxServer) close() {
	s.once.Do(func() {
		close(s.done)
		s.w.close()
		_ = s.conn.Close()
	})
}

// read reads request frames and serves them. A request whose answer is
// at hand (Local.ServePeerHit: a fresh hit from memory) is served here,
// inline, its answer held in the writer's queue; every other is handed
// to a worker, so that one waiting for its origin never holds up the
// connection's other requests. The answers held are written at once
// when no further whole request is buffered (before the reader could
// wait), so that a batch of requests read together is answered with one
// write and no goroutine hand-off. At most muxMaxInflight requests are
// with workers: beyond that it stops reading, so an edge cannot make the
// owner hold more.
func (s *muxServer) read() {
	defer s.w.flush()
	var hdr [frameHeaderLen]byte
	for {
		if !s.frameBuffered() {
			s.w.flush()
		}
		t := muxTaskPool.Get().(*muxTask)
		h, buf, err := readFrame(s.br, &hdr, t.buf, muxMaxRequest)
		t.buf = buf
		if err != nil || h.typ != frameRequest {
			muxTaskPool.Put(t)
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.c.logger.Debug("peer mux connection", "err", err)
			}
			return
		}
		t.s, t.id = s, h.id
		s.lastID.Store(h.id)
		if t.serveInline() {
			continue
		}
		if !s.toWorker(t) {
			return
		}
	}
}

// frameBuffered reports whether a whole frame is buffered: reading it
// will not wait.
func (s *muxServer) frameBuffered() bool {
	n := s.br.Buffered()
	if n < frameHeaderLen {
		return false
	}
	b, _ := s.br.Peek(frameHeaderLen)
	return uint64(n-frameHeaderLen) >= uint64(binary.BigEndian.Uint32(b[5:9]))
}

// toWorker hands t to a worker once fewer than muxMaxInflight are at
// work (the answers held are written before waiting); false when the
// connection closed meanwhile.
func (s *muxServer) toWorker(t *muxTask) bool {
	select {
	case s.sem <- struct{}{}:
	default:
		s.w.flush()
		select {
		case s.sem <- struct{}{}:
		case <-s.done:
			t.s = nil
			muxTaskPool.Put(t)
			return false
		}
	}
	select {
	case s.work <- t:
	default:
		go s.worker(t)
	}
	return true
}

// muxWorkerIdle is how long a worker waits for its next request.
const muxWorkerIdle = 10 * time.Second

// worker serves t, then the tasks it is handed until it idles out or
// the connection closes.
func (s *muxServer) worker(t *muxTask) {
	idle := time.NewTimer(muxWorkerIdle)
	defer idle.Stop()
	for {
		t.serve()
		<-s.sem
		idle.Reset(muxWorkerIdle)
		select {
		case t = <-s.work:
		case <-idle.C:
			return
		case <-s.done:
			return
		}
	}
}

// muxTask is one request on an owner's multiplexed connection: its
// RequestCtx, reset and reused (nothing of it is kept past the handler).
type muxTask struct {
	ctx   fasthttp.RequestCtx
	conn  muxTaskConn
	s     *muxServer
	id    uint32
	buf   []byte // the request frame's payload
	hints bool
	// entry: the edge takes an entry answer (reqFlagEntry); answered:
	// the handler sent one (AnswerEntry), its response is not sent.
	entry, answered bool
	// inline: served by the connection's reader, its frames held (end).
	inline bool
}

var muxTaskPool = sync.Pool{New: func() any {
	t := &muxTask{}
	t.conn.t = t
	return t
}}

// muxTaskConn is the connection a multiplexed request's RequestCtx sees:
// the real one's addresses, and a Write that sends the 103 heads
// RequestCtx.EarlyHints writes to the edge as hint frames.
type muxTaskConn struct {
	net.Conn
	t   *muxTask
	buf []byte
}

func (c *muxTaskConn) Write(b []byte) (int, error) {
	t := c.t
	if !t.hints {
		return len(b), nil
	}
	c.buf = append(c.buf, b...)
	if bytes.HasSuffix(c.buf, []byte("\r\n\r\n")) {
		t.send(frameHints, c.buf)
		c.buf = c.buf[:0]
	} else if len(c.buf) > httpx.MaxInterimHead {
		c.buf = c.buf[:0]
	}
	return len(b), nil
}

func (c *muxTaskConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *muxTaskConn) Close() error                     { return nil }
func (c *muxTaskConn) SetDeadline(time.Time) error      { return nil }
func (c *muxTaskConn) SetReadDeadline(time.Time) error  { return nil }
func (c *muxTaskConn) SetWriteDeadline(time.Time) error { return nil }

// end stores the queue the writer's begin returned, with the task's
// frames appended: held unwritten when the reader serves it (the reader
// flushes), else written as any sender's.
func (t *muxTask) end(q []byte) {
	if t.inline {
		t.s.w.hold(q)
	} else {
		t.s.w.end(q)
	}
}

// send queues one frame of the task's (end).
func (t *muxTask) send(typ byte, payload []byte) {
	q, ok := t.s.w.begin()
	if !ok {
		return
	}
	q = appendFrameHeader(q, typ, t.id, uint32(len(payload)))
	t.end(append(q, payload...))
}

// start readies the task's RequestCtx and decodes its request into it;
// false (an error frame sent) when the frame does not decode.
func (t *muxTask) start() bool {
	s := t.s
	ctx := &t.ctx
	t.conn.Conn = s.conn
	t.conn.buf = t.conn.buf[:0]
	ctx.Init2(&t.conn, s.log, false)
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
	flags, err := s.c.fields.decode(t.buf, &ctx.Request)
	t.hints = flags&reqFlagHints != 0
	t.entry, t.answered = flags&reqFlagEntry != 0, false
	if err != nil {
		t.send(frameError, []byte{errCodeFailed})
		return false
	}
	return true
}

// reset clears what serving the task left in it.
func (t *muxTask) reset() {
	t.hints, t.entry, t.answered = false, false, false
	t.conn.Conn = nil
	ctx := &t.ctx
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
}

// serve serves the task's request and queues its answer, then returns
// the task to its pool.
func (t *muxTask) serve() {
	if t.start() {
		t.s.c.serveMuxRequest(&t.ctx, false)
		if !t.answered {
			t.s.answer(t, &t.ctx)
		}
	}
	t.reset()
	t.s = nil
	muxTaskPool.Put(t)
}

// serveInline serves the task's request on the connection's reader when
// its answer is at hand (serveMuxRequest inline), its frames held, and
// returns the task to its pool. Otherwise it reports false, having sent
// nothing: a worker serves the task, decoding its request again.
func (t *muxTask) serveInline() bool {
	t.inline = true
	served := true
	if t.start() {
		served = t.s.c.serveMuxRequest(&t.ctx, true)
		if served && !t.answered {
			t.s.answer(t, &t.ctx)
		}
	}
	t.inline = false
	t.reset()
	if served {
		t.s = nil
		muxTaskPool.Put(t)
	}
	return served
}

// serveMuxRequest serves one forwarded request as PeerHandler serves a
// client's: the caller's address (the secret was the hello's), then the
// generation (421 with ours), then Local.ServePeer — or, inline, only
// when Local.ServePeerHit has the answer at hand: it reports false
// otherwise, having answered nothing. An answer without Date is dated
// when it is framed (appendResponse). It never reaches the peer
// protocol's endpoints (purges, hand-offs): those stay on HTTP.
func (c *Node) serveMuxRequest(ctx *fasthttp.RequestCtx, inline bool) bool {
	var ipBuf [64]byte
	if !c.peers.Load().allowed[string(appendRemoteIP(ipBuf[:0], ctx))] {
		c.forbidden.Inc()
		ctx.SetStatusCode(fasthttp.StatusForbidden)
		ctx.Response.Header.SetBytesKV(hShieldGeneration, []byte("0"))
		ctx.SetBodyString("forbidden\n")
		return true
	}
	v := c.m.View()
	if !c.acceptsGeneration(v, ctx.Request.Header.PeekBytes(hShieldGeneration), ctx.Time()) {
		c.misdirected.Inc()
		ctx.SetStatusCode(fasthttp.StatusMisdirectedRequest)
		var num [20]byte
		ctx.Response.Header.SetBytesKV(hShieldGeneration, strconv.AppendUint(num[:0], v.Current.Generation(), 10))
		ctx.SetBodyString("misdirected: generation mismatch\n")
		return true
	}
	if inline {
		return c.local.ServePeerHit(ctx)
	}
	c.local.ServePeer(ctx)
	return true
}

// answer queues ctx's answer to t's request. A streamed body is read
// here, up to MaxBody: a larger one is refused (the edge serves the
// request itself, as when the HTTP path's body is over its limit).
func (s *muxServer) answer(t *muxTask, ctx *fasthttp.RequestCtx) {
	resp := &ctx.Response
	var body []byte
	if resp.IsBodyStream() {
		bp := payloadPool.Get().(*[]byte)
		defer payloadPool.Put(bp)
		b, err := readLimited((*bp)[:0], resp.BodyStream(), s.c.opts.MaxBody)
		*bp = b
		_ = resp.CloseBodyStream()
		if err != nil {
			code := errCodeFailed
			if errors.Is(err, errFrameTooLarge) {
				code = errCodeTooLarge
			}
			t.send(frameError, []byte{code})
			return
		}
		body = b
	} else {
		body = resp.Body()
	}
	if s.c.opts.MaxBody > 0 && len(body) > s.c.opts.MaxBody {
		t.send(frameError, []byte{errCodeTooLarge})
		return
	}
	q, ok := s.w.begin()
	if !ok {
		return
	}
	start := len(q)
	q = appendFrameHeader(q, frameResponse, t.id, 0)
	q = appendResponse(q, resp, body, ctx.IsHead())
	binary.BigEndian.PutUint32(q[start+5:start+9], uint32(len(q)-start-frameHeaderLen))
	t.end(q)
}

// readLimited appends r's bytes to dst, failing with errFrameTooLarge
// past limit (0: none).
func readLimited(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if limit > 0 && len(dst) > limit {
			return dst, errFrameTooLarge
		}
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}
