package listener

import "io"

// FileSection is a body stream that is a section of an open file (the
// cache's disk tier entries): ReadFrom sends it with sendfile from its
// offset, without using the descriptor's own offset, which other
// answers sending the same file share.
type FileSection interface {
	io.Reader
	// Section is the descriptor, offset and length of what is left.
	Section() (fd int, off, n int64)
	// Advance records k bytes of the section as sent.
	Advance(k int64)
}

// readFromSection sends what fasthttp's body writer hands ReadFrom (an
// io.LimitedReader over the body stream) with sendfile when the stream
// is a FileSection and the connection has a descriptor; handled is false
// otherwise, and nothing was sent.
func (c *deadlineConn) readFromSection(r io.Reader) (n int64, handled bool, err error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok {
		return 0, false, nil
	}
	s, ok := lr.R.(FileSection)
	if !ok {
		return 0, false, nil
	}
	fd, off, left := s.Section()
	n, handled, err = c.sendSection(fd, off, min(left, lr.N))
	if handled {
		s.Advance(n)
		lr.N -= n
	}
	return n, handled, err
}
