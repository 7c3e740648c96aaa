//go:build unix

package cache

import "syscall"

// fileGone reports whether the open file fd has no name left (removed
// behind the index's back, e.g. its directory deleted): one fstat, where
// opening it again would cost open, fstat and reads.
func fileGone(fd int) bool {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return true
	}
	return st.Nlink == 0
}

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
