//go:build linux && !race

package listener

import (
	"syscall"
	"unsafe"
)

// rawRead, rawWrite, rawWritev and rawSendfile are the raw system calls of a plain
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

// rawWritevOK: writev is raw here.
const rawWritevOK = true

// rawWritev writes a then b; at least one is not empty.
func rawWritev(fd uintptr, a, b []byte) (int, syscall.Errno) {
	var iov [2]syscall.Iovec
	cnt := 0
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			iov[cnt].Base = &p[0]
			iov[cnt].SetLen(len(p))
			cnt++
		}
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
	return int(n), e
}
