//go:build linux && !race

package rawio

import (
	"syscall"
	"unsafe"
)

// Read, Write and Writev are the system calls on a non-blocking
// socket's descriptor fd, to be made from a syscall.RawConn callback:
// raw ones (no runtime entersyscall/exitsyscall; doc.go says why) for at
// most Max bytes, the runtime's beyond, where a call can take long
// enough that the runtime should give its P to another thread
// meanwhile, and costs little beside what it moves. b is never empty.
// Sendfile is always raw, at most SendfileMax bytes a call (see there).
// sys_race.go has the race detector's versions.

// Max is the most bytes a raw call moves: a 100 KiB answer and its head
// go raw.
const Max = 128 << 10

// Read is read(2) of fd into b.
func Read(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) > Max {
		n, err := syscall.Read(int(fd), b)
		return max(n, 0), errno(err)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// Write is write(2) of b to fd.
func Write(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) > Max {
		n, err := syscall.Write(int(fd), b)
		return max(n, 0), errno(err)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// Sendfile is sendfile(2) of at most SendfileMax of n bytes of file
// descriptor fd from *off to the socket cfd (off is advanced; fd's own
// offset is not used). Callers loop, and let other goroutines run
// between calls (runtime.Gosched): a raw call holds its P while the
// kernel copies, as sendfile holds an nginx worker.
func Sendfile(cfd uintptr, fd int, off *int64, n int) (int, syscall.Errno) {
	n = min(n, SendfileMax)
	k, _, e := syscall.RawSyscall6(syscall.SYS_SENDFILE, cfd, uintptr(fd), uintptr(unsafe.Pointer(off)), uintptr(n), 0, 0)
	return int(k), e
}

// WritevOK: Writev is a system call here.
const WritevOK = true

// Writev is writev(2) of a then b to fd; at least one is not empty.
func Writev(fd uintptr, a, b []byte) (int, syscall.Errno) {
	var iov [2]syscall.Iovec
	cnt := 0
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			iov[cnt].Base = &p[0]
			iov[cnt].SetLen(len(p))
			cnt++
		}
	}
	if len(a)+len(b) > Max {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
		return int(n), e
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
	return int(n), e
}
