package listener

import (
	"errors"
	"net"
	"sync"
	"time"
)

// h2Writer batches the writes of Go's HTTP/2 server on one connection.
//
// Go's server flushes its 4 KiB frame buffer whenever its queue of frames
// is empty, and under load it is empty after nearly every answer: each
// handler runs on its own goroutine and hands its frames to the serve
// loop one at a time. So a hundred streams answered on one connection cost
// about a hundred write system calls (1.1 per request under h2load -m100,
// against fewer than 0.1 for nginx), the largest single cost of an HTTP/2
// hit.
//
// Write copies what it is given into a queue and returns; a flushing
// goroutine, started when there is something to write and nobody
// writing, writes the queue in one call and goes on until it is empty.
// While one write is in the kernel the serve loop queues the next answers,
// so under load one system call carries many frames; a lone answer costs
// one goroutine hand-off. Above TLS, a batch is also one TLS record
// instead of one per flush.
//
// The queue holds at most h2MaxQueued bytes: Write waits while it is
// over, so a client that does not read blocks the server's writer (as
// the socket's own buffer did before) and costs no memory beyond it. A
// failed write is kept and returned by every later Write, and closes the
// connection so that the server's reader ends too. Close lets what is
// queued (a GOAWAY, say) go out first, for at most h2CloseLinger.
type h2Writer struct {
	net.Conn

	mu     sync.Mutex
	room   sync.Cond // signalled when the queue is taken or the writer fails
	q      *[]byte   // what is queued; nil when nothing is (the buffer is pooled)
	busy   bool      // a flushing goroutine is at work
	err    error     // the first failed write; later Writes return it
	closed bool      // Close was called: Writes fail
	shut   bool      // the underlying connection is closed (or being closed)
}

const (
	// h2MaxQueued bounds what Write takes before it waits for the
	// flusher: a few flow-control windows of answers.
	h2MaxQueued = 256 << 10
	// h2PoolBuffer is the largest queue buffer pooled for the next batch.
	h2PoolBuffer = h2MaxQueued + 64<<10
	// h2CloseLinger bounds how long Close lets queued frames go out.
	h2CloseLinger = time.Second
)

// errH2WriterClosed is what Write returns after Close.
var errH2WriterClosed = errors.New("listener: HTTP/2 connection closed")

// h2Buffers pools queue buffers between batches, so that an idle
// connection holds none (Go's own server pools its frame buffer the same
// way).
var h2Buffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func newH2Writer(c net.Conn) *h2Writer {
	w := &h2Writer{Conn: c}
	w.room.L = &w.mu
	return w
}

// Write queues p and returns; the flushing goroutine writes it.
func (w *h2Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	for w.q != nil && len(*w.q) >= h2MaxQueued && w.err == nil && !w.closed {
		w.room.Wait()
	}
	switch {
	case w.err != nil:
		err := w.err
		w.mu.Unlock()
		return 0, err
	case w.closed:
		w.mu.Unlock()
		return 0, errH2WriterClosed
	}
	if w.q == nil {
		w.q = h2Buffers.Get().(*[]byte)
	}
	*w.q = append(*w.q, p...)
	start := !w.busy
	w.busy = true
	w.mu.Unlock()
	if start {
		go w.flush()
	}
	return len(p), nil
}

// flush writes the queue until it is empty, then ends; after Close it
// closes the connection once the queue is out (or failed).
func (w *h2Writer) flush() {
	for {
		w.mu.Lock()
		if w.q == nil || w.err != nil {
			w.busy = false
			closeNow := w.closed && w.claimShutLocked()
			w.mu.Unlock()
			if closeNow {
				_ = w.Conn.Close()
			}
			return
		}
		out := w.q
		w.q = nil
		w.room.Broadcast()
		w.mu.Unlock()

		_, err := w.Conn.Write(*out)
		putH2Buffer(out)
		if err != nil {
			w.fail(err)
		}
	}
}

// fail records a failed write: what is queued is dropped, waiting and
// later Writes return err, and the connection closes, so that the
// server's reader ends too (it learns of the failure from the
// connection, not from a write it no longer makes).
func (w *h2Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	if w.q != nil {
		putH2Buffer(w.q)
		w.q = nil
	}
	w.room.Broadcast()
	closeNow := w.claimShutLocked()
	w.mu.Unlock()
	if closeNow {
		_ = w.Conn.Close()
	}
}

// claimShutLocked, under mu, reports whether the caller is the one to
// close the connection (nobody has yet), and marks it closed.
func (w *h2Writer) claimShutLocked() bool {
	if w.shut {
		return false
	}
	w.shut = true
	return true
}

// putH2Buffer returns a queue buffer to the pool, emptied; one grown
// past h2PoolBuffer is left to the collector.
func putH2Buffer(b *[]byte) {
	if cap(*b) <= h2PoolBuffer {
		*b = (*b)[:0]
		h2Buffers.Put(b)
	}
}

// Close fails later Writes and closes the connection, after what is
// queued has been written (for at most h2CloseLinger).
func (w *h2Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.room.Broadcast()
	if w.busy && w.err == nil {
		// The flusher closes the connection when the queue is out; the
		// deadline bounds a client that reads nothing.
		w.mu.Unlock()
		_ = w.Conn.SetWriteDeadline(time.Now().Add(h2CloseLinger))
		return nil
	}
	closeNow := w.claimShutLocked()
	w.mu.Unlock()
	if !closeNow {
		return nil
	}
	return w.Conn.Close()
}
