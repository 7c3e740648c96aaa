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
	if t.read.Swap(false) {
		t.requests.Add(1)
	}
	return t.Conn.Write(b)
}

func (t *trackedConn) Read(b []byte) (int, error) {
	t.read.Store(true)
	return t.Conn.Read(b)
}

func (t *trackedConn) LocalAddr() net.Addr { return &t.addr }

// reusedConn reports whether resp's last request went out on a
// connection that had carried an earlier request.
func reusedConn(resp *fasthttp.Response) bool {
	a, ok := resp.LocalAddr().(*trackedAddr)
	return ok && a.c.requests.Load() > 1
}
