//go:build linux && !race

package rawio

import (
	"syscall"
	"unsafe"
)

// Read, Write and Sendfile are raw system calls on a non-blocking
// socket's descriptor fd, to be made from a syscall.RawConn callback: no
// runtime entersyscall/exitsyscall (doc.go says why). b is never empty.
// sys_race.go has the race detector's versions.

// Read is read(2) of fd into b.
func Read(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// Write is write(2) of b to fd.
func Write(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// Sendfile is sendfile(2) of n bytes of file descriptor fd from *off to
// the socket cfd (off is advanced; fd's own offset is not used).
func Sendfile(cfd uintptr, fd int, off *int64, n int) (int, syscall.Errno) {
	k, _, e := syscall.RawSyscall6(syscall.SYS_SENDFILE, cfd, uintptr(fd), uintptr(unsafe.Pointer(off)), uintptr(n), 0, 0)
	return int(k), e
}
