//go:build unix

package cache

import "syscall"

// diskOpenLimit is how many files the disk tier keeps open: diskOpenMax,
// or a quarter of the process's descriptor limit when that is smaller
// (connections need the rest), at least 16.
func diskOpenLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 16
	}
	return int(max(16, min(diskOpenMax, l.Cur/4)))
}
