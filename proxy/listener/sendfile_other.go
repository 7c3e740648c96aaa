//go:build !linux

package listener

import "net"

// sendSection: sendfile with an explicit offset is Linux's; elsewhere a
// FileSection is read like any body stream.
func sendSection(net.Conn, int, int64, int64) (int64, bool, error) { return 0, false, nil }
