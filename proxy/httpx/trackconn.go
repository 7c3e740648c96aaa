package httpx

import (
	"net"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// trackedConn counts the requests sent on an origin connection, so that
// a failure can tell a reused keep-alive connection (which the origin may
// have closed while it sat idle: retry at once on a new one) from a new
// connection (a real failure). fasthttp does not say which it used, but
// it records the connection's LocalAddr in the Response before sending;
// trackedConn's LocalAddr carries a pointer back to it.
//
// A request starts with the first Write after a Read (or the first Write
// ever). One request uses a connection at a time, so the counters only
// race with a concurrent Close, which does not touch them.
type trackedConn struct {
	net.Conn
	requests atomic.Int32
	read     atomic.Bool // a Read happened since the last request started
	answered atomic.Bool // a byte of the answer to the last request was read
	addr     trackedAddr
	// Interim answers of the request in progress (earlyhints.go): only
	// the goroutine using the connection touches these.
	watch    interimWatch
	watching bool   // the answer's final status line is not read yet
	out      []byte // bytes of the final answer read with its interim heads, not yet handed on
	wbuf     []byte // the first write without its hints mark
}

// trackedAddr is a connection's local address plus the connection.
type trackedAddr struct {
	net.Addr
	c *trackedConn
}

// NewTrackedConn wraps c, a new connection to an origin or a peer, so
// that ReusedConn can tell its requests apart and the interim heads of
// its answers are watched (earlyhints.go).
func NewTrackedConn(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c}
	t.addr = trackedAddr{Addr: c.LocalAddr(), c: t}
	t.read.Store(true)
	return t
}

func (t *trackedConn) Write(b []byte) (int, error) {
	if !t.read.Swap(false) {
		return t.Conn.Write(b)
	}
	t.requests.Add(1)
	t.answered.Store(false)
	out, sink := takeHintsMark(b, t.wbuf)
	// Bytes left over from the last answer (an origin that sent more
	// than it announced) are handed on as they are: no watching then.
	t.watching = len(t.out) == 0
	t.watch.reset(sink)
	if sink.ctx == nil && len(out) == len(b) {
		return t.Conn.Write(b)
	}
	t.wbuf = out[:0]
	if _, err := t.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Read hands fasthttp the answer without its interim heads
// (earlyhints.go): while watching, it reads on until the final status
// line has begun.
func (t *trackedConn) Read(b []byte) (int, error) {
	t.read.Store(true)
	if len(t.out) > 0 {
		n := copy(b, t.out)
		t.out = t.out[n:]
		return n, nil
	}
	if !t.watching {
		return t.Conn.Read(b)
	}
	for {
		n, err := t.Conn.Read(b)
		if n > 0 {
			t.answered.Store(true)
			out, final, werr := t.watch.take(b[:n])
			if werr != nil {
				t.watching = false
				return 0, werr
			}
			if final {
				t.watching = false
				m := copy(b, out) // out may be b[:n] itself: copy is a no-op then
				if t.out = out[m:]; len(t.out) > 0 {
					return m, nil // err, if any, comes again on the next Read
				}
				return m, err
			}
		}
		if err != nil {
			// Ended inside an interim head or before a status line
			// could be told: hand on what there is; fasthttp reports it.
			t.watching = false
			if p := t.watch.pend; len(p) > 0 {
				m := copy(b, p)
				t.out = p[m:]
				return m, nil
			}
			return 0, err
		}
	}
}

func (t *trackedConn) LocalAddr() net.Addr { return &t.addr }

// ReusedConn reports whether resp's last request went out on a
// connection that had carried an earlier request, and got no byte of an
// answer on it: an origin that answered (interim heads past their bounds,
// say: fasthttp reports any error before the final answer's first byte
// as a closed connection) did not close it while idle.
func ReusedConn(resp *fasthttp.Response) bool {
	a, ok := resp.LocalAddr().(*trackedAddr)
	return ok && a.c.requests.Load() > 1 && !a.c.answered.Load()
}
