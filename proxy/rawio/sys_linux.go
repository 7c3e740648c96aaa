package rawio

import "syscall"

// What both system call files (sys_norace.go, sys_race.go) share.

// SendfileMax is the most one Sendfile call sends: about 150 µs of
// copying from the page cache here. The runtime's call for larger
// sections cost a 10 MiB disk hit 1,513 µs of CPU against 1,088 raw
// (nginx 1,199; ROUNDS=4 PATHS=/obj/10m?size=10485760 bench/disk-ab.sh):
// a long system call has its P handed to another thread.
const SendfileMax = 1 << 20

// errno is a package syscall call's error as the raw calls report it.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
