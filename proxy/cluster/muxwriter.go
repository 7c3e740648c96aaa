package cluster

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"time"
)

// errMuxClosed fails what was queued on, or waits on, a closed connection.
var errMuxClosed = errors.New("cluster: mux connection closed")

// muxWriter batches a connection's frames: senders append whole frames
// to a queue under its lock, and one goroutine writes everything queued
// in one call, so under load one system call carries many frames. Its
// queue holds at most muxMaxQueued bytes: a sender waits while it is
// over (a slow reader blocks the owner's senders, not its memory).
type muxWriter struct {
	conn    net.Conn
	timeout time.Duration // bounds one write

	mu     sync.Mutex
	room   sync.Cond // signalled when the queue is taken
	q      []byte
	busy   bool // a write is under way
	closed bool
	wake   chan struct{} // cap 1: the queue is not empty
	done   chan struct{} // closed by close
}

func newMuxWriter(conn net.Conn, timeout time.Duration) *muxWriter {
	w := &muxWriter{conn: conn, timeout: timeout, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.room.L = &w.mu
	return w
}

// begin locks the queue once it has room and returns it to append
// frames to; end stores it back. ok is false (nothing locked) when the
// writer is closed.
func (w *muxWriter) begin() (q []byte, ok bool) {
	w.mu.Lock()
	for len(w.q) > muxMaxQueued && !w.closed {
		w.room.Wait()
	}
	if w.closed {
		w.mu.Unlock()
		return nil, false
	}
	return w.q, true
}

// end stores the queue begin returned, with frames appended, and wakes
// the writing goroutine.
func (w *muxWriter) end(q []byte) {
	w.q = q
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// send queues one frame.
func (w *muxWriter) send(typ byte, id uint32, payload []byte) bool {
	q, ok := w.begin()
	if !ok {
		return false
	}
	q = appendFrameHeader(q, typ, id, uint32(len(payload)))
	w.end(append(q, payload...))
	return true
}

// run writes the queue until the connection fails or close; onErr is
// called once with a write's error.
func (w *muxWriter) run(onErr func(error)) {
	var out []byte
	var armed time.Time // the connection's write deadline
	for {
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
		// Let the senders that are runnable queue theirs first: one
		// write then carries them all.
		runtime.Gosched()
		for {
			w.mu.Lock()
			if len(w.q) == 0 || w.closed {
				w.mu.Unlock()
				break
			}
			out, w.q = w.q, out[:0]
			w.busy = true
			w.room.Broadcast()
			w.mu.Unlock()
			// The deadline moves when less than a timeout is left, to
			// one and a half: every write gets at least a timeout, and
			// the deadline (a runtime timer) moves once in many writes.
			if now := time.Now(); w.timeout > 0 && armed.Sub(now) < w.timeout {
				armed = now.Add(w.timeout + w.timeout/2)
				_ = w.conn.SetWriteDeadline(armed)
			}
			_, err := w.conn.Write(out)
			w.mu.Lock()
			w.busy = false
			w.mu.Unlock()
			if err != nil {
				onErr(err)
				return
			}
			if cap(out) > muxMaxQueued {
				out = nil // a large answer's buffer is not kept
			}
		}
	}
}

// close stops the writer: queued frames are dropped, senders fail.
func (w *muxWriter) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.done)
		w.q = nil
		w.room.Broadcast()
	}
	w.mu.Unlock()
}

// flushed reports whether everything queued has been written.
func (w *muxWriter) flushed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed || (len(w.q) == 0 && !w.busy)
}
