package proxy

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
	addr     trackedAddr
	// Interim answers of the request in progress (earlyhints.go): only
	// the goroutine using the connection touches these.
	watch    interimWatch
	watching bool
	wbuf     []byte // the first write without its hints mark
}

// trackedAddr is a connection's local address plus the connection.
type trackedAddr struct {
	net.Addr
	c *trackedConn
}

func newTrackedConn(c net.Conn) *trackedConn {
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
	out, sink := takeHintsMark(b, t.wbuf)
	t.watching = sink != nil
	t.watch = interimWatch{sink: sink, send: sendHints, head: t.watch.head[:0]}
	if sink == nil && len(out) == len(b) {
		return t.Conn.Write(b)
	}
	t.wbuf = out[:0]
	if _, err := t.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (t *trackedConn) Read(b []byte) (int, error) {
	t.read.Store(true)
	n, err := t.Conn.Read(b)
	if t.watching && n > 0 {
		t.watching = t.watch.feed(b[:n])
	}
	return n, err
}

func (t *trackedConn) LocalAddr() net.Addr { return &t.addr }

// reusedConn reports whether resp's last request went out on a
// connection that had carried an earlier request.
func reusedConn(resp *fasthttp.Response) bool {
	a, ok := resp.LocalAddr().(*trackedAddr)
	return ok && a.c.requests.Load() > 1
}
