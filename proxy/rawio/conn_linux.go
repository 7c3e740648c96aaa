package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Conn is a plain TCP connection whose Read and Write are raw system
// calls (Read, Write) made from its syscall.RawConn's callbacks, which
// wait for readiness in the network poller and within the connection's
// deadlines as net.Conn's own calls do; everything else (Close,
// deadlines, addresses) is the connection's own. Its callbacks are bound
// once (Wrap), so a Read or a Write allocates nothing. Reads and writes
// each hold their own lock: one of each may run at once, as on any
// net.Conn.
type Conn struct {
	net.Conn
	rc   syscall.RawConn
	r, w op
}

// op is the state of one direction's call, which its callback (fn: a
// method value bound once) reads and fills.
type op struct {
	mu    sync.Mutex
	fn    func(fd uintptr) bool
	buf   []byte
	n     int
	errno syscall.Errno
}

// Wrap returns c reading and writing with raw system calls when it is a
// plain TCP connection (*net.TCPConn), else c itself: a TLS connection,
// an in-memory one, a wrapper keep their own calls.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rcn := &Conn{Conn: c, rc: rc}
	rcn.r.fn, rcn.w.fn = rcn.r.readOnce, rcn.w.writeAll
	return rcn
}

// Read reads into b with one read(2) once the socket is readable: what
// came, io.EOF once the peer closed, or the error net.Conn's Read
// returns (a timeout past the read deadline, net.ErrClosed once closed).
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &c.r
	o.mu.Lock()
	o.buf, o.n, o.errno = b, 0, 0
	err := c.rc.Read(o.fn)
	n, errno := o.n, o.errno
	o.buf = nil
	o.mu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("read", err)
	case errno != 0:
		return n, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b with write(2) calls, waiting while the socket
// is not writable (within the write deadline).
func (c *Conn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &c.w
	o.mu.Lock()
	o.buf, o.n, o.errno = b, 0, 0
	err := c.rc.Write(o.fn)
	n, errno := o.n, o.errno
	o.buf = nil
	o.mu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError is err as net.Conn's Read and Write report it: RawConn's own
// error (a deadline, a closed connection) is a *net.OpError naming a
// "raw-read" or "raw-write" without the local address; it is given
// those of a read or a write.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op, oe.Source = op, c.LocalAddr()
		return oe
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// readOnce is the read callback: false asks to wait until readable.
func (o *op) readOnce(fd uintptr) bool {
	for {
		k, e := Read(fd, o.buf)
		switch e {
		case 0:
			o.n = k
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
}

// writeAll is the write callback: false asks to wait until writable.
func (o *op) writeAll(fd uintptr) bool {
	for o.n < len(o.buf) {
		k, e := Write(fd, o.buf[o.n:])
		switch e {
		case 0:
			if k == 0 {
				o.errno = syscall.EIO // a socket write never takes nothing
				return true
			}
			o.n += k
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}
