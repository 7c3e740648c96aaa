package rawio

import (
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// watchPair is a loopback connection: its server side's Watch and raw
// connection, and the client side.
func watchPair(t *testing.T) (*Watch, *Conn, net.Conn) {
	t.Helper()
	c, client := pair(t)
	w := NewWatch(c.rc)
	if w == nil {
		t.Fatal("NewWatch: no watcher on Linux")
	}
	t.Cleanup(w.Stop)
	return w, c, client
}

// returns runs f in a goroutine and reports whether it returned within d.
func returns(f func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestWatchWaitsForBytes: Wait parks while nothing came, returns once
// the client writes, and leaves the bytes to the read.
func TestWatchWaitsForBytes(t *testing.T) {
	w, c, client := watchPair(t)
	done := make(chan struct{})
	go func() { w.Wait(time.Time{}); close(done) }()
	select {
	case <-done:
		t.Fatal("Wait returned with nothing sent")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := client.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the client wrote")
	}
	buf := make([]byte, 8)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "GET" {
		t.Fatalf("read %q, %v after Wait; want GET", buf[:n], err)
	}
}

// TestWatchBytesBeforeWait: bytes that came before Wait (nobody waiting
// then) make it return at once; so do bytes already there when the
// socket was registered.
func TestWatchBytesBeforeWait(t *testing.T) {
	c, client := pair(t)
	if _, err := client.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	// Registered with bytes already queued: epoll reports them.
	for end := time.Now().Add(5 * time.Second); queued(t, c) == 0; {
		if time.Now().After(end) {
			t.Fatal("the client's bytes never reached the server's socket")
		}
		time.Sleep(time.Millisecond)
	}
	w := NewWatch(c.rc)
	if w == nil {
		t.Fatal("NewWatch: no watcher on Linux")
	}
	defer w.Stop()
	if !returns(func() { w.Wait(time.Time{}) }, 5*time.Second) {
		t.Fatal("Wait parked with bytes queued before the registration")
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(c, buf[:5]); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// The edge came while nobody waited: the next Wait returns at once.
	waitForState(t, w, watchReady)
	if !returns(func() { w.Wait(time.Time{}) }, time.Second) {
		t.Fatal("Wait parked after bytes came while nobody waited")
	}
}

// queued is how many bytes c's socket holds unread (FIONREAD).
func queued(t *testing.T, c *Conn) int {
	t.Helper()
	var n int32
	var errno syscall.Errno
	if err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || errno != 0 {
		t.Fatalf("FIONREAD: %v %v", err, errno)
	}
	return int(n)
}

// waitForState polls until w is in state s.
func waitForState(t *testing.T, w *Watch, s uint32) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); w.state.Load() != s; {
		if time.Now().After(end) {
			t.Fatalf("watch state %d, want %d", w.state.Load(), s)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWatchDeadline: a Wait with nothing sent returns once its deadline
// passed, at most a sweep late.
func TestWatchDeadline(t *testing.T) {
	w, _, _ := watchPair(t)
	start := time.Now()
	if !returns(func() { w.Wait(start.Add(150 * time.Millisecond)) }, 5*time.Second) {
		t.Fatal("Wait with a 150ms deadline still parked after 5s")
	}
	took := time.Since(start)
	if took < 150*time.Millisecond || took > 150*time.Millisecond+sweepEvery+500*time.Millisecond {
		t.Fatalf("Wait with a 150ms deadline took %v (sweep every %v)", took, sweepEvery)
	}
}

// TestWatchStop: Stop from another goroutine releases a parked Wait;
// later Waits return at once; Stop twice is harmless.
func TestWatchStop(t *testing.T) {
	w, _, _ := watchPair(t)
	done := make(chan struct{})
	go func() { w.Wait(time.Time{}); close(done) }()
	waitForState(t, w, watchWaiting)
	w.Stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not release the Wait")
	}
	w.Stop()
	if !returns(func() { w.Wait(time.Time{}) }, time.Second) {
		t.Fatal("Wait parked after Stop")
	}
}

// TestWatchNoLostWakeup: many connections, each a client sending a
// request the moment it has the answer to the last (the server reading
// only after Wait): a wake-up lost between an edge and a Wait would
// park that connection until its deadline.
func TestWatchNoLostWakeup(t *testing.T) {
	const conns, rounds = 32, 300
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		w, c, client := watchPair(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			for r := range rounds {
				msg := fmt.Appendf(nil, "%d-%d", i, r)
				if _, err := client.Write(msg); err != nil {
					errs <- err
					return
				}
				start := time.Now()
				// The server side: wait for readability, then read.
				w.Wait(start.Add(10 * time.Second))
				if took := time.Since(start); took > 2*time.Second {
					errs <- fmt.Errorf("conn %d round %d: Wait took %v", i, r, took)
					return
				}
				if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil || string(buf[:len(msg)]) != string(msg) {
					errs <- fmt.Errorf("conn %d round %d: read %q, %v", i, r, buf[:len(msg)], err)
					return
				}
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(client, buf[:len(msg)]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestWatchSlotReused: a descriptor number closed and reused by another
// connection gets its own Watch; the old one's Stop does not take the
// new one out.
func TestWatchSlotReused(t *testing.T) {
	c1, _ := pair(t)
	w1 := NewWatch(c1.rc)
	if w1 == nil {
		t.Fatal("no watcher")
	}
	w2 := NewWatch(c1.rc) // the same descriptor registered again, as after reuse
	if w2 != nil {
		t.Fatal("a descriptor registered twice: epoll must refuse it")
	}
	w1.Stop()
	w3 := NewWatch(c1.rc)
	if w3 == nil {
		t.Fatal("the descriptor could not be registered again after Stop")
	}
	w1.Stop() // stopped before: must leave w3 registered
	if !theWatcher.holds(w3) {
		t.Fatal("a stale Stop took a newer Watch out of the watcher")
	}
	w3.Stop()
}

// holds reports whether wt is registered.
func (w *watcher) holds(wt *Watch) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(wt.fd) < len(w.byFD) && w.byFD[wt.fd] == wt
}

// TestWatchPeerEnded: bytes and the peer's FIN come together; the read
// takes the bytes (the edge cleared by Reading, as a request's read
// does) but not the end, which no later edge announces: every Wait from
// then on returns at once, so the read after it sees EOF.
func TestWatchPeerEnded(t *testing.T) {
	w, c, client := watchPair(t)
	if _, err := client.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := client.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitForState(t, w, watchEnded)
	w.Reading()
	buf := make([]byte, 16)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "last" {
		t.Fatalf("read %q, %v; want last", buf[:n], err)
	}
	for i := range 2 {
		if !returns(func() { w.Wait(time.Time{}) }, 5*time.Second) {
			t.Fatalf("Wait %d parked after the peer ended its side", i+1)
		}
	}
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v; want EOF", n, err)
	}
}
