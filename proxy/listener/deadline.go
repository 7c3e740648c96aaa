package listener

import (
	"crypto/tls"
	"io"
	"net"
	"time"
)

// Coarse deadlines. With read, write and idle timeouts set, fasthttp
// moves a connection's deadlines three times per keep-alive request: the
// idle time before the next request, read_timeout once its first byte is
// in, write_timeout before the answer. Each move is a runtime timer
// update under locks (SetReadDeadline, SetWriteDeadline): about an eighth
// of the CPU a 1 KiB hit costs shield (issue #26). deadlineConn keeps the
// limits and moves fewer timers:
//
//   - a read deadline is applied when the connection is read, not when
//     fasthttp sets it: a request whose bytes all came with its first
//     read (nearly every GET) never arms read_timeout, and the idle
//     deadline armed for the next read is the only read timer;
//   - an armed deadline that ends no earlier than the one wanted and at
//     most slack after it is left as it is; a new one is armed slack
//     late, so a busy connection moves a timer about once per slack
//     instead of per request.
//
// A limit so fires at most slack late, never early; slack is a sixteenth
// of the shortest timeout, at most a second (coarseSlack). A deadline
// already within slack of now (one that stops a connection) is armed
// exactly. Only fasthttp's plain connections are wrapped: a TLS connection
// must stay visible to it as one (RequestCtx.IsTLS), and HTTP/2
// connections belong to net/http. The wrapper forwards io.ReaderFrom, so
// a file body still leaves by sendfile; fasthttp's single writev for an
// answer larger than its write buffer needs a *net.TCPConn, so the
// wrapper does that writev itself when the handler says such an answer
// is coming (Coalesce).
type deadlineConn struct {
	net.Conn
	slack time.Duration
	// readWant is the read deadline fasthttp set last; readSet and
	// writeSet are the deadlines armed on Conn, in Unix nanoseconds
	// (integers: compared on every request). Zero: none. Only the
	// connection's serving goroutine uses them, as it is the only one
	// fasthttp reads, writes and sets deadlines from.
	readWant          time.Time
	readSet, writeSet int64

	// An answer of one block of memory larger than fasthttp's write
	// buffer (bufSize) leaves a *net.TCPConn in one writev; through
	// this wrapper fasthttp writes it as its buffer, full, then the rest.
	// Coalesce arms coalesce for such an answer: its first full buffer is
	// held and leaves with the write that follows, in one writev again.
	bufSize  int
	coalesce bool
	held     []byte

	// sf sends file sections (sendfile_linux.go), made at the first.
	sf *sectionSender
}

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
	slack time.Duration
}

func (l coarseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, isTLS := c.(interface{ ConnectionState() tls.ConnectionState }); isTLS {
		return c, nil
	}
	return &deadlineConn{Conn: c, slack: l.slack, bufSize: CoalesceMin}, nil
}

// coarse wraps ln for fasthttp when slack allows coarse deadlines.
func coarse(ln net.Listener, slack time.Duration) net.Listener {
	if slack <= 0 {
		return ln
	}
	return coarseListener{Listener: ln, slack: slack}
}

// covers reports whether the armed deadline set (Unix nanoseconds, 0:
// none) fires no earlier than want and at most slack after it.
func covers(set int64, want time.Time, slack time.Duration) bool {
	if want.IsZero() || set == 0 {
		return want.IsZero() && set == 0
	}
	w := want.UnixNano()
	return set >= w && set-w <= int64(slack)
}

// unixNano is t in Unix nanoseconds, 0 for the zero time (none).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// arming is the deadline to arm for want: slack late, unless want is
// none or within slack of now.
func (c *deadlineConn) arming(want time.Time) time.Time {
	if want.IsZero() || time.Until(want) <= c.slack {
		return want
	}
	return want.Add(c.slack)
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	c.coalesce = false
	if err := c.flush(); err != nil {
		return 0, err
	}
	if !covers(c.readSet, c.readWant, c.slack) {
		set := c.arming(c.readWant)
		if err := c.Conn.SetReadDeadline(set); err != nil {
			return 0, err
		}
		c.readSet = unixNano(set)
	}
	return c.Conn.Read(b)
}

// SetReadDeadline takes effect at the next Read.
func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.readWant = t
	return nil
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	if covers(c.writeSet, t, c.slack) {
		return nil
	}
	set := c.arming(t)
	if err := c.Conn.SetWriteDeadline(set); err != nil {
		return err
	}
	c.writeSet = unixNano(set)
	return nil
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	if len(c.held) > 0 {
		bufs := net.Buffers{c.held, p}
		held := len(c.held)
		c.held = c.held[:0]
		n, err := bufs.WriteTo(c.Conn) // writev on a *net.TCPConn
		return max(int(n)-held, 0), err
	}
	if c.coalesce {
		c.coalesce = false
		if len(p) >= c.bufSize {
			c.held = append(c.held[:0], p...)
			return len(p), nil
		}
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
	if err := c.Conn.Close(); err != nil {
		return err
	}
	return ferr
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.readWant = t
	return c.SetWriteDeadline(t)
}

// ReadFrom keeps the connection's own io.ReaderFrom (sendfile) behind
// the wrapper, and sends a FileSection with sendfile at its offset
// (sendfile.go).
func (c *deadlineConn) ReadFrom(r io.Reader) (int64, error) {
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
