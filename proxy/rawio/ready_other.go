//go:build !linux

package rawio

import (
	"syscall"
	"time"
)

// Watch: the readiness watcher is Linux's (epoll); elsewhere NewWatch
// returns nil and a connection reads as it always does.
type Watch struct{}

// StartWatcher reports that there is none outside Linux.
func StartWatcher() bool { return false }

// NewWatch returns nil outside Linux.
func NewWatch(syscall.RawConn) *Watch { return nil }

// Wait returns at once.
func (*Watch) Wait(time.Time) {}

// Stop does nothing.
func (*Watch) Stop() {}

// Reading does nothing.
func (*Watch) Reading() {}
