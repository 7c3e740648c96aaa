package listener

import (
	"io"
	"net"
	"syscall"
)

// sendSection sends n bytes of file descriptor fd from off to c with
// sendfile(2) given the offset (the descriptor's own is not used nor
// moved), waiting for c to be writable as its writes do (and so within
// its write deadline).
func sendSection(c net.Conn, fd int, off, n int64) (written int64, handled bool, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok || n <= 0 {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	s := sectionSend{fd: fd, off: off, n: n}
	if err := rc.Write(s.send); err != nil {
		return s.written, true, err
	}
	return s.written, true, s.err
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
