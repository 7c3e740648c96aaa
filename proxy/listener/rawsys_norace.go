//go:build linux && !race

package listener

import (
	"syscall"
	"unsafe"
)

// rawRead, rawWrite and rawSendfile are the raw system calls of a plain
// connection (sendfile_linux.go): no runtime entersyscall/exitsyscall.
// b is never empty. rawsys_race.go has the race detector's versions.

func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawSendfile(cfd uintptr, fd int, off *int64, n int) (int, syscall.Errno) {
	k, _, e := syscall.RawSyscall6(syscall.SYS_SENDFILE, cfd, uintptr(fd), uintptr(unsafe.Pointer(off)), uintptr(n), 0, 0)
	return int(k), e
}
