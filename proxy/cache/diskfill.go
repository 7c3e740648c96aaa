package cache

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/cespare/xxhash/v2"
)

// A disk fill writes an entry bound for the disk tier as its body
// arrives (proxy's streamed fills): the body goes straight to its place
// in a file under tmp — the file's last bytes, after room left for the
// header, key, entry meta and trailer (disk.go's layout) — and readers
// read it back from the file as it lands, so a fill holds no copy of the
// object in memory. Store finishes the file (the entry's footer, whose
// checksum runs over the body as it was written, and the file's trailer,
// whose checksum puts the meta before the body and so re-reads the body
// from the file, in chunks) and commits it through the same checks as
// Cache.Store: the invalidation verdict, newer-fetch-wins under the
// key's stripe lock, the rename into place. A fill that fails or is
// refused removes its file. The file stays open for the fill's readers
// until Close, committed or not.

// diskFillChunk is the buffer the trailer's checksum re-reads the body with.
const diskFillChunk = 256 << 10

// DiskFill is an entry written to the disk tier as its body arrives. Its
// methods other than ReadAt are called by one goroutine (the fill's).
type DiskFill struct {
	c       *Cache
	f       *os.File
	key     []byte
	head    []byte // the entry's meta and footer with an empty body
	bodyOff int64  // where the body starts in the file
	size    int    // the body's length
	sum     *xxhash.Digest
	done    bool // committed, refused or aborted: the file is no longer tmp's
}

// reserved is the file's size, reserved in the tier's (disk.reserve)
// from the start until Store hands it to the commit, or Abort.
func (w *DiskFill) reserved() int64 { return w.bodyOff + int64(w.size) }

// StartDiskFill starts writing key's entry of a size-byte body whose
// body-less encoding (meta and footer, as AppendEntry makes it with an
// empty body) is head, when the disk tier would take the whole entry now
// (Store's rule). The whole file's size counts in the tier's while it is
// written (disk.reserve, evicting as a commit would). It returns nil when
// the tier would not take it, when the files being written leave no room,
// or when the temporary file cannot be created (the tier is then failing:
// see disk.fail).
func (c *Cache) StartDiskFill(key, head []byte, size int) *DiskFill {
	if !c.d.takes(size+len(head)) || len(head) < footerLen {
		return nil
	}
	w := &DiskFill{
		c: c, key: key, head: head, size: size, sum: xxhash.New(),
		bodyOff: int64(diskHeaderLen + len(key) + len(head) + diskTrailerLen),
	}
	if !c.d.reserve(w.reserved()) {
		return nil
	}
	f, err := c.d.createTemp()
	if err != nil {
		c.d.unreserve(w.reserved())
		c.d.fail("write", err)
		return nil
	}
	w.f = f
	return w
}

// createTemp creates a file under tmp (recreating tmp once when it was
// removed under us).
func (d *disk) createTemp() (*os.File, error) {
	f, err := os.CreateTemp(d.tmp, "w-*")
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(d.tmp, 0o755); err == nil {
			f, err = os.CreateTemp(d.tmp, "w-*")
		}
	}
	return f, err
}

// WriteAt writes body bytes at body offset off. Bodies are written in
// order, each byte once. A failing write is the disk's: the tier backs
// off (degraded) and the caller gives the fill up or goes on in memory.
func (w *DiskFill) WriteAt(b []byte, off int64) error {
	if err := w.c.d.fault("write"); err != nil {
		w.c.d.fail("write", err)
		return err
	}
	if _, err := w.f.WriteAt(b, w.bodyOff+off); err != nil {
		w.c.d.fail("write", err)
		return err
	}
	_, _ = w.sum.Write(b)
	return nil
}

// ReadAt reads body bytes at body offset off (bytes WriteAt wrote).
// Safe for concurrent use, until Close.
func (w *DiskFill) ReadAt(b []byte, off int64) (int, error) {
	return w.f.ReadAt(b, w.bodyOff+off)
}

// Store finishes and commits the entry e (whose body is the size bytes
// written) as Cache.Store does: Refused when an invalidation came after
// its fetch started or the key holds a newer fetch (the file is
// removed), Dropped when the disk failed to finish or commit it (the key
// then holds nothing: the entry won), else Stored. The body is not
// copied into memory in any case.
func (w *DiskFill) Store(e *Entry, o PutOptions) PutResult {
	c := w.c
	w.done = true
	// Store's verdict, before the file is finished (a refused fill is
	// not re-read) and again after (finishing a large file takes a
	// while): the later a purge lands, the earlier it is seen.
	dead, _ := c.iv.Verdict(e.FetchSeq, e.URLDigest, e.Tags)
	var dw *diskWrite
	if !dead {
		if err := w.finish(); err != nil {
			c.d.fail("write", err)
		} else {
			dw = &diskWrite{tmp: w.f.Name(), size: w.reserved()}
			dead, _ = c.iv.Verdict(e.FetchSeq, e.URLDigest, e.Tags)
		}
	}
	if dead || dw == nil {
		_ = os.Remove(w.f.Name())
		c.d.unreserve(w.reserved())
		if dead {
			return Refused
		}
	}
	// dw's reservation goes with it: commit or abort gives it back.
	return c.storeWritten(w.key, nil, e, o, dw, true)
}

// finish writes the file's header, key, entry meta with its footer, and
// trailer, and syncs it.
func (w *DiskFill) finish() error {
	if err := w.c.d.fault("finish"); err != nil {
		return err
	}
	meta := w.head[:len(w.head)-footerLen]
	_, _ = w.sum.Write(meta)
	hdr := make([]byte, 0, int(w.bodyOff))
	hdr = appendDiskHeader(hdr, len(w.key), len(w.head), int64(w.size+len(w.head)))
	hdr = append(append(hdr, w.key...), meta...)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(meta)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(w.size))
	hdr = binary.LittleEndian.AppendUint64(hdr, w.sum.Sum64())
	// The trailer's checksum runs over header‖key‖tail‖body.
	sum := xxhash.New()
	_, _ = sum.Write(hdr)
	buf := make([]byte, min(diskFillChunk, max(w.size, 1)))
	if _, err := io.CopyBuffer(sum, io.NewSectionReader(w.f, w.bodyOff, int64(w.size)), buf); err != nil {
		return err
	}
	hdr = binary.LittleEndian.AppendUint64(hdr, sum.Sum64())
	hdr = append(hdr, diskCommitMagic...)
	if _, err := w.f.WriteAt(hdr, 0); err != nil {
		return err
	}
	return w.f.Sync()
}

// Abort removes the file of a fill that is not stored (its body failed,
// or it is given up for memory). Readers may go on reading it until Close.
func (w *DiskFill) Abort() {
	if !w.done {
		w.done = true
		_ = os.Remove(w.f.Name())
		w.c.d.unreserve(w.reserved())
	}
}

// Close closes the file, once the fill and its readers are done with it;
// a fill neither stored nor aborted is aborted.
func (w *DiskFill) Close() error {
	w.Abort()
	return w.f.Close()
}

// JoinEntry appends head's meta (head being an entry encoded with an
// empty body, as AppendEntry makes it) to body, with the footer for
// both: the entry's encoding with that body, in body's buffer when its
// capacity allows.
func JoinEntry(body, head []byte) []byte {
	meta := head[:len(head)-footerLen]
	n := len(body)
	dst := append(body, meta...)
	sum := xxhash.Sum64(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(meta)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	return binary.LittleEndian.AppendUint64(dst, sum)
}
