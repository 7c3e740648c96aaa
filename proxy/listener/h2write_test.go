package listener

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// gatedConn records writes; each Write first takes a token from gate (a
// client that reads when the test says so) and fails with fail if set.
type gatedConn struct {
	net.Conn
	gate chan struct{}
	fail error

	mu       sync.Mutex
	writes   [][]byte
	closed   bool
	deadline time.Time
	entered  chan struct{} // a Write has started (cap 1)
}

func newGatedConn() *gatedConn {
	return &gatedConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
}

func (c *gatedConn) Write(p []byte) (int, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.gate
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *gatedConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *gatedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *gatedConn) state() (writes [][]byte, closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.writes...), c.closed
}

// waitFor polls cond until it holds or a second has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestH2WriterBatches: while one write is in the kernel, what the server
// writes meanwhile is queued and goes out in one write, in order.
func TestH2WriterBatches(t *testing.T) {
	c := newGatedConn()
	w := newH2Writer(c)
	if n, err := w.Write([]byte("first")); n != 5 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	<-c.entered // the flusher is inside the connection's Write
	for _, s := range []string{"a", "b", "c"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	c.gate <- struct{}{}
	c.gate <- struct{}{}
	waitFor(t, "two writes", func() bool { ws, _ := c.state(); return len(ws) == 2 })
	ws, closed := c.state()
	if string(ws[0]) != "first" || string(ws[1]) != "abc" || closed {
		t.Errorf("writes %q, closed %v; want [first abc], open", ws, closed)
	}
	// Idle again: the connection holds no buffer (it went back to the pool).
	waitFor(t, "the flusher to end", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.busy
	})
	if w.q != nil {
		t.Errorf("an idle writer holds a %d-byte buffer", cap(*w.q))
	}
}

// TestH2WriterBound: past h2MaxQueued bytes queued, Write waits until
// the flusher takes the queue: a client that does not read costs no
// more memory than that.
func TestH2WriterBound(t *testing.T) {
	c := newGatedConn()
	w := newH2Writer(c)
	_, _ = w.Write([]byte("x"))
	<-c.entered
	if _, err := w.Write(make([]byte, h2MaxQueued)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_, _ = w.Write([]byte("y"))
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Write returned with the queue over its bound and nobody reading")
	case <-time.After(50 * time.Millisecond):
	}
	c.gate <- struct{}{} // "x" goes; the flusher takes the full queue
	<-done
	close(c.gate)
	waitFor(t, "everything written", func() bool {
		ws, _ := c.state()
		n := 0
		for _, b := range ws {
			n += len(b)
		}
		return n == 2+h2MaxQueued
	})
}

// TestH2WriterFails: a failed write closes the connection (the server's
// reader ends) and every later Write returns the error.
func TestH2WriterFails(t *testing.T) {
	c := newGatedConn()
	c.fail = errors.New("connection reset")
	close(c.gate)
	w := newH2Writer(c)
	_, _ = w.Write([]byte("x"))
	waitFor(t, "the connection closed", func() bool { _, closed := c.state(); return closed })
	waitFor(t, "Write to fail", func() bool { _, err := w.Write([]byte("y")); return errors.Is(err, c.fail) })
}

// TestH2WriterClose: Close returns at once; what was queued (a GOAWAY)
// still goes out, then the connection closes; later Writes fail.
func TestH2WriterClose(t *testing.T) {
	c := newGatedConn()
	w := newH2Writer(c)
	_, _ = w.Write([]byte("frames"))
	<-c.entered
	_, _ = w.Write([]byte("goaway"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, closed := c.state(); closed {
		t.Fatal("closed before the queue went out")
	}
	if _, err := w.Write([]byte("late")); err == nil {
		t.Error("Write after Close succeeded")
	}
	close(c.gate)
	waitFor(t, "the connection closed", func() bool { _, closed := c.state(); return closed })
	ws, _ := c.state()
	if len(ws) != 2 || string(ws[1]) != "goaway" {
		t.Errorf("writes %q, want [frames goaway]", ws)
	}
	c.mu.Lock()
	dl := c.deadline
	c.mu.Unlock()
	if dl.IsZero() || time.Until(dl) > h2CloseLinger {
		t.Errorf("write deadline %v: want the queue bounded by h2CloseLinger", dl)
	}
	// Idle: Close closes at once.
	c2 := newGatedConn()
	if err := newH2Writer(c2).Close(); err != nil {
		t.Fatal(err)
	}
	if _, closed := c2.state(); !closed {
		t.Error("idle writer's Close left the connection open")
	}
}
