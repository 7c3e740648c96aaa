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
// to a queue under its lock, and one writer at a time writes everything
// queued in one call, so under load one system call carries many
// frames. The writer is the sender that finds nobody writing: it lets
// the other runnable senders queue theirs first (runtime.Gosched), then
// writes the queue once; frames queued meanwhile are handed to the
// writing goroutine, which writes until the queue is empty. So a lone
// request costs no goroutine hand-off, and no sender writes for others
// for long. The queue holds at most muxMaxQueued bytes: a sender waits
// while it is over (a slow reader blocks the owner's senders, not its
// memory).
type muxWriter struct {
	conn    net.Conn
	timeout time.Duration   // bounds one write
	onErr   func(err error) // called with a write's error (once: the writer closes)
	armed   time.Time       // the connection's write deadline (the writer's)

	mu     sync.Mutex
	room   sync.Cond // signalled when the queue is taken
	q      []byte
	spare  []byte // the buffer the last write took, kept for the next
	busy   bool   // a writer is at work: it writes what is queued
	closed bool
	wake   chan struct{} // cap 1: the writing goroutine takes over the queue
	done   chan struct{} // closed by close
}

func newMuxWriter(conn net.Conn, timeout time.Duration, onErr func(error)) *muxWriter {
	w := &muxWriter{conn: conn, timeout: timeout, onErr: onErr, wake: make(chan struct{}, 1), done: make(chan struct{})}
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

// end stores the queue begin returned, with frames appended; when
// nobody is writing, the caller writes it.
func (w *muxWriter) end(q []byte) {
	w.q = q
	if !w.claimLocked() {
		return
	}
	// Let the senders that are runnable queue theirs first: one write
	// then carries them all.
	runtime.Gosched()
	w.writeQueued()
}

// hold stores the queue begin returned, with frames appended, without
// writing it unless it holds muxHoldMax bytes or more: the owner's
// reader queues the answers it serves itself (inline) this way and
// writes them all at once (flush) before it would wait for more
// requests. Frames held are also written by the next sender's end.
func (w *muxWriter) hold(q []byte) {
	if len(q) >= muxHoldMax {
		w.end(q)
		return
	}
	w.q = q
	w.mu.Unlock()
}

// flush writes what is queued when nobody is writing.
func (w *muxWriter) flush() {
	w.mu.Lock()
	if w.claimLocked() {
		w.writeQueued()
	}
}

// claimLocked, under mu (which it releases), makes the caller the
// writer when something is queued and nobody is writing (busy), and
// reports whether it did.
func (w *muxWriter) claimLocked() bool {
	if w.busy || w.closed || len(w.q) == 0 {
		w.mu.Unlock()
		return false
	}
	w.busy = true
	w.mu.Unlock()
	return true
}

// writeQueued writes the queue, by the writer at work (busy); what was
// queued meanwhile is handed to the writing goroutine.
func (w *muxWriter) writeQueued() {
	if !w.write() {
		return
	}
	w.mu.Lock()
	if len(w.q) == 0 || w.closed {
		w.busy = false
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	select { // still busy: the writing goroutine takes over
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

// write writes what is queued, by the writer at work (busy). It reports
// false, no longer busy, when there was nothing to write, the writer is
// closed or the write failed (onErr is then called).
func (w *muxWriter) write() bool {
	w.mu.Lock()
	if len(w.q) == 0 || w.closed {
		w.busy = false
		w.mu.Unlock()
		return false
	}
	out := w.q
	w.q, w.spare = w.spare[:0], nil
	w.room.Broadcast()
	w.mu.Unlock()
	// The deadline moves when less than a timeout is left, to one and a
	// half: every write gets at least a timeout, and the deadline (a
	// runtime timer) moves once in many writes.
	if now := time.Now(); w.timeout > 0 && w.armed.Sub(now) < w.timeout {
		w.armed = now.Add(w.timeout + w.timeout/2)
		_ = w.conn.SetWriteDeadline(w.armed)
	}
	_, err := w.conn.Write(out)
	w.mu.Lock()
	if cap(out) <= muxMaxQueued {
		w.spare = out // a large answer's buffer is not kept
	}
	if err != nil {
		w.busy = false
	}
	w.mu.Unlock()
	if err != nil {
		w.onErr(err)
		return false
	}
	return true
}

// run is the writing goroutine: it writes the queues handed to it until
// they are empty, until the writer closes.
func (w *muxWriter) run() {
	for {
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
		for w.write() {
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
