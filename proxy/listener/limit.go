package listener

import (
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

// Limit bounds the public listener's open connections
// (server.max_connections). Every connection costs memory whatever it
// carries — a goroutine and its buffers for HTTP/1.1, Go's server state
// for HTTP/2, a TLS session — so a client that opens connections and
// sends nothing, or reads nothing, could otherwise grow the process
// until it dies. Past the limit a new connection is refused at once:
// on a plain listener it is answered `503 Service Unavailable` with
// `Connection: close` and `Retry-After: 1` (what a load balancer in front
// retries elsewhere), on a TLS listener it is closed before any
// handshake; either way it is counted (Refused) and logged at most once
// per refusalLogEvery. The count is of connections, not requests, and
// is taken below TLS and protocol sorting, so HTTP/1.1 and HTTP/2 share it.
type Limit struct {
	max     atomic.Int64 // moved by a reload (SetMax)
	open    atomic.Int64
	refused atomic.Uint64
	logged  atomic.Int64 // unix nanoseconds of the last refusal logged
	logger  *slog.Logger
}

// refusalLogEvery spaces the warnings about refused connections: a flood
// of them is one line per interval, with the count so far.
const refusalLogEvery = 10 * time.Second

// refusedAnswer is what a plain connection over the limit gets, written
// before anything is read from it (a client that has not finished its
// request still reads the answer, as with any early response).
var refusedAnswer = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n\r\nconnection limit reached\r\n")

// refusedWriteTimeout bounds writing refusedAnswer: it fits any socket's
// buffer, so it only waits on a peer that vanished.
const refusedWriteTimeout = time.Second

// NewLimit is a limit of n open connections (at least 1).
func NewLimit(n int, logger *slog.Logger) *Limit {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Limit{logger: logger}
	l.SetMax(n)
	return l
}

// SetMax moves the limit to n (at least 1), as a reload does: lowered
// below the connections open, it closes none of them and refuses new
// ones until they are fewer.
func (l *Limit) SetMax(n int) { l.max.Store(int64(max(1, n))) }

// Open is the number of connections open now.
func (l *Limit) Open() int64 { return l.open.Load() }

// Refused is the number of connections refused so far.
func (l *Limit) Refused() uint64 { return l.refused.Load() }

// Max is the limit.
func (l *Limit) Max() int64 { return l.max.Load() }

// listen wraps ln: its connections count against l until closed, and
// those over the limit are refused (answered when plain is true).
func (l *Limit) listen(ln net.Listener, plain bool) net.Listener {
	return &limitListener{Listener: ln, l: l, plain: plain}
}

type limitListener struct {
	net.Listener
	l     *Limit
	plain bool
}

// Accept returns the next connection the limit admits; those it refuses
// are answered and closed here, and Accept goes on to the next.
func (ll *limitListener) Accept() (net.Conn, error) {
	l := ll.l
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max.Load() {
			return l.track(c), nil
		}
		l.open.Add(-1)
		l.refuse(c, ll.plain)
	}
}

// refuse answers (plain) and closes c, counts it and logs now and then.
func (l *Limit) refuse(c net.Conn, plain bool) {
	n := l.refused.Add(1)
	if plain {
		_ = c.SetWriteDeadline(time.Now().Add(refusedWriteTimeout))
		_, _ = c.Write(refusedAnswer)
	}
	_ = c.Close()
	now := time.Now().UnixNano()
	last := l.logged.Load()
	if now-last >= int64(refusalLogEvery) && l.logged.CompareAndSwap(last, now) {
		l.logger.Warn("connection refused: server.max_connections reached",
			"max_connections", l.Max(), "refused_total", n, "remote", c.RemoteAddr().String())
	}
}

// track returns c counted until its first Close. A TCP connection comes
// back as a countedTCP, which proxy/rawio still reads and writes with
// raw calls (rawio.TCPWrapper); anything else as a countedConn.
func (l *Limit) track(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		return &countedTCP{TCPConn: tc, place: place{l: l}}
	}
	return &countedConn{Conn: c, place: place{l: l}}
}

// place is an admitted connection's place under its limit, given back
// once however often the connection is closed.
type place struct {
	l        *Limit
	released atomic.Bool
}

func (p *place) release() {
	if p.released.CompareAndSwap(false, true) {
		p.l.open.Add(-1)
	}
}

// countedTCP is an admitted TCP connection: its methods are the
// connection's (SyscallConn included, for sendfile and raw calls), its
// Close also gives its place back.
type countedTCP struct {
	*net.TCPConn
	place
}

func (c *countedTCP) Close() error {
	c.release()
	return c.TCPConn.Close()
}

// TCP is the connection counted (rawio.TCPWrapper).
func (c *countedTCP) TCP() *net.TCPConn { return c.TCPConn }

// countedConn is an admitted connection of another kind (tests' pipes).
type countedConn struct {
	net.Conn
	place
}

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}
