package listener

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/shield-proxy/shield/proxy/rawio"
)

// Coarse deadlines, kept by the connection. With read, write and idle
// timeouts set, fasthttp reads the clock three times per keep-alive
// request (time.Now, about 60 ns each here) and moves the connection's
// deadlines as often: the idle time before the next request,
// read_timeout once its first byte is in, write_timeout before the
// answer. Each move is a runtime timer update under locks. On a plain
// connection deadlineConn keeps the three limits itself and fasthttp's
// are off (Public.Serve), for fewer clock reads and timer moves:
//
//   - the connection knows where it is from what passes through it: a
//     read after the answer was written starts the idle time; the first
//     byte of a request starts read_timeout, applied only if the request
//     needs another read (nearly every GET comes whole with its first
//     read: read_timeout is never armed for it, and its clock reading is
//     taken at that second read, microseconds late); the first write of
//     an answer starts write_timeout. A new connection's first request
//     has read_timeout from the accept, as fasthttp's. A "100 Continue"
//     written while the request is read does not end it: the body
//     follows under the request's read_timeout;
//   - a deadline is armed slack late, and an armed one that ends no
//     earlier than the one wanted and at most slack after it is left as
//     it is, so a busy connection moves a timer about once per slack
//     instead of per request.
//
// A limit so fires at most slack late, never early: each is counted from
// a reading of the monotonic clock taken no earlier than fasthttp's
// would be. slack is a sixteenth of the shortest timeout, at most a
// second (coarseSlack). A deadline set explicitly (SetReadDeadline,
// SetWriteDeadline, SetDeadline: a hijacked connection, a handler's own)
// is applied as given and the connection keeps no limits from then on.
//
// Only fasthttp's plain connections are wrapped: a TLS connection must
// stay visible to it as one (RequestCtx.IsTLS), so on a TLS listener
// fasthttp keeps its own timeouts, and HTTP/2 connections belong to
// net/http. The wrapper forwards io.ReaderFrom, so a file body still
// leaves by sendfile; fasthttp's single writev for an answer larger than
// its write buffer needs a *net.TCPConn, so the wrapper does that writev
// itself when the handler says such an answer is coming (Coalesce).
type deadlineConn struct {
	net.Conn
	lim limits
	// phase is where the connection is; since the clock reading its
	// limit runs from (0 while reading: from the next Read). readSet and
	// writeSet are the deadlines armed on Conn, as clock readings; 0:
	// none. Only the connection's serving goroutine uses them, as it is
	// the only one fasthttp reads, writes and sets deadlines from.
	phase             connPhase
	since             int64
	readSet, writeSet int64
	unmanaged         bool // a deadline was set explicitly: keep none

	// An answer of one block of memory larger than fasthttp's write
	// buffer (bufSize) leaves a *net.TCPConn in one writev; through
	// this wrapper fasthttp writes it as its buffer, full, then the rest.
	// Coalesce arms coalesce for such an answer: its first full buffer is
	// held and leaves with the write that follows, in one writev again.
	bufSize  int
	coalesce bool
	held     []byte

	// sf is the raw socket state (sendfile_linux.go), made at the first
	// read; noRaw: the connection has none (then Conn's calls are used).
	sf    *rawSocket
	noRaw bool

	// replay: bytes the sorting mux read before the connection came
	// here (server.h2c), read before the connection's own.
	replay []byte

	// watch tells when the socket turned readable (rawio.Watch), for the
	// read between requests; made at the first such read (a connection
	// that serves one request costs no registration), nil until then.
	// Close may run on another goroutine: it stops the watch it finds,
	// and one made while Close ran stops itself. drained: the
	// last read emptied the socket (it returned less than asked), the
	// condition for waiting on the watch (epoll edges announce only
	// bytes that come after it).
	watch   atomic.Pointer[rawio.Watch]
	noWatch bool        // the socket cannot be watched: read as before
	closed  atomic.Bool // Close began (for a watch made meanwhile)
	drained bool
}

// connPhase is what a connection is doing, for its limits.
type connPhase uint8

const (
	phaseReading connPhase = iota // a request: read_timeout
	phaseWriting                  // an answer: write_timeout
	phaseIdle                     // between requests: idle_timeout
)

// limits are a connection's timeouts and slack, in nanoseconds.
type limits struct{ read, write, idle, slack int64 }

func newLimits(read, write, idle, slack time.Duration) limits {
	return limits{read: int64(read), write: int64(write), idle: int64(idle), slack: int64(slack)}
}

// clockBase anchors clock: deadlines are clockBase.Add(reading), so
// they carry a monotonic time, which wall clock steps do not move.
var clockBase = time.Now()

// clock reads the monotonic clock: nanoseconds since clockBase, at
// least 1 (0 means "not read").
func clock() int64 { return max(int64(time.Since(clockBase)), 1) }

// at is the deadline for a clock reading.
func at(reading int64) time.Time { return clockBase.Add(time.Duration(reading)) }

// Coalesce tells c, if it is a connection with coarse deadlines, that
// the answer the handler leaves has a body of at least CoalesceMin bytes
// in memory (not a stream), so its first full buffer of bytes is surely
// followed by more: they are sent together. Anything else: no-op.
func Coalesce(c net.Conn) {
	if dc, ok := c.(*deadlineConn); ok {
		dc.coalesce = true
	}
}

// CoalesceMin is the body size from which Coalesce applies: fasthttp's
// default write buffer, which the public server keeps.
const CoalesceMin = 4096

// coarseSlack is how late a limit may fire: a sixteenth of the shortest
// timeout, at most a second; 0 (exact deadlines) if any timeout is unset.
func coarseSlack(timeouts ...time.Duration) time.Duration {
	slack := time.Second
	for _, t := range timeouts {
		if t <= 0 {
			return 0
		}
		slack = min(slack, t/16)
	}
	return slack
}

// coarseListener wraps the plain connections ln accepts in deadlineConn.
type coarseListener struct {
	net.Listener
	lim limits
}

func (l coarseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, isTLS := c.(interface{ ConnectionState() tls.ConnectionState }); isTLS {
		return c, nil
	}
	// The first request's read_timeout runs from the accept, as fasthttp's.
	dc := &deadlineConn{Conn: c, lim: l.lim, since: clock(), bufSize: CoalesceMin}
	if rc, ok := c.(*replayConn); ok {
		// Sorted by the mux (server.h2c): the bytes it read are replayed
		// here, then the connection itself is read, with raw calls.
		dc.Conn, dc.replay = rc.Conn, rc.pending
	}
	return dc, nil
}

// coarse wraps ln for fasthttp when slack allows coarse deadlines: its
// connections then keep the limits, and fasthttp must not (Public.Serve).
func coarse(ln net.Listener, lim limits) net.Listener {
	if lim.slack <= 0 {
		return ln
	}
	rawio.StartWatcher() // with the listener, not at its first connection
	return coarseListener{Listener: ln, lim: lim}
}

// covers reports whether the armed deadline set (a clock reading, 0:
// none) fires no earlier than want and at most slack after it.
func covers(set, want, slack int64) bool {
	return set != 0 && set >= want && set-want <= slack
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	c.coalesce = false
	if err := c.flush(); err != nil {
		return 0, err
	}
	if !c.unmanaged {
		if err := c.armRead(); err != nil {
			return 0, err
		}
	}
	if len(c.replay) == 0 && !c.noWatch {
		if c.phase == phaseIdle && c.drained && !c.unmanaged {
			// Between requests, the socket emptied by the last read:
			// read once it turns readable, not before (rawio.Watch says
			// why).
			w := c.watch.Load()
			if w == nil {
				w = c.watchReadable()
			}
			if w != nil {
				w.Wait(at(c.readSet))
			}
		} else if w := c.watch.Load(); w != nil {
			w.Reading()
		}
	}
	var n int
	var err error
	c.drained = false
	if len(c.replay) > 0 {
		n = copy(b, c.replay)
		c.replay = c.replay[n:]
	} else {
		var handled bool
		n, handled, err = c.readRaw(b)
		if !handled {
			n, err = c.Conn.Read(b)
		}
		// A read that returned less than it could have took all the
		// socket held: whatever comes next turns it readable again
		// (an edge). After a full read bytes may wait that no edge
		// will announce, so the next read must not wait for one.
		c.drained = handled && err == nil && n < len(b)
	}
	if n > 0 && c.phase == phaseIdle {
		c.phase, c.since = phaseReading, 0 // read_timeout from the next Read, if any
	}
	return n, err
}

// armRead makes sure the read deadline the phase wants is armed.
func (c *deadlineConn) armRead() error {
	limit := c.lim.read
	switch c.phase {
	case phaseWriting: // the answer is out: idle until the next request
		c.phase, c.since = phaseIdle, clock()
		limit = c.lim.idle
	case phaseIdle:
		limit = c.lim.idle
	default:
		if c.since == 0 { // the request's first byte came with the last read
			c.since = clock()
		}
	}
	want := c.since + limit
	if covers(c.readSet, want, c.lim.slack) {
		return nil
	}
	set := want + c.lim.slack
	if err := c.Conn.SetReadDeadline(at(set)); err != nil {
		return err
	}
	c.readSet = set
	return nil
}

// continue100 starts the interim answer fasthttp writes to a request
// with Expect: 100-continue before reading its body.
var continue100 = []byte("HTTP/1.1 100 ")

// armWrite makes sure the write deadline of the answer p begins or
// continues is armed.
func (c *deadlineConn) armWrite(p []byte) error {
	if c.unmanaged {
		return nil
	}
	want := c.since + c.lim.write
	if c.phase != phaseWriting {
		now := clock()
		want = now + c.lim.write
		if c.phase != phaseReading || !bytes.HasPrefix(p, continue100) {
			c.phase, c.since = phaseWriting, now
		}
	}
	if covers(c.writeSet, want, c.lim.slack) {
		return nil
	}
	set := want + c.lim.slack
	if err := c.Conn.SetWriteDeadline(at(set)); err != nil {
		return err
	}
	c.writeSet = set
	return nil
}

// SetReadDeadline, SetWriteDeadline and SetDeadline apply t as given;
// the connection keeps no limits of its own from then on.
func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.unmanaged = true
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.unmanaged = true
	return c.Conn.SetWriteDeadline(t)
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.unmanaged = true
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	if err := c.armWrite(p); err != nil {
		return 0, err
	}
	if len(c.held) > 0 {
		held := len(c.held)
		n, handled, err := c.writevRaw(c.held, p)
		if !handled {
			bufs := net.Buffers{c.held, p}
			var n64 int64
			n64, err = bufs.WriteTo(c.Conn) // writev on a *net.TCPConn
			n = int(n64)
		}
		c.held = c.held[:0]
		return max(n-held, 0), err
	}
	if c.coalesce {
		c.coalesce = false
		if len(p) >= c.bufSize {
			c.held = append(c.held[:0], p...)
			return len(p), nil
		}
	}
	if n, handled, err := c.writeRaw(p); handled {
		return n, err
	}
	return c.Conn.Write(p)
}

// flush sends held bytes: a safety net, as the write that follows them
// normally takes them along.
func (c *deadlineConn) flush() error {
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.held)
	c.held = c.held[:0]
	return err
}

func (c *deadlineConn) Close() error {
	ferr := c.flush()
	c.closed.Store(true)
	if w := c.watch.Load(); w != nil {
		w.Stop()
	}
	if err := c.Conn.Close(); err != nil {
		return err
	}
	return ferr
}

// ReadFrom keeps the connection's own io.ReaderFrom (sendfile) behind
// the wrapper, and sends a FileSection with sendfile at its offset
// (sendfile.go).
func (c *deadlineConn) ReadFrom(r io.Reader) (int64, error) {
	if err := c.armWrite(nil); err != nil {
		return 0, err
	}
	if err := c.flush(); err != nil {
		return 0, err
	}
	if n, handled, err := c.readFromSection(r); handled {
		return n, err
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
