//go:build linux && race

package rawio

import "syscall"

// Under the race detector the raw calls are the syscall package's: they
// tell the detector that I/O orders what is written before a send with
// what is read after a receive, which raw calls would not (a test's
// peer would then race with the server's past).

// Read is read(2) of fd into b.
func Read(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errno(err)
}

// Write is write(2) of b to fd.
func Write(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errno(err)
}

// Sendfile is sendfile(2) of at most SendfileMax of n bytes of file
// descriptor fd from *off to the socket cfd.
func Sendfile(cfd uintptr, fd int, off *int64, n int) (int, syscall.Errno) {
	k, err := syscall.Sendfile(int(cfd), fd, off, min(n, SendfileMax))
	return max(k, 0), errno(err)
}

// WritevOK: package syscall has no writev; callers write through
// net.Buffers instead, which the detector follows.
const WritevOK = false

// Writev is never called under the race detector (WritevOK).
func Writev(uintptr, []byte, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
