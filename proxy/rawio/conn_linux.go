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

// op is one direction's call: its state and its callback (fn: a method
// value of the Call bound once).
type op struct {
	mu sync.Mutex
	fn func(fd uintptr) bool
	Call
}

// Call is the state of one raw read or write that a syscall.RawConn
// callback (ReadOnce, WriteAll, WritevAll) fills: bind the method value
// once and keep the Call, so a call allocates nothing. Set Buf (or Vec)
// and zero N and Errno before each call.
type Call struct {
	Buf   []byte    // what to read into or write
	Vec   [2][]byte // what WritevAll writes: Vec[0] then Vec[1]
	N     int       // bytes read or written
	Errno syscall.Errno
}

// Wrap returns c reading and writing with raw system calls when it is a
// plain TCP connection (*net.TCPConn, or a TCPWrapper), else c itself: a
// TLS connection, an in-memory one, another wrapper keep their own calls.
// A TCPWrapper's reads and writes go to its TCP connection's socket; c
// itself is kept for everything else (Close, addresses, deadlines).
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		w, isWrapper := c.(TCPWrapper)
		if !isWrapper {
			return c
		}
		tc = w.TCP()
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rcn := &Conn{Conn: c, rc: rc}
	rcn.r.fn, rcn.w.fn = rcn.r.ReadOnce, rcn.w.WriteAll
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
	n, errno, err := o.DoRead(c.rc, o.fn, b)
	o.mu.Unlock()
	if err := Err(c, "read", errno, err); err != nil {
		return n, err
	}
	if n == 0 {
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
	n, errno, err := o.DoWrite(c.rc, o.fn, b)
	o.mu.Unlock()
	return n, Err(c, "write", errno, err)
}

// Err is the error net.Conn's Read or Write returns for a raw call's
// outcome on conn (op "read", "write" or "writev"): nil when errno and
// err are; RawConn's own error (a deadline, a closed connection), a
// *net.OpError naming a "raw-read" or "raw-write" without the local
// address, given those of op; errno as a *net.OpError.
func Err(conn net.Conn, op string, errno syscall.Errno, err error) error {
	if err == nil && errno == 0 {
		return nil
	}
	if err == nil {
		err = os.NewSyscallError(op, errno)
	} else if oe, ok := err.(*net.OpError); ok {
		oe.Op, oe.Source = op, conn.LocalAddr()
		return oe
	}
	return &net.OpError{Op: op, Net: "tcp", Source: conn.LocalAddr(), Addr: conn.RemoteAddr(), Err: err}
}

// DoRead makes one read into b on rc with read, the Call's ReadOnce
// bound once: the bytes read, the read's errno (0: none) and RawConn's
// own error.
func (c *Call) DoRead(rc syscall.RawConn, read func(uintptr) bool, b []byte) (int, syscall.Errno, error) {
	c.Buf, c.N, c.Errno = b, 0, 0
	err := rc.Read(read)
	c.Buf = nil
	return c.N, c.Errno, err
}

// DoWrite writes all of b on rc with write, the Call's WriteAll bound
// once; as DoRead.
func (c *Call) DoWrite(rc syscall.RawConn, write func(uintptr) bool, b []byte) (int, syscall.Errno, error) {
	c.Buf, c.N, c.Errno = b, 0, 0
	err := rc.Write(write)
	c.Buf = nil
	return c.N, c.Errno, err
}

// DoWritev writes all of a then b on rc with writev, the Call's
// WritevAll bound once (only where WritevOK); as DoRead.
func (c *Call) DoWritev(rc syscall.RawConn, writev func(uintptr) bool, a, b []byte) (int, syscall.Errno, error) {
	c.Vec, c.N, c.Errno = [2][]byte{a, b}, 0, 0
	err := rc.Write(writev)
	c.Vec = [2][]byte{}
	return c.N, c.Errno, err
}

// ReadOnce is a read callback: one read(2) into Buf; false asks to
// wait until readable.
func (c *Call) ReadOnce(fd uintptr) bool {
	for {
		k, e := Read(fd, c.Buf)
		switch e {
		case 0:
			c.N = k
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.Errno = e
			return true
		}
	}
}

// WriteAll is a write callback: write(2) calls until all of Buf is
// written (N counts across waits); false asks to wait until writable.
func (c *Call) WriteAll(fd uintptr) bool {
	for c.N < len(c.Buf) {
		k, e := Write(fd, c.Buf[c.N:])
		if !c.wrote(k, e) {
			return false
		}
		if c.Errno != 0 {
			return true
		}
	}
	return true
}

// WritevAll is a write callback: writev(2) calls until all of Vec[0]
// then Vec[1] is written; false asks to wait until writable. Only where
// WritevOK.
func (c *Call) WritevAll(fd uintptr) bool {
	for {
		a, b := c.Vec[0], c.Vec[1]
		if c.N < len(a) {
			a = a[c.N:]
		} else {
			a, b = nil, b[c.N-len(a):]
		}
		if len(a)+len(b) == 0 {
			return true
		}
		k, e := Writev(fd, a, b)
		if !c.wrote(k, e) {
			return false
		}
		if c.Errno != 0 {
			return true
		}
	}
}

// wrote counts a write's k bytes or records its error; false when the
// socket is full (wait until writable).
func (c *Call) wrote(k int, e syscall.Errno) bool {
	switch e {
	case 0:
		if k == 0 {
			c.Errno = syscall.EIO // a socket write never takes nothing
		}
		c.N += k
	case syscall.EINTR:
	case syscall.EAGAIN:
		return false
	default:
		c.Errno = e
	}
	return true
}
