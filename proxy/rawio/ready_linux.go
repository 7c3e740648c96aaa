package rawio

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Why a watcher of its own (docs/architecture.md §9): a Go read on a
// socket always tries read(2) first and parks in the network poller only
// on EAGAIN, and the poller's readiness cannot be waited for without
// that read (every RawConn.Read starts by clearing it). On a keep-alive
// connection the server is back at its read before the client has sent
// its next request — measured under wrk on 1 KiB and 100 KiB hits, 1.96
// reads per request: every request paid a read that found nothing, a
// system call of 1.2 µs on the bench machine (a tenth of a 1 KiB hit's
// CPU). nginx reads only once epoll says so. A Watch does the same for a
// connection that waits for its next request: one epoll instance of the
// process, edge-triggered, tells which sockets turned readable; a
// connection between requests parks until its socket is, then reads.

// Watch is one socket's readiness in the process's watcher: Wait parks
// until the socket turned readable since the last Wait, Stop ends it.
// One goroutine at a time may Wait (a connection's reader).
type Watch struct {
	fd       int32
	state    atomic.Uint32
	deadline atomic.Int64 // Wait's deadline (nanoseconds since epoch; 0: none) while waiting
	wake     chan struct{}
}

// A Watch's states. ready: an edge came while nobody waited (the next
// Wait returns at once); waiting: a Wait is parked on wake; ended: the
// peer ended its side or the socket failed, which a read does not take
// away (each returns at once, EOF or the error) — Wait returns at once,
// always; stopped: the same, after Stop.
const (
	watchIdle uint32 = iota
	watchReady
	watchWaiting
	watchEnded
	watchStopped
)

// sweepEvery is how often the watcher releases the Waits past their
// deadline; the reader's own read, with the connection's deadline, then
// reports the timeout: a deadline fires up to this much late.
const sweepEvery = 100 * time.Millisecond

// watcher is the process's epoll instance and the goroutine that reads
// it: one for every watched socket (a wake-up costs one epoll_wait
// shared by every socket that turned readable meanwhile).
type watcher struct {
	epfd   int
	file   *os.File // epfd, in the runtime's network poller
	mu     sync.Mutex
	byFD   []*Watch // indexed by descriptor
	events [128]syscall.EpollEvent
}

// epoch is the origin of the deadlines the watcher keeps (monotonic).
var epoch = time.Now()

var (
	theWatcher  *watcher
	watcherOnce sync.Once
)

// StartWatcher starts the process's watcher (once; NewWatch starts it
// too), so that its goroutine and descriptor are there from the start
// rather than from the first connection; false when there is none (no
// epoll), and sockets are read as before.
func StartWatcher() bool {
	watcherOnce.Do(startWatcher)
	return theWatcher != nil
}

// NewWatch registers the socket under rc with the process's watcher and
// returns its Watch; nil when there is none to be had (no epoll, the
// descriptor refused), and the caller reads as before.
func NewWatch(rc syscall.RawConn) *Watch {
	if !StartWatcher() {
		return nil
	}
	w := theWatcher
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
		return nil
	}
	wt := &Watch{fd: int32(fd), wake: make(chan struct{}, 1)}
	w.mu.Lock()
	if fd >= len(w.byFD) {
		grown := make([]*Watch, max(2*len(w.byFD), fd+1, 64))
		copy(grown, w.byFD)
		w.byFD = grown
	}
	// The slot first: an event that comes as soon as the socket is
	// registered finds its Watch. A descriptor whose last holder closed
	// it without Stop (epoll forgot it then) is simply taken over.
	prev := w.byFD[fd]
	w.byFD[fd] = wt
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(fd)}
	if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) != nil {
		w.mu.Lock()
		if w.byFD[fd] == wt {
			w.byFD[fd] = prev
		}
		w.mu.Unlock()
		return nil
	}
	return wt
}

// epollET is EPOLLET as the event mask's type wants it (the syscall
// package's constant is negative).
const epollET = 1 << 31

// Wait parks until the socket turned readable since the last Wait (at
// once if it did), the deadline (zero: none) passed by up to sweepEvery,
// or Stop. It may return with nothing to read (an edge for bytes an
// earlier read took): the caller's read then waits as any read does. It
// never consumes a byte. Call it only after a read that emptied the
// socket (returned less than it asked for): an edge announces only bytes
// that come after it, so bytes a full read left behind would never wake
// it.
func (wt *Watch) Wait(deadline time.Time) {
	var until int64
	if !deadline.IsZero() {
		until = max(int64(deadline.Sub(epoch)), 1)
	}
	for {
		switch wt.state.Load() {
		case watchReady:
			if wt.state.CompareAndSwap(watchReady, watchIdle) {
				return
			}
		case watchEnded, watchStopped:
			return
		default: // idle
			wt.deadline.Store(until)
			if wt.state.CompareAndSwap(watchIdle, watchWaiting) {
				<-wt.wake
				return
			}
		}
	}
}

// Reading tells wt that its socket is about to be read without a Wait
// (the rest of a request): the edges so far are for bytes that read
// takes, so the next Wait must not return for them — else each request
// read that way would leave an edge that sends the next Wait straight
// to a read that finds nothing.
func (wt *Watch) Reading() {
	if wt.state.Load() == watchReady {
		wt.state.CompareAndSwap(watchReady, watchIdle)
	}
}

// Stop takes the socket out of the watcher, before its descriptor is
// closed, and releases a Wait; later Waits return at once. Safe from
// any goroutine, more than once.
func (wt *Watch) Stop() {
	if wt.state.Swap(watchStopped) == watchWaiting {
		wt.wake <- struct{}{}
	}
	w := theWatcher
	// Under the lock, so that a descriptor number closed and taken by a
	// new socket meanwhile is not taken out of epoll for it: the new one
	// sets its slot under the lock before registering.
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(wt.fd) < len(w.byFD) && w.byFD[wt.fd] == wt {
		w.byFD[wt.fd] = nil
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(wt.fd), nil)
	}
}

// notify is the watcher's: the socket turned readable; ended: the peer
// ended its side (EPOLLRDHUP) or the socket failed (EPOLLHUP, EPOLLERR).
func (wt *Watch) notify(ended bool) {
	for {
		s := wt.state.Load()
		next := watchReady
		switch {
		case s == watchEnded || s == watchStopped:
			return // nothing to add: every Wait returns at once
		case ended:
			next = watchEnded
		case s == watchReady:
			return
		case s == watchWaiting:
			next = watchIdle // the edge goes to the Wait it releases
		}
		if wt.move(s, next) {
			return
		}
	}
}

// expire releases a Wait past its deadline (now: nanoseconds since epoch).
func (wt *Watch) expire(now int64) {
	if d := wt.deadline.Load(); d != 0 && d <= now {
		wt.move(watchWaiting, watchIdle)
	}
}

// move changes the state from to next, releasing the parked Wait when
// it leaves waiting; false when the state was not from.
func (wt *Watch) move(from, next uint32) bool {
	if !wt.state.CompareAndSwap(from, next) {
		return false
	}
	if from == watchWaiting {
		wt.wake <- struct{}{}
	}
	return true
}

// startWatcher makes the process's epoll instance and starts its
// goroutine; on failure theWatcher stays nil (nothing is watched).
func startWatcher() {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	// A deadline can be set only on a descriptor in the runtime's
	// poller: the proof that the epoll instance is one.
	if err := f.SetReadDeadline(time.Now().Add(sweepEvery)); err != nil {
		f.Close()
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return
	}
	w := &watcher{epfd: epfd, file: f}
	theWatcher = w
	go w.run(rc)
}

// run delivers the epoll instance's events as long as the process
// lives: it parks in the runtime's poller until the instance turns
// readable, and every sweepEvery releases the Waits past their deadline.
func (w *watcher) run(rc syscall.RawConn) {
	drain := w.drain
	for {
		_ = rc.Read(drain) // returns at the deadline: drain never says done
		w.sweep(int64(time.Since(epoch)))
		_ = w.file.SetReadDeadline(time.Now().Add(sweepEvery))
	}
}

// drain takes every event there is (epoll_wait without waiting) and
// notifies its socket; false: wait until the instance turns readable
// again (edge-triggered in the runtime's poller, so only once drained).
func (w *watcher) drain(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&w.events[0])),
			uintptr(len(w.events)), 0, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return false
		}
		w.mu.Lock()
		for i := range int(n) {
			if fd := int(w.events[i].Fd); fd < len(w.byFD) {
				if wt := w.byFD[fd]; wt != nil {
					wt.notify(w.events[i].Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0)
				}
			}
		}
		w.mu.Unlock()
		if int(n) < len(w.events) {
			return false
		}
	}
}

// sweep releases the Waits past their deadline.
func (w *watcher) sweep(now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range w.byFD {
		if wt != nil && wt.state.Load() == watchWaiting {
			wt.expire(now)
		}
	}
}
