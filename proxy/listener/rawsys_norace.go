//go:build linux && !race

package listener

import (
	"syscall"
	"unsafe"
)

// rawRead, rawWrite, rawWritev and rawSendfile are the system calls of a
// plain connection (sendfile_linux.go): raw ones (no runtime
// entersyscall/exitsyscall) for at most rawMax bytes, the runtime's
// beyond, where a call can take long enough that the runtime should
// give its P to another thread meanwhile, and costs little beside what
// it moves. b is never empty. rawsys_race.go has the race detector's
// versions.

// rawMax is the most bytes a raw call moves: a 100 KiB answer and its
// head go raw.
const rawMax = 128 << 10

func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) > rawMax {
		n, err := syscall.Read(int(fd), b)
		return max(n, 0), errno(err)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) > rawMax {
		n, err := syscall.Write(int(fd), b)
		return max(n, 0), errno(err)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawSendfile(cfd uintptr, fd int, off *int64, n int) (int, syscall.Errno) {
	if n > rawMax {
		k, err := syscall.Sendfile(int(cfd), fd, off, n)
		return max(k, 0), errno(err)
	}
	k, _, e := syscall.RawSyscall6(syscall.SYS_SENDFILE, cfd, uintptr(fd), uintptr(unsafe.Pointer(off)), uintptr(n), 0, 0)
	return int(k), e
}

// rawWritevOK: writev goes through rawWritev here.
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
	if len(a)+len(b) > rawMax {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
		return int(n), e
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
	return int(n), e
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
