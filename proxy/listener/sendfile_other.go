//go:build !linux

package listener

// rawSocket: no raw socket calls outside Linux.
type rawSocket struct{}

// sendSection: sendfile with an explicit offset is Linux's; elsewhere a
// FileSection is read like any body stream.
func (c *deadlineConn) sendSection(int, int64, int64) (int64, bool, error) { return 0, false, nil }

func (c *deadlineConn) watchReadable()                              {}
func (c *deadlineConn) readRaw([]byte) (int, bool, error)           { return 0, false, nil }
func (c *deadlineConn) writeRaw([]byte) (int, bool, error)          { return 0, false, nil }
func (c *deadlineConn) writevRaw([]byte, []byte) (int, bool, error) { return 0, false, nil }
