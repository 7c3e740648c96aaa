package proxy

import (
	"io"
	"sync"

	"github.com/shield-proxy/shield/proxy/cache"
)

// Streamed fills bound for the disk tier (docs/architecture.md §6). When
// the cache has a disk tier that would take the entry now (its size
// decides, as Store's tier choice; not while the tier backs off after a
// failure), and the answer is not one the route compresses (its coded
// siblings are made from the entry in memory), a fill holds no buffer of
// the object: the job reads the origin's body through one fillChunk
// buffer and writes it straight into the tier's temporary file
// (cache.DiskFill), and readers read it back from that file (pread, up to
// what has been written, waiting on the fill's condition as for a memory
// fill) a fillReadChunk piece at a time, through a pooled buffer held
// only while the piece is written (fillBufs). A fill's memory is so a few
// buffers whatever the object's size and the number of its readers.
//
// The completed file is committed by cache.DiskFill.Store, which decides
// as cache.Store does — the invalidation verdict (a purge that landed
// during the fill refuses it), newer-fetch-wins under the key's stripe
// lock — and renames it into place; a refused or failed fill's file is
// removed. The file stays open for the fill's readers either way: the job,
// the requester and every reader hold a reference (fill.refs), the last
// one closes it.
//
// A disk that fails during the fill (a write fails: ENOSPC, EIO) puts the
// tier in its degraded state (writes skip it for a while) and the fill
// goes on in memory: the bytes written so far are read back into a
// buffer of the whole body, which readers read from then on, and the
// completed entry is stored as a memory fill's is (in memory when it fits
// cache.size/8, else not kept: Dropped). The clients get the whole body.
// Only when the bytes written cannot be read back either does the fill
// fail: its clients' transfers end short (connection closed), as for an
// origin failing midway.
//
// Requests a stream cannot answer (ranges) that find a disk fill
// complete read its entry whole, from the fill's file while it is open,
// else from the cache (as the disk tier's non-fresh-hit paths do).

const (
	// fillChunk is the buffer a disk fill's body goes to its file through.
	fillChunk = 256 << 10
	// fillReadChunk is the piece of a disk fill's file a reader reads
	// and writes at a time (through a pooled buffer, fillBufs).
	fillReadChunk = 128 << 10
)

// acquire takes a reference to a disk fill's file, false once it is
// closed (the fill is complete and all its readers are done). A memory
// fill has nothing to hold: true.
func (fl *fill) acquire() bool {
	if fl.disk == nil {
		return true
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.refs == 0 {
		return false
	}
	fl.refs++
	return true
}

// release drops a reference acquire (or startFill) took; the last closes
// the file.
func (fl *fill) release() {
	if fl.disk == nil {
		return
	}
	fl.mu.Lock()
	fl.refs--
	last := fl.refs == 0
	fl.mu.Unlock()
	if last {
		_ = fl.disk.Close()
	}
}

// next waits for the fill's next bytes past r.off and returns them: a
// slice of the fill's buffer, or bytes read from its file into p (none
// when p is empty).
func (r *fillReader) next(p []byte) ([]byte, error) {
	b, end, err := r.fl.next(r.off)
	if err != nil && err != io.EOF {
		r.cutShort(false)
	}
	if b != nil || err != nil {
		return b, err
	}
	return r.chunk(p, end)
}

// chunk reads the fill's file from r.off up to end into p.
func (r *fillReader) chunk(p []byte, end int) ([]byte, error) {
	if len(p) == 0 {
		return nil, nil
	}
	n, err := r.fl.disk.ReadAt(p[:min(len(p), end-r.off)], int64(r.off))
	if n > 0 {
		return p[:n], nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF // the file is shorter than what was written
	}
	r.cutShort(true)
	return nil, err
}

// fillBufs are the buffers disk fill readers write pieces of the file
// through: one is held only while a piece is read and written, so the
// readers waiting for the body to arrive (most of them, most of the time)
// hold none.
var fillBufs = sync.Pool{New: func() any { b := make([]byte, fillReadChunk); return &b }}

// writeDisk writes the fill's file from r.off up to end (at most a
// buffer's worth) to w.
func (r *fillReader) writeDisk(w io.Writer, end int) (int, error) {
	bp := fillBufs.Get().(*[]byte)
	defer fillBufs.Put(bp)
	b, err := r.chunk(*bp, end)
	if len(b) == 0 {
		return 0, err
	}
	return w.Write(b)
}

// Close releases the reader's reference to a disk fill's file.
func (r *fillReader) Close() error {
	if !r.closed {
		r.closed = true
		r.fl.release()
	}
	return nil
}

// toDisk writes b, the body's bytes at off, to the fill's file. When the
// disk fails the fill goes on in memory (see above): an error only when
// the bytes already written cannot be read back.
func (j *fillJob) toDisk(b []byte, off int) error {
	fl := j.fl
	if fl.disk.WriteAt(b, int64(off)) == nil {
		return nil
	}
	buf := make([]byte, fl.size, fl.size+len(fl.head))
	if off > 0 {
		if _, err := fl.disk.ReadAt(buf[:off], 0); err != nil {
			return err
		}
	}
	copy(buf[off:], b)
	fl.mu.Lock()
	fl.buf = buf
	fl.mu.Unlock()
	fl.disk.Abort()
	j.p.logger.Warn("streamed fill: the disk tier failed, going on in memory", "route", j.rte.name, "at", off, "size", fl.size)
	return nil
}

// storeDiskFill commits a completed disk fill (cache.DiskFill.Store: the
// same decisions as Store).
func (p *Proxy) storeDiskFill(j *fillJob) cache.PutResult {
	res := j.fl.disk.Store(&j.e, putOptions(j.primary, j.vary, j.respTime))
	if res == cache.Refused {
		p.g.overtaken.Inc()
	}
	return res
}

// diskFillEntry is a completed disk fill's entry read whole, for a
// request its stream cannot answer: from the fill's file while it is
// open, else, when it was stored, from the cache; nil when neither has
// it (the caller fetches).
func (p *Proxy) diskFillEntry(fl *fill, st fillState) []byte {
	if fl.acquire() {
		defer fl.release()
		buf := make([]byte, fl.size, fl.size+len(fl.head))
		if _, err := fl.disk.ReadAt(buf, 0); err != nil {
			return nil
		}
		return cache.JoinEntry(buf, fl.head)
	}
	if st == fillStored {
		if b := p.cache.Get(nil, fl.key); len(b) > 0 {
			return b
		}
	}
	return nil
}
