package listener

import (
	"io"
	"syscall"
)

// sectionSender is a connection's sendfile state, made at its first
// section and kept: its raw connection and callback are bound once, so
// a section sent costs no allocation (a RawConn, the send state and the
// callback bound to it were three per hit).
type sectionSender struct {
	rc   syscall.RawConn
	send func(uintptr) bool
	s    sectionSend
}

// sendSection sends n bytes of file descriptor fd from off to c's
// connection with sendfile(2) given the offset (the descriptor's own is
// not used nor moved), waiting for the connection to be writable as its
// writes do (and so within its write deadline).
func (c *deadlineConn) sendSection(fd int, off, n int64) (written int64, handled bool, err error) {
	if n <= 0 {
		return 0, false, nil
	}
	sf := c.sf
	if sf == nil {
		sc, ok := c.Conn.(syscall.Conn)
		if !ok {
			return 0, false, nil
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return 0, false, nil
		}
		sf = &sectionSender{rc: rc}
		sf.send = sf.s.send
		c.sf = sf
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

// maxSendfile bounds one sendfile call (Linux sends at most ~2 GiB).
const maxSendfile = 1 << 30

func (s *sectionSend) send(cfd uintptr) bool {
	for s.written < s.n {
		off := s.off + s.written
		k, err := syscall.Sendfile(int(cfd), s.fd, &off, int(min(s.n-s.written, maxSendfile)))
		if k > 0 {
			s.written += int64(k)
		}
		switch {
		case err == syscall.EAGAIN:
			return false
		case err == syscall.EINTR:
		case err != nil:
			s.err = err
			return true
		case k == 0:
			s.err = io.ErrUnexpectedEOF // the file is shorter than its section
			return true
		}
	}
	return true
}
