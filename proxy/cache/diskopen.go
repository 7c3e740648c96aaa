package cache

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Open files of the disk tier. A hit on a disk entry used to cost
// open, three fcntl and a failed epoll_ctl (os.Open), fstat, two preads
// of the header and metadata, lseek and close around the sendfile: most
// of the syscalls of a 100 KiB hit. The tier keeps the descriptors of
// recently read files open instead, with their key and entry metadata
// (the file's, checked when it was opened), like nginx's open_file_cache:
// a hit copies the metadata and takes a reference on the descriptor. A
// file removed behind the index's back (its directory deleted by hand)
// is a miss and forgotten, as when it could not be opened, once noticed:
// like nginx's open_file_cache_valid, a kept file's link count is checked
// (one fstat) at most once per diskCheckEvery — the first hit after the
// interval checks, the others in it cost no system call. Such a file may
// so be served for up to diskCheckEvery after its removal. Everything
// that goes through the index (purge, eviction, replacement, a damaged
// file) forgets the descriptor at once, whatever the interval.
//
// A file's contents never change once it is renamed into place (writes
// go to a temporary name), so an open descriptor always reads the entry
// it was opened for. The index forgets a file's descriptor whenever it
// forgets the file (dropLocked: eviction, replacement, purge, removal of
// a damaged file), under the same lock, so a hit never finds a
// descriptor of a file the index no longer holds; a hit already sending
// from it finishes on the old entry, as a hit sending the body of an
// entry replaced meanwhile does from memory. The descriptor is closed
// when its last user lets go.
//
// Concurrent hits share a descriptor and so must not use its offset:
// a DiskBody reads with pread (ReadAt) and hands its section (descriptor,
// offset, length) to the connection, whose sendfile names the offset
// (proxy/listener's deadline.go).
//
// The body's first diskHeadLen bytes are kept in memory with the
// descriptor: fasthttp fills its write buffer behind the response head
// from the body stream before the rest is handed to sendfile, and that
// much comes from head instead of a pread (a syscall less per hit).
const (
	// diskOpenMax bounds the descriptors kept open (and a quarter of the
	// process's limit, diskOpenLimit); beyond, the oldest is closed.
	diskOpenMax = 4096
	diskHeadLen = 4096 // body bytes kept in memory per open file
	// diskCheckEvery is how often at most a kept file's link count is
	// checked (fileGone): how long a file removed by hand may still be
	// served from its descriptor.
	diskCheckEvery = time.Second
)

// diskFD is an open file shared by the index and the hits reading it.
type diskFD struct {
	f    *os.File
	fd   int
	refs atomic.Int32
}

func newDiskFD(f *os.File, refs int32) *diskFD {
	h := &diskFD{f: f, fd: int(f.Fd())}
	h.refs.Store(refs)
	return h
}

// release drops one reference; the last closes the file.
func (h *diskFD) release() {
	if h.refs.Add(-1) == 0 {
		_ = h.f.Close()
	}
}

// diskOpen is what the index keeps of a file held open: the descriptor,
// the file's key, its entry metadata (a body-less entry encoding) and
// where the body is.
type diskOpen struct {
	h               *diskFD
	key, meta, head []byte
	bodyOff, len    int64
	slot            int // in disk.opened
	// checked is when the file was last known to have a name (d.now):
	// when it was opened, then each link count check (d.mu guards it).
	checked int64
}

// keepOpenLocked records h (opened for it, its metadata checked) as it's
// open file, taking one reference for the index, closing the oldest kept
// descriptor when diskOpenMax are open.
func (d *disk) keepOpenLocked(it *diskItem, h *diskFD, key, meta, head []byte, off, n int64) {
	if d.opened == nil {
		d.opened = make([]*diskItem, diskOpenLimit())
	}
	slot := d.openNext
	d.openNext = (slot + 1) % len(d.opened)
	if old := d.opened[slot]; old != nil {
		d.forgetOpenLocked(old)
	}
	h.refs.Add(1)
	it.open = &diskOpen{h: h, key: append([]byte(nil), key...), meta: append([]byte(nil), meta...), head: head, bodyOff: off, len: n, slot: slot, checked: d.now()}
	d.opened[slot] = it
	d.openCount++
}

// now is the disk tier's monotonic clock, in nanoseconds since it was
// opened (a clock read, no system call).
func (d *disk) now() int64 { return int64(time.Since(d.born)) }

// checkDueLocked reports whether o's link count is to be checked now (at
// most once per d.checkEvery), recording the check as done: the hits
// meanwhile skip it.
func (d *disk) checkDueLocked(o *diskOpen) bool {
	now := d.now()
	if now-o.checked < int64(d.checkEvery) {
		return false
	}
	o.checked = now
	return true
}

// forgetOpenLocked lets go of it's open file, if any.
func (d *disk) forgetOpenLocked(it *diskItem) {
	o := it.open
	if o == nil {
		return
	}
	it.open = nil
	d.opened[o.slot] = nil
	d.openCount--
	o.h.release()
}

// DiskBody is a disk entry's body as a response body stream: Read reads
// it with pread from a descriptor other hits may share; Section and
// Advance let a connection send it with sendfile from an explicit offset
// (proxy/listener's FileSection). Close lets go of the descriptor; a
// response body stream is closed once sent.
type DiskBody struct {
	h      *diskFD
	head   []byte // the body's first bytes (read only; shared)
	start  int64  // where the body starts in the file
	off, n int64  // what is left to send: n bytes at off
	// failed counts bodies whose read failed before their end (the
	// disk tier's failedStreams); cut: this one was.
	failed *atomic.Uint64
	cut    bool
}

// Read reads the body's next bytes.
func (b *DiskBody) Read(p []byte) (int, error) {
	if b.h == nil {
		return 0, os.ErrClosed
	}
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	if pos := b.off - b.start; pos < int64(len(b.head)) {
		k := copy(p, b.head[pos:])
		b.off += int64(k)
		b.n -= int64(k)
		return k, nil
	}
	k, err := b.h.f.ReadAt(p, b.off)
	b.off += int64(k)
	b.n -= int64(k)
	if err == io.EOF && k > 0 {
		err = nil
	}
	if err != nil && !b.cut && b.failed != nil {
		// Short of its length (an I/O error, a file shorter than
		// indexed): the response is cut short.
		b.cut = true
		b.failed.Add(1)
	}
	return k, err
}

// Section is the descriptor, offset and length of what is left.
func (b *DiskBody) Section() (fd int, off, n int64) { return b.h.fd, b.off, b.n }

// Advance records k bytes of the section as sent.
func (b *DiskBody) Advance(k int64) {
	b.off += k
	b.n -= k
}

// diskBodies recycles DiskBody values: a hit takes one, its Close gives
// it back (as PieceReader's do), so a disk hit allocates nothing.
var diskBodies = sync.Pool{New: func() any { return new(DiskBody) }}

// newDiskBody is a DiskBody over n bytes of h from off, the body starting
// there (its first bytes in head).
func newDiskBody(h *diskFD, head []byte, off, n int64, failed *atomic.Uint64) *DiskBody {
	b := diskBodies.Get().(*DiskBody)
	*b = DiskBody{h: h, head: head, start: off, off: off, n: n, failed: failed}
	return b
}

// Close lets go of the descriptor and gives b back for another hit: b is
// not used after (a later Close of the same b while no hit holds it does
// nothing, as b.h is nil).
func (b *DiskBody) Close() error {
	if h := b.h; h != nil {
		*b = DiskBody{}
		h.release()
		diskBodies.Put(b)
	}
	return nil
}
