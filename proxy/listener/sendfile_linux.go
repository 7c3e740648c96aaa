package listener

import (
	"io"
	"os"
	"runtime"
	"syscall"

	"github.com/shield-proxy/shield/proxy/rawio"
)

// rawSocket is a connection's raw socket state, made at its first
// read and kept: its raw connection and callbacks are bound once, so a
// read, a write or a section sent costs no allocation.
//
// Its reads, writes and sendfile calls of at most rawio.Max bytes are
// raw system calls (proxy/rawio: no runtime entersyscall/exitsyscall) made from
// RawConn callbacks, which wait for readiness in the network poller and
// within the connection's deadlines as net.Conn's own calls do. The
// socket is non-blocking, so each returns at once. The runtime's
// entersyscall wakes its monitor thread (sysmon) whenever every P was
// idle and resets its polling interval to 20 µs, and a P seen in one
// system call across two of its ticks is handed to another thread: a
// proxy is often all idle between requests, so ordinary calls had
// sysmon wake about a thousand times a second under load and Ps move
// between threads; raw calls leave it asleep (docs/architecture.md §9).
// A connection whose Conn is not a syscall.Conn uses its own calls (the
// sorting mux's replaying connection is unwrapped: coarseListener).
type rawSocket struct {
	rc                syscall.RawConn
	send, read, write func(uintptr) bool
	writev            func(uintptr) bool
	s                 sectionSend
	c                 rawio.Call
}

// raw returns c's raw socket state, nil if its connection has no
// descriptor (then its own calls are used).
func (c *deadlineConn) raw() *rawSocket {
	if c.sf != nil || c.noRaw {
		return c.sf
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		c.noRaw = true
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		c.noRaw = true
		return nil
	}
	sf := &rawSocket{rc: rc}
	sf.send, sf.read, sf.write, sf.writev = sf.s.send, sf.c.ReadOnce, sf.c.WriteAll, sf.c.WritevAll
	c.sf = sf
	return sf
}

// watchReadable registers c's socket with the process's readiness
// watcher (rawio.NewWatch) and returns its watch; nil (and noWatch set)
// when it cannot be watched.
func (c *deadlineConn) watchReadable() *rawio.Watch {
	var w *rawio.Watch
	if sf := c.raw(); sf != nil {
		w = rawio.NewWatch(sf.rc)
	}
	if w == nil {
		c.noWatch = true
		return nil
	}
	c.watch.Store(w)
	if c.closed.Load() {
		w.Stop() // Close ran meanwhile and may not have seen w
	}
	return w
}

// readRaw reads into b with a raw read(2); handled is false when c has
// no descriptor.
func (c *deadlineConn) readRaw(b []byte) (n int, handled bool, err error) {
	sf := c.raw()
	if sf == nil {
		return 0, false, nil
	}
	if len(b) == 0 {
		return 0, true, nil
	}
	n, errno, err := sf.c.DoRead(sf.rc, sf.read, b)
	if err := rawio.Err(c, "read", errno, err); err != nil {
		return n, true, err
	}
	if n == 0 {
		return 0, true, io.EOF
	}
	return n, true, nil
}

// writeRaw writes all of b with raw write(2) calls; handled is false
// when c has no descriptor.
func (c *deadlineConn) writeRaw(b []byte) (n int, handled bool, err error) {
	sf := c.raw()
	if sf == nil {
		return 0, false, nil
	}
	n, errno, err := sf.c.DoWrite(sf.rc, sf.write, b)
	return n, true, rawio.Err(c, "write", errno, err)
}

// writevRaw writes all of a then b with raw writev(2) calls; handled is
// false when c has no descriptor or writev is not raw (race builds).
func (c *deadlineConn) writevRaw(a, b []byte) (n int, handled bool, err error) {
	sf := c.raw()
	if sf == nil || !rawio.WritevOK {
		return 0, false, nil
	}
	n, errno, err := sf.c.DoWritev(sf.rc, sf.writev, a, b)
	return n, true, rawio.Err(c, "writev", errno, err)
}

// sendSection sends n bytes of file descriptor fd from off to c's
// connection with sendfile(2) given the offset (the descriptor's own is
// not used nor moved), waiting for the connection to be writable as its
// writes do (and so within its write deadline).
func (c *deadlineConn) sendSection(fd int, off, n int64) (written int64, handled bool, err error) {
	if n <= 0 {
		return 0, false, nil
	}
	sf := c.raw()
	if sf == nil {
		return 0, false, nil
	}
	sf.s = sectionSend{fd: fd, off: off, n: n}
	if err := sf.rc.Write(sf.send); err != nil {
		return sf.s.written, true, err
	}
	return sf.s.written, true, sf.s.err
}

// sectionSend is one sendSection's state; send is its RawConn.Write
// callback: false asks to wait until the socket is writable.
type sectionSend struct {
	fd      int
	off, n  int64
	written int64
	err     error
}

func (s *sectionSend) send(cfd uintptr) bool {
	for s.written < s.n {
		off := s.off + s.written
		k, e := rawio.Sendfile(cfd, s.fd, &off, int(min(s.n-s.written, rawio.SendfileMax)))
		switch e {
		case 0:
			if k == 0 {
				s.err = io.ErrUnexpectedEOF // the file is shorter than its section
				return true
			}
			s.written += int64(k)
			if k == rawio.SendfileMax && s.written < s.n {
				// A raw call holds the P while the kernel copies: let
				// the other goroutines (other clients' answers) run
				// between a large section's pieces.
				runtime.Gosched()
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			s.err = os.NewSyscallError("sendfile", e)
			return true
		}
	}
	return true
}
