package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
)

// The edge's side of the multiplexed transport (mux.go): one persistent
// connection per peer, dialled in the background on first use (requests
// go over HTTP meanwhile), redialled once it breaks. A peer that answers
// the preface as HTTP (an older release) is remembered for
// muxRefusedFor and reached over HTTP until then, or until it leaves the
// view and comes back (rejoined: an upgraded node restarts).

// muxRefusedFor is how long a peer that refused the transport is not
// asked again; muxRedialAfter spaces failed dials.
const (
	muxRefusedFor  = time.Minute
	muxRedialAfter = time.Second
)

var (
	errMuxTimeout = errors.New("cluster: mux request timed out")
	errMuxRefused = errors.New("cluster: peer refused the mux transport")
	errMuxFailed  = errors.New("cluster: owner could not answer over mux")
	errMuxGoAway  = errors.New("cluster: owner closing, request not read")
)

// muxClient is one peer's multiplexed transport.
type muxClient struct {
	c    *Node
	addr string
	dial func(addr string) (net.Conn, error)
	cur  atomic.Pointer[muxConn]

	mu        sync.Mutex
	dialing   bool
	notBefore int64 // unix ns: no dial before (refused, or a failed dial)
	conns     map[*muxConn]struct{}
}

func newMuxClient(c *Node, addr string, dial func(addr string) (net.Conn, error)) *muxClient {
	return &muxClient{c: c, addr: addr, dial: dial, conns: map[*muxConn]struct{}{}}
}

// conn returns the connection to send on, nil when there is none yet
// (one is dialled in the background) or the peer does not speak the
// transport.
func (m *muxClient) conn() *muxConn {
	if mc := m.cur.Load(); mc != nil && !mc.closed.Load() {
		return mc
	}
	now := time.Now().UnixNano()
	m.mu.Lock()
	if !m.dialing && now >= m.notBefore && (m.c.env.Ctx == nil || m.c.env.Ctx.Err() == nil) {
		m.dialing = true
		go m.connect()
	}
	m.mu.Unlock()
	return nil
}

// connect dials the peer, sends the preface and the hello and waits for
// the owner's answer.
func (m *muxClient) connect() {
	mc, err := m.open()
	m.mu.Lock()
	m.dialing = false
	switch {
	case errors.Is(err, errMuxRefused):
		m.notBefore = time.Now().Add(muxRefusedFor).UnixNano()
	case err != nil:
		m.notBefore = time.Now().Add(muxRedialAfter).UnixNano()
	}
	if mc != nil {
		m.conns[mc] = struct{}{}
		m.cur.Store(mc) // closed meanwhile: fail removes it, conn redials
	}
	m.mu.Unlock()
	if mc != nil && mc.closed.Load() {
		mc.cl.cur.CompareAndSwap(mc, nil)
		m.mu.Lock()
		delete(m.conns, mc)
		m.mu.Unlock()
	}
	if err != nil {
		m.c.logger.Debug("peer mux connection not opened, using HTTP", "peer", m.addr, "err", err)
	}
}

// rejoined lets the next request dial at once: the peer came back into
// the view, perhaps on a release that speaks the transport now.
func (m *muxClient) rejoined() {
	m.mu.Lock()
	m.notBefore = 0
	m.mu.Unlock()
}

func (m *muxClient) open() (*muxConn, error) {
	conn, err := m.dial(m.addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	_ = conn.SetDeadline(time.Now().Add(muxHelloTimeout))
	hello := append([]byte(muxPreface), appendFrameHeader(nil, frameHello, 0, uint32(len(m.c.secret)))...)
	if _, err := conn.Write(append(hello, m.c.secret...)); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	br := bufio.NewReaderSize(conn, 32<<10)
	if b, err := br.Peek(5); err == nil && string(b) == "HTTP/" {
		_ = conn.Close()
		return nil, errMuxRefused // an HTTP server: an older release
	}
	var hdr [frameHeaderLen]byte
	h, payload, err := readFrame(br, &hdr, nil, 64)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: %v", errMuxRefused, err)
	}
	if h.typ != frameHelloOK || len(payload) != 4 {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: frame %d", errMuxRefused, h.typ)
	}
	_ = conn.SetDeadline(time.Time{})
	mc := &muxConn{cl: m, conn: conn, br: br,
		max: int(min(binary.BigEndian.Uint32(payload), muxMaxInflight)), pending: map[uint32]*muxCall{}}
	mc.w = newMuxWriter(conn, writeTimeout(m.c.timeout), mc.fail)
	go mc.w.run()
	go mc.read()
	go mc.sweep(sweepEvery(m.c.timeout))
	if ctx := m.c.env.Ctx; ctx != nil {
		stop := context.AfterFunc(ctx, func() { mc.fail(errMuxClosed) })
		mc.mu.Lock()
		mc.stop = stop
		mc.mu.Unlock()
		if mc.closed.Load() {
			stop()
		}
	}
	return mc, nil
}

// MuxOpen reports whether forwarded requests to peer go over a
// multiplexed connection now (cluster.transport: mux, and one is open).
func (c *Node) MuxOpen(peer string) bool {
	pc := c.Peer(peer)
	return pc != nil && pc.mux != nil && pc.mux.cur.Load() != nil
}

// closeAll closes every connection (in-flight requests fail and are
// served locally).
func (m *muxClient) closeAll() {
	m.mu.Lock()
	conns := make([]*muxConn, 0, len(m.conns))
	for mc := range m.conns {
		conns = append(conns, mc)
	}
	m.mu.Unlock()
	for _, mc := range conns {
		mc.fail(errMuxClosed)
	}
}

// muxConn is one multiplexed connection of an edge.
type muxConn struct {
	cl     *muxClient
	conn   net.Conn
	br     *bufio.Reader
	w      *muxWriter
	max    int
	closed atomic.Bool

	mu        sync.Mutex
	stop      func() bool // ends the AfterFunc closing it with the node
	pending   map[uint32]*muxCall
	nextID    uint32
	goingAway bool // the owner said goodbye: nothing more is sent
}

// muxCall is one request waiting for its answer: pooled, with its
// channel and answer buffer. It stays in its connection's pending map
// until its final message is sent (by the reader, the sweep or a
// failure); its fields are guarded by muxConn.mu.
type muxCall struct {
	id        uint32
	ch        chan muxMsg // the reader's messages; one slot kept for the final one
	deadline  int64       // unix ns: the sweep fails it after
	buf       []byte      // the answer's payload
	taken     bool        // the reader is reading its answer into buf
	abandoned bool        // timed out while taken: the reader drops it, nobody pools it
}

// muxMsg is what the reader delivers to a call.
type muxMsg struct {
	typ     byte
	payload []byte
	err     error
}

const muxCallSlots = 4

var muxCallPool = sync.Pool{New: func() any {
	return &muxCall{ch: make(chan muxMsg, muxCallSlots)}
}}

// fail closes the connection: every request in flight fails at once.
func (mc *muxConn) fail(err error) {
	if mc.closed.Swap(true) {
		return
	}
	mc.cl.cur.CompareAndSwap(mc, nil)
	mc.w.close()
	_ = mc.conn.Close()
	mc.mu.Lock()
	stop := mc.stop
	for id, call := range mc.pending {
		if !call.taken { // a taken one is the reader's: it fails it
			delete(mc.pending, id)
			call.ch <- muxMsg{err: err}
		}
	}
	mc.mu.Unlock()
	if stop != nil {
		stop()
	}
	m := mc.cl
	m.mu.Lock()
	delete(m.conns, mc)
	m.mu.Unlock()
}

// read delivers the owner's frames to their calls until the connection
// breaks.
func (mc *muxConn) read() {
	var hdr [frameHeaderLen]byte
	limit := muxMaxHead + mc.cl.c.opts.MaxBody
	if mc.cl.c.opts.MaxBody <= 0 {
		limit = 1<<31 - 1
	}
	for {
		if _, err := io.ReadFull(mc.br, hdr[:]); err != nil {
			mc.fail(fmt.Errorf("%w: %v", errMuxClosed, err))
			return
		}
		h, err := parseFrameHeader(hdr[:], 1<<32-1)
		if err != nil {
			mc.fail(err)
			return
		}
		switch h.typ {
		case frameResponse, frameError, frameEntry:
			mc.mu.Lock()
			call := mc.pending[h.id]
			if call != nil {
				call.taken = true
			}
			mc.mu.Unlock()
			msg := muxMsg{typ: h.typ}
			if call == nil || int64(h.length) > int64(limit) {
				if _, err := mc.br.Discard(int(h.length)); err != nil {
					mc.fail(fmt.Errorf("%w: %v", errMuxClosed, err))
					return
				}
				msg.err = fasthttp.ErrBodyTooLarge
			} else {
				if cap(call.buf) < int(h.length) {
					call.buf = make([]byte, h.length)
				}
				call.buf = call.buf[:h.length]
				if _, err := io.ReadFull(mc.br, call.buf); err != nil {
					mc.deliver(call, muxMsg{err: fmt.Errorf("%w: %v", errMuxClosed, err)})
					mc.fail(errMuxClosed)
					return
				}
				msg.payload = call.buf
			}
			if call != nil {
				mc.deliver(call, msg)
			}
		case frameHints:
			if h.length > httpx.MaxInterimHead {
				mc.fail(errFrameTooLarge)
				return
			}
			b := make([]byte, h.length)
			if _, err := io.ReadFull(mc.br, b); err != nil {
				mc.fail(fmt.Errorf("%w: %v", errMuxClosed, err))
				return
			}
			mc.mu.Lock()
			if call := mc.pending[h.id]; call != nil && len(call.ch) < cap(call.ch)-1 {
				call.ch <- muxMsg{typ: frameHints, payload: b}
			}
			mc.mu.Unlock()
		case frameGoAway:
			var last [4]byte
			if h.length != 4 {
				mc.fail(errBadFrame)
				return
			}
			if _, err := io.ReadFull(mc.br, last[:]); err != nil {
				mc.fail(fmt.Errorf("%w: %v", errMuxClosed, err))
				return
			}
			mc.goAway(binary.BigEndian.Uint32(last[:]))
		default:
			mc.fail(fmt.Errorf("%w: frame type %d from the owner", errBadFrame, h.typ))
			return
		}
	}
}

// goAway handles the owner's goodbye: nothing more is sent on the
// connection (the next request dials anew, or goes over HTTP), and the
// requests the owner did not read (ids after last) go over HTTP now; the
// others are answered before the owner closes.
func (mc *muxConn) goAway(last uint32) {
	mc.cl.cur.CompareAndSwap(mc, nil)
	mc.mu.Lock()
	mc.goingAway = true
	for id, call := range mc.pending {
		if id > last && !call.taken {
			delete(mc.pending, id)
			call.ch <- muxMsg{err: errMuxGoAway}
		}
	}
	mc.mu.Unlock()
}

// deliver sends a call the reader took its final message, unless the
// sweep timed it out meanwhile.
func (mc *muxConn) deliver(call *muxCall, msg muxMsg) {
	mc.mu.Lock()
	if !call.abandoned {
		delete(mc.pending, call.id)
		call.ch <- msg
	}
	mc.mu.Unlock()
}

// sweepEvery is how often a connection looks for requests past their
// timeout: a request fails at most that much after it.
func sweepEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/8, 5*time.Millisecond), 250*time.Millisecond)
}

// sweep fails the requests past their timeout, every period, until the
// connection closes: one ticker per connection instead of a timer per
// request.
func (mc *muxConn) sweep(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-mc.w.done:
			return
		case now := <-t.C:
			mc.expire(now.UnixNano())
		}
	}
}

// expire fails the requests whose deadline is before now. One whose
// answer the reader is reading is abandoned: the reader drops it.
func (mc *muxConn) expire(now int64) {
	mc.mu.Lock()
	for id, call := range mc.pending {
		if call.deadline < now {
			delete(mc.pending, id)
			call.abandoned = call.taken
			call.ch <- muxMsg{err: errMuxTimeout}
		}
	}
	mc.mu.Unlock()
}

// do sends the request mr encodes over the connection and waits for the
// answer, at most timeout, relaying the owner's 103 Early Hints to
// client (at most maxHints). sent is false when the request was not sent
// (the connection is full or closed): the caller sends it over HTTP.
func (mc *muxConn) do(client *fasthttp.RequestCtx, mr *MuxRequest, resp *fasthttp.Response, maxHints int, timeout time.Duration, ent *EntryAnswer) (sent bool, err error) {
	var flags byte
	if client != nil && maxHints > 0 && client.Request.Header.IsHTTP11() {
		flags |= reqFlagHints
	}
	if ent != nil && ent.Want {
		flags |= reqFlagEntry
	}
	q, ok := mc.w.begin()
	if !ok {
		return false, nil
	}
	// The id is taken inside the writer's lock: ids go on the wire in
	// order, so the owner's goodbye can say which requests it read.
	call := muxCallPool.Get().(*muxCall)
	mc.mu.Lock()
	if len(mc.pending) >= mc.max || mc.closed.Load() || mc.goingAway {
		mc.mu.Unlock()
		mc.w.end(q)
		muxCallPool.Put(call)
		return false, nil
	}
	mc.nextID++
	call.id, call.taken, call.abandoned = mc.nextID, false, false
	call.deadline = time.Now().Add(timeout).UnixNano()
	mc.pending[call.id] = call
	mc.mu.Unlock()
	start := len(q)
	q = appendFrameHeader(q, frameRequest, call.id, uint32(len(mr.b)))
	q = append(q, mr.b...)
	q[start+frameHeaderLen] = flags
	mc.w.end(q)

	hints := 0
	for {
		m := <-call.ch
		switch {
		case m.typ == frameHints:
			if hints < maxHints {
				hints++
				sendHints(client, m.payload)
			}
			continue
		case errors.Is(m.err, errMuxGoAway):
			releaseCall(call)
			return false, nil // the owner never read it: over HTTP
		case errors.Is(m.err, errMuxTimeout):
			mc.mu.Lock()
			abandoned := call.abandoned // the reader still has it: not pooled
			mc.mu.Unlock()
			if !abandoned {
				releaseCall(call)
			}
			return true, errMuxTimeout
		}
		err = mc.finish(call, m, mr.head, resp, ent)
		releaseCall(call)
		return true, err
	}
}

func releaseCall(call *muxCall) {
	for len(call.ch) > 0 {
		<-call.ch
	}
	muxCallPool.Put(call)
}

// finish turns the owner's final message into resp, or an entry
// answer into ent.
func (mc *muxConn) finish(call *muxCall, m muxMsg, isHead bool, resp *fasthttp.Response, ent *EntryAnswer) error {
	if m.err != nil {
		return m.err
	}
	if m.typ == frameEntry {
		if ent == nil || !ent.Want {
			return fmt.Errorf("cluster: mux answer: %w: an entry not asked for", errBadFrame)
		}
		now, entry, err := splitEntry(m.payload)
		if err != nil {
			return fmt.Errorf("cluster: mux answer: %w", err)
		}
		ent.Buf = append(ent.Buf[:0], entry...)
		ent.OwnerNow, ent.Got = now, true
		return nil
	}
	if m.typ == frameError {
		if len(m.payload) == 1 && m.payload[0] == errCodeTooLarge {
			return fasthttp.ErrBodyTooLarge
		}
		return errMuxFailed
	}
	body, head, err := splitResponse(m.payload)
	if err == nil {
		err = mc.cl.c.heads.decode(head, resp)
	}
	if err != nil {
		return fmt.Errorf("cluster: mux answer: %w", err)
	}
	if isHead {
		resp.SkipBody = true
		return nil
	}
	// Copied, not swapped in: fasthttp's body pool drops a buffer whose
	// capacity outgrew its length (the payload's holds the head too), so
	// handing the payload over would cost an allocation per request.
	resp.SetBody(body)
	return nil
}

// sendHints sends the Link fields of a 103 head to client as its own
// 103 (as the HTTP path's connection wrapper does).
func sendHints(client *fasthttp.RequestCtx, head []byte) {
	h := &client.Response.Header
	n := 0
	for line := range bytes.SplitSeq(head, []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), httpx.HLink) {
			h.AddBytesKV(httpx.HLink, bytes.TrimSpace(v))
			n++
		}
	}
	if n > 0 {
		_ = client.EarlyHints()
		h.DelBytes(httpx.HLink)
	}
}
