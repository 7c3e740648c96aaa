//go:build linux && race

package listener

import "syscall"

// Under the race detector the raw calls are the syscall package's: they
// tell the detector that I/O orders what is written before a send with
// what is read after a receive, which raw calls would not (a test's
// peer would then race with the server's past).

func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errno(err)
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errno(err)
}

func rawSendfile(cfd uintptr, fd int, off *int64, n int) (int, syscall.Errno) {
	k, err := syscall.Sendfile(int(cfd), fd, off, n)
	return max(k, 0), errno(err)
}

// rawWritevOK: package syscall has no writev; a coalesced answer leaves
// through net.Buffers, which the detector follows.
const rawWritevOK = false

func rawWritev(uintptr, []byte, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
