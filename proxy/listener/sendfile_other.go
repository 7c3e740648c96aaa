//go:build !linux

package listener

import "github.com/shield-proxy/shield/proxy/rawio"

// rawSocket: no raw socket calls outside Linux.
type rawSocket struct{}

// sendSection: sendfile with an explicit offset is Linux's; elsewhere a
// FileSection is read like any body stream.
func (c *deadlineConn) sendSection(int, int64, int64) (int64, bool, error) { return 0, false, nil }

func (c *deadlineConn) readRaw([]byte) (int, bool, error)           { return 0, false, nil }
func (c *deadlineConn) writeRaw([]byte) (int, bool, error)          { return 0, false, nil }
func (c *deadlineConn) writevRaw([]byte, []byte) (int, bool, error) { return 0, false, nil }

// watchReadable: no readiness watcher outside Linux.
func (c *deadlineConn) watchReadable() *rawio.Watch {
	c.noWatch = true
	return nil
}
