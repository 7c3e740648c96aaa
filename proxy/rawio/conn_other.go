//go:build !linux

package rawio

import "net"

// Wrap returns c: raw socket calls are Linux's.
func Wrap(c net.Conn) net.Conn { return c }
