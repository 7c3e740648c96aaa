package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// The disk tier holds entries of at least DiskMinEntry bytes, one file
// each, named by the key's digest: dir/<2 hex>/<16 hex>. A file holds the
// entry as the memory store does (entry.go's encoding: body | meta |
// footer), its body moved last so that the file's end is the body's and
// the file itself can be a response's body stream, framed so that it
// describes itself and can be proven whole:
//
//	header   "SHD1" | version u8 | 3 × 0 | keyLen u32 | tailLen u32 | encLen u64 | 0 u64   (32 bytes)
//	key      [keyLen]byte
//	tail     [tailLen]byte  (the entry's meta and footer)
//	trailer  xxhash64(header‖key‖tail‖body) u64 | "SHD1DONE"                         (16 bytes)
//	body     [encLen-tailLen]byte
//
// A file is written under dir/tmp, fsynced, and renamed into place: the
// rename is the commit (a reader sees the old file or the new one whole),
// the trailer's checksum the proof.
// The directory itself is not fsynced: after a power loss a file may be
// missing — a miss — never wrong. Anything that does not check — a size
// other than the header's lengths, a wrong magic or trailer, another key,
// a checksum mismatch — is a miss and the file is removed.
//
// The index (key digest → size, fetch sequence, LRU links) lives in
// memory, about 100 bytes an entry; bodies are never loaded to be kept.
// It is rebuilt at start by scanning the directory, reading each file's
// header and entry metadata (not its body). Files this process wrote are
// trusted, like the memory store's values; a file found by the scan is
// verified in full (the trailer's checksum) the first time it is read.
const (
	// DiskMinEntry is the default smallest entry (encoded length) the
	// disk tier takes; smaller ones stay in memory. 64 KiB is fastcache's
	// chunk: a larger value is stored there in pieces and copied out of
	// them per hit, while a file held open is sent with sendfile
	// (diskopen.go). Measured with wrk -t2 -c64 against two builds side
	// by side and nginx (its cache on tmpfs), interleaved: a 100 KiB hit
	// cost 33-37 µs of CPU from disk against 44-57 from memory; 64 KiB
	// ones cost the same either way (28-30 µs), 16-32 KiB ones less from
	// memory.
	DiskMinEntry    = 64 << 10
	diskHeaderLen   = 32
	diskTrailerLen  = 16
	diskVersion     = 1
	diskMagic       = "SHD1"
	diskCommitMagic = "SHD1DONE"
	// diskMaxKey bounds the key length a header may claim.
	diskMaxKey = 64 << 10
	// diskBackoff is how long writes skip a disk that failed one.
	diskBackoff = 30 * time.Second
)

// DiskConfig configures the disk tier (Cache.OpenDisk).
type DiskConfig struct {
	Dir  string // the tier's directory (created when missing)
	Size int64  // bytes the tier's files may take in all
	// MinEntry is the smallest encoded entry kept on disk (0:
	// DiskMinEntry); smaller entries stay in memory.
	MinEntry int
}

// DiskStats are the disk tier's counters (Cache.DiskStats).
type DiskStats struct {
	Bytes, Objects, MaxBytes int64 // Bytes: committed files
	// FillBytes is reserved for files being written under tmp (disk
	// fills, and entries about to be committed): Bytes+FillBytes stay
	// within MaxBytes.
	FillBytes                               int64
	Hits, Misses, Writes, Evictions, Errors uint64
	Corrupt                                 uint64
	OpenFiles                               int64 // files kept open for hits (diskopen.go)
	Degraded                                bool  // writes go to memory only (a failing disk)
	DegradedTotal                           uint64
	// Dropped counts entries neither tier kept: the disk failed them (or
	// was backing off) and they were larger than memory takes.
	Dropped uint64
	// FillRefused counts files not started on disk because the files
	// being written already took the tier's size (reserve): disk fills
	// and whole entries about to be written, which went to memory (or,
	// too large for it, were served and not stored).
	FillRefused uint64
}

type diskItem struct {
	digest     uint64
	size       int64 // file size
	fetchSeq   int64
	vary       bool      // a vary marker (never compared by newer-fetch-wins)
	verified   bool      // written by this process, or checked in full since
	open       *diskOpen // the file held open (diskopen.go), or nil
	prev, next *diskItem
}

// disk is the disk tier. mu guards the index and every change of the
// directory's names (rename into place, unlink), so the index and the
// directory agree; file contents are written before, and read after,
// without it.
type disk struct {
	dir, tmp string
	max      int64
	minEntry int
	maxEntry int64
	logger   *slog.Logger

	mu    sync.Mutex
	items map[uint64]*diskItem
	lru   diskItem // sentinel: lru.next is the most recently used
	used  int64    // committed files' bytes
	// filling is the bytes reserved for files being written under tmp
	// (reserve): used+filling stays within max, so that files written
	// while the tier is full do not take the disk beyond its size.
	filling int64
	// opened holds the items whose files are kept open (diskopen.go), a
	// ring: openNext is the next slot taken, closing its holder's file.
	opened    []*diskItem
	openNext  int
	openCount int // items holding an open file
	// born starts the clock of kept files' checks (now); checkEvery is
	// diskCheckEvery (tests shorten it).
	born       time.Time
	checkEvery time.Duration

	// faults, when set (Cache.SetDiskFault, tests), fails disk fill
	// operations it returns an error for.
	faults atomic.Pointer[func(op string) error]

	failedStreams atomic.Uint64 // DiskBody reads that failed (Cache.TruncatedStreams)

	downUntil                                                         atomic.Int64 // unix ns: writes skip the disk until then
	hits, misses, writes, evictions, errs, corrupt, degraded, dropped atomic.Uint64
	fillRefused                                                       atomic.Uint64 // reserve's refusals
}

// OpenDisk adds a disk tier to c (before c is used). The directory is
// scanned and its valid files indexed; files fetched before the
// invalidation table's watermark, and every file when the table was not
// loaded from beside the snapshot (nothing proves them un-purged), are
// removed. It fails only when the directory cannot be created or read.
func (c *Cache) OpenDisk(cfg DiskConfig, logger *slog.Logger) error {
	if cfg.MinEntry <= 0 {
		cfg.MinEntry = DiskMinEntry
	}
	d := &disk{
		dir: filepath.Clean(cfg.Dir), tmp: filepath.Join(cfg.Dir, "tmp"), max: cfg.Size, minEntry: cfg.MinEntry,
		// One entry may take at most a quarter of the tier: a larger one
		// would evict most of it.
		maxEntry: min(cfg.Size/4, int64(c.s.maxEntry)),
		logger:   logger, items: make(map[uint64]*diskItem),
		born: time.Now(), checkEvery: diskCheckEvery,
	}
	d.lru.next, d.lru.prev = &d.lru, &d.lru
	if err := os.MkdirAll(d.tmp, 0o755); err != nil {
		return fmt.Errorf("cache: disk tier %s: %w", cfg.Dir, err)
	}
	// Leftovers of writes a crash interrupted were never committed.
	if ents, err := os.ReadDir(d.tmp); err == nil {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(d.tmp, e.Name()))
		}
	}
	watermark := c.iv.Global.Load()
	if !c.ivLoaded {
		// Without the persisted invalidation table nothing proves a file
		// un-purged: drop them all, and persist the table now so that the
		// next start can keep what this run stores.
		watermark = c.iv.Next()
	}
	start := time.Now()
	// A key is held by one tier; a snapshot saved before a crash may
	// hold an older entry for a key a file holds now: keep the newer.
	kept, dropped, err := d.scan(watermark, func(key []byte, fetchSeq int64) bool {
		b := c.s.get(nil, key)
		var cur Entry
		if len(b) == 0 || DecodeEntry(b, &cur) != nil || cur.FetchSeq <= fetchSeq {
			c.s.del(key)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	logger.Info("cache disk tier opened", "dir", cfg.Dir, "entries", kept, "bytes", d.used, "dropped", dropped, "took", time.Since(start))
	d.mu.Lock()
	d.evictLocked(nil)
	d.mu.Unlock()
	c.d = d
	if !c.ivLoaded && c.path != "" {
		if err := c.SaveInvalidations(); err != nil {
			logger.Warn("invalidation table not saved", "err", err)
		}
	}
	return nil
}

// scan indexes the directory's files, removing those that do not check,
// were fetched before watermark, or that keep refuses (given each file's
// key and fetch sequence).
func (d *disk) scan(watermark int64, keep func(key []byte, fetchSeq int64) bool) (kept, dropped int, err error) {
	dirs, err := os.ReadDir(d.dir)
	if err != nil {
		return 0, 0, fmt.Errorf("cache: disk tier %s: %w", d.dir, err)
	}
	var buf []byte
	for _, sub := range dirs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		files, err := os.ReadDir(filepath.Join(d.dir, sub.Name()))
		if err != nil {
			d.logger.Warn("cache disk tier: unreadable directory", "dir", sub.Name(), "err", err)
			continue
		}
		for _, fe := range files {
			p := filepath.Join(d.dir, sub.Name(), fe.Name())
			digest, perr := strconv.ParseUint(fe.Name(), 16, 64)
			var it *diskItem
			var key []byte
			if perr == nil && len(fe.Name()) == 16 && fe.Name()[:2] == sub.Name() {
				it, key, buf = d.scanFile(p, digest, buf)
			}
			if it == nil || (!it.vary && it.fetchSeq < watermark) || !keep(key, it.fetchSeq) {
				_ = os.Remove(p)
				dropped++
				continue
			}
			d.items[digest] = it
			d.pushFront(it)
			d.used += it.size
			kept++
		}
	}
	return kept, dropped, nil
}

// scanFile reads a file's header, key and entry metadata; nil when they
// do not check. key aliases buf (returned for reuse).
func (d *disk) scanFile(p string, digest uint64, buf []byte) (_ *diskItem, key, _ []byte) {
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, buf
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, buf
	}
	var e Entry
	meta, key, _, _, ok := readMeta(f, st.Size(), digest, nil, buf, &e)
	if !ok {
		return nil, nil, meta
	}
	// key starts readMeta's buffer: key[:0] is it, for reuse.
	return &diskItem{digest: digest, size: st.Size(), fetchSeq: e.FetchSeq, vary: e.Kind == KindVary}, key, key[:0]
}

// diskHeader is a parsed file header.
type diskHeader struct {
	keyLen, tailLen int
	encLen          int64
}

func (h diskHeader) size() int64 {
	return diskHeaderLen + int64(h.keyLen) + h.encLen + diskTrailerLen
}

func appendDiskHeader(dst []byte, keyLen, tailLen int, encLen int64) []byte {
	dst = append(dst, diskMagic...)
	dst = append(dst, diskVersion, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(keyLen))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(tailLen))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(encLen))
	return binary.LittleEndian.AppendUint64(dst, 0)
}

// parseDiskHeader checks a header against the file's size.
func parseDiskHeader(b []byte, fileSize int64) (diskHeader, bool) {
	if len(b) < diskHeaderLen || string(b[:4]) != diskMagic || b[4] != diskVersion || b[5]|b[6]|b[7] != 0 ||
		binary.LittleEndian.Uint64(b[24:]) != 0 {
		return diskHeader{}, false
	}
	h := diskHeader{
		keyLen:  int(binary.LittleEndian.Uint32(b[8:])),
		tailLen: int(binary.LittleEndian.Uint32(b[12:])),
		encLen:  int64(binary.LittleEndian.Uint64(b[16:])),
	}
	if h.keyLen > diskMaxKey || h.tailLen < footerLen+fixedMetaLen || h.encLen < int64(h.tailLen) || h.encLen > 1<<40 || h.size() != fileSize {
		return diskHeader{}, false
	}
	return h, true
}

// readMeta reads and checks f's header, key (against key when not nil,
// else its digest against digest) and entry metadata, which it decodes
// into e as a body-less entry, meta, held in buf with the file's key
// (fileKey; on failure meta is buf, for reuse). The body is the bodyLen
// bytes at off, the file's last.
func readMeta(f *os.File, fileSize int64, digest uint64, key, buf []byte, e *Entry) (meta, fileKey []byte, off, bodyLen int64, ok bool) {
	var hb [diskHeaderLen]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return buf, nil, 0, 0, false
	}
	h, ok := parseDiskHeader(hb[:], fileSize)
	if !ok {
		return buf, nil, 0, 0, false
	}
	need := h.keyLen + h.tailLen + diskTrailerLen
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	if _, err := f.ReadAt(buf, diskHeaderLen); err != nil {
		return buf, nil, 0, 0, false
	}
	kb, tail, tr := buf[:h.keyLen], buf[h.keyLen:h.keyLen+h.tailLen], buf[h.keyLen+h.tailLen:]
	if string(tr[8:]) != diskCommitMagic {
		return buf, nil, 0, 0, false
	}
	if key != nil && string(kb) != string(key) || key == nil && xxhash.Sum64(kb) != digest {
		return buf, nil, 0, 0, false
	}
	// The footer's body length, checked against the header's, is set to
	// 0: the tail decodes as a body-less entry (its checksum, over the
	// body, is the trailer's business).
	ft := tail[len(tail)-footerLen:]
	bodyLen = int64(binary.LittleEndian.Uint32(ft[4:]))
	if bodyLen+int64(h.tailLen) != h.encLen {
		return buf, nil, 0, 0, false
	}
	binary.LittleEndian.PutUint32(ft[4:], 0)
	if DecodeEntryCheck(tail, e, false) != nil {
		return buf, nil, 0, 0, false
	}
	return tail, kb, diskHeaderLen + int64(need), bodyLen, true
}

// verifyFile checks f's trailer checksum over the rest of the file.
func verifyFile(f *os.File, size int64) bool {
	var hb [diskHeaderLen]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return false
	}
	h, ok := parseDiskHeader(hb[:], size)
	if !ok {
		return false
	}
	trAt := diskHeaderLen + int64(h.keyLen+h.tailLen)
	var tr [diskTrailerLen]byte
	if _, err := f.ReadAt(tr[:], trAt); err != nil || string(tr[8:]) != diskCommitMagic {
		return false
	}
	sum := xxhash.New()
	if _, err := io.Copy(sum, io.NewSectionReader(f, 0, trAt)); err != nil {
		return false
	}
	if _, err := io.Copy(sum, io.NewSectionReader(f, trAt+diskTrailerLen, size-trAt-diskTrailerLen)); err != nil {
		return false
	}
	return sum.Sum64() == binary.LittleEndian.Uint64(tr[:])
}

// DecodeDiskFile checks a whole disk tier file's bytes (header, key,
// trailer checksum, entry) and returns the key and the entry encoding
// it holds (enc is a new buffer). It is the check a file found by the
// start-up scan passes on its first read.
func DecodeDiskFile(b []byte) (key, enc []byte, err error) {
	h, ok := parseDiskHeader(b, int64(len(b)))
	if !ok {
		return nil, nil, ErrCorrupt
	}
	trAt := diskHeaderLen + h.keyLen + h.tailLen
	tr := b[trAt : trAt+diskTrailerLen]
	sum := xxhash.New()
	_, _ = sum.Write(b[:trAt])
	_, _ = sum.Write(b[trAt+diskTrailerLen:])
	if string(tr[8:]) != diskCommitMagic || sum.Sum64() != binary.LittleEndian.Uint64(tr) {
		return nil, nil, ErrCorrupt
	}
	key = b[diskHeaderLen : diskHeaderLen+h.keyLen]
	enc = append(append([]byte(nil), b[trAt+diskTrailerLen:]...), b[diskHeaderLen+h.keyLen:trAt]...)
	var e Entry
	if DecodeEntryCheck(enc, &e, true) != nil || len(enc)-len(e.Body) != h.tailLen {
		return nil, nil, ErrCorrupt
	}
	return key, enc, nil
}

// AppendDiskFile appends the file the disk tier writes for key and enc.
func AppendDiskFile(dst, key, enc []byte) []byte {
	tailLen := entryTailLen(enc)
	body, tail := enc[:len(enc)-tailLen], enc[len(enc)-tailLen:]
	start := len(dst)
	dst = appendDiskHeader(dst, len(key), tailLen, int64(len(enc)))
	dst = append(append(dst, key...), tail...)
	sum := xxhash.New()
	_, _ = sum.Write(dst[start:])
	_, _ = sum.Write(body)
	dst = binary.LittleEndian.AppendUint64(dst, sum.Sum64())
	return append(append(dst, diskCommitMagic...), body...)
}

// entryTailLen is the length of an encoding's meta and footer.
func entryTailLen(enc []byte) int {
	if len(enc) < footerLen {
		return len(enc)
	}
	return min(int(binary.LittleEndian.Uint32(enc[len(enc)-footerLen:]))+footerLen, len(enc))
}

func (d *disk) path(digest uint64) string {
	const hexDigits = "0123456789abcdef"
	var name [16]byte
	for i := len(name) - 1; i >= 0; i-- {
		name[i] = hexDigits[digest&15]
		digest >>= 4
	}
	// One allocation: conversions inside a concatenation do not copy.
	return d.dir + "/" + string(name[:2]) + "/" + string(name[:])
}

// takes reports whether an entry of n bytes goes to the disk tier now.
func (d *disk) takes(n int) bool {
	return d != nil && n >= d.minEntry && int64(n) <= d.maxEntry && time.Now().UnixNano() >= d.downUntil.Load()
}

// fault is the error a test injected for op, if any.
func (d *disk) fault(op string) error {
	if f := d.faults.Load(); f != nil {
		return (*f)(op)
	}
	return nil
}

// SetDiskFault makes the disk tier's fill operations ("write" of a body
// chunk, "finish") fail with what f returns for them (nil: succeed);
// for tests of a disk failing mid-fill. It does nothing without a tier.
func (c *Cache) SetDiskFault(f func(op string) error) {
	if c.d != nil {
		c.d.faults.Store(&f)
	}
}

// fail records a failing disk operation: writes skip the disk for
// diskBackoff (entries stay in memory), never a crash or a wrong answer.
func (d *disk) fail(op string, err error) {
	d.errs.Add(1)
	now := time.Now()
	if prev := d.downUntil.Swap(now.Add(diskBackoff).UnixNano()); prev < now.UnixNano() {
		d.degraded.Add(1)
		d.logger.Warn("cache disk tier failing: writes go to memory only", "op", op, "err", err, "retry_in", diskBackoff)
	}
}

// writeFailed records a write's error: the disk's (fail), or the
// tier's room taken by files being written (errDiskFull: the entry goes
// to memory as when the disk backs off, and the disk is not failing).
func (d *disk) writeFailed(err error) {
	if err != errDiskFull {
		d.fail("write", err)
	}
}

// diskWrite is a file written under tmp, not yet committed; its size
// is reserved (reserve) until commit or abort.
type diskWrite struct {
	tmp  string
	size int64
}

// errDiskFull is reserve's refusal: the files being written already take
// the tier's size. Not a failing disk.
var errDiskFull = errors.New("cache: disk tier full of files being written")

// reserve counts n bytes of a file about to be written under tmp in the
// tier's size, evicting the least recently used files as a commit would,
// so that committed and in-progress files stay within it. It refuses
// (false, evicting nothing) when the files being written leave no room.
// unreserve (or commit, abort) gives the bytes back.
func (d *disk) reserve(n int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.filling+n > d.max {
		d.fillRefused.Add(1)
		return false
	}
	d.filling += n
	d.evictLocked(nil)
	return true
}

// unreserve gives back n bytes reserve counted.
func (d *disk) unreserve(n int64) {
	d.mu.Lock()
	d.filling -= n
	d.mu.Unlock()
}

// write writes key's file under tmp, fsynced; commit renames it into
// place. Errors are the disk's (ENOSPC, EIO, permissions).
// The file's size is reserved first: errDiskFull when it cannot be.
func (d *disk) write(key, enc []byte) (w diskWrite, err error) {
	size := int64(diskHeaderLen + len(key) + len(enc) + diskTrailerLen)
	if !d.reserve(size) {
		return w, errDiskFull
	}
	f, err := d.createTemp()
	if err != nil {
		d.unreserve(size)
		return w, err
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = os.Remove(f.Name())
			d.unreserve(size)
		}
	}()
	var hb [diskHeaderLen + diskTrailerLen]byte
	tailLen := entryTailLen(enc)
	body, tail := enc[:len(enc)-tailLen], enc[len(enc)-tailLen:]
	hdr := appendDiskHeader(hb[:0], len(key), tailLen, int64(len(enc)))
	h := xxhash.New()
	for _, p := range [][]byte{hdr, key, tail, body} {
		_, _ = h.Write(p)
	}
	tr := append(binary.LittleEndian.AppendUint64(hb[diskHeaderLen:diskHeaderLen], h.Sum64()), diskCommitMagic...)
	for _, p := range [][]byte{hdr, key, tail, tr, body} {
		if _, err = f.Write(p); err != nil {
			return w, err
		}
	}
	if err = f.Sync(); err != nil {
		return w, err
	}
	if err = f.Close(); err != nil {
		return w, err
	}
	return diskWrite{tmp: f.Name(), size: size}, nil
}

// abort removes a write that is not committed, and its reservation.
func (d *disk) abort(w diskWrite) {
	_ = os.Remove(w.tmp)
	d.unreserve(w.size)
}

// commit renames w into place as key's file and indexes it (the
// caller holds key's stripe lock), evicting the least recently used
// files beyond the tier's size. w's reservation becomes the file's
// count (or is given back when the rename fails): counted once.
func (d *disk) commit(digest uint64, w diskWrite, e *Entry) error {
	p := d.path(digest)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.filling -= w.size
	err := os.Rename(w.tmp, p)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.Rename(w.tmp, p)
		}
	}
	if err != nil {
		_ = os.Remove(w.tmp)
		// The key's older file goes too: the entry that failed is newer,
		// and a file left unindexed would come back at the next start.
		d.dropLocked(digest, true)
		return err
	}
	d.dropLocked(digest, false)
	it := &diskItem{digest: digest, size: w.size, fetchSeq: e.FetchSeq, vary: e.Kind == KindVary, verified: true}
	d.items[digest] = it
	d.pushFront(it)
	d.used += it.size
	d.writes.Add(1)
	d.evictLocked(it)
	return nil
}

// evictLocked removes the least recently used files until the tier, with
// the files being written, fits its size, never keep.
func (d *disk) evictLocked(keep *diskItem) {
	for d.used+d.filling > d.max {
		it := d.lru.prev
		if it == &d.lru || it == keep {
			return
		}
		d.evictions.Add(1)
		d.dropLocked(it.digest, true)
	}
}

// dropLocked forgets digest's file, removing it when unlink.
func (d *disk) dropLocked(digest uint64, unlink bool) {
	it := d.items[digest]
	if it == nil {
		return
	}
	delete(d.items, digest)
	d.forgetOpenLocked(it)
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
	d.used -= it.size
	if unlink {
		if err := os.Remove(d.path(digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.errs.Add(1)
		}
	}
}

// del removes digest's file.
func (d *disk) del(digest uint64) {
	d.mu.Lock()
	if d.items[digest] != nil {
		d.dropLocked(digest, true)
	}
	d.mu.Unlock()
}

func (d *disk) pushFront(it *diskItem) {
	it.prev, it.next = &d.lru, d.lru.next
	d.lru.next.prev = it
	d.lru.next = it
}

// stored returns what the index says of digest (present, its fetch
// sequence, whether it is a vary marker).
func (d *disk) stored(digest uint64) (ok bool, fetchSeq int64, vary bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	it := d.items[digest]
	if it == nil {
		return false, 0, false
	}
	return true, it.fetchSeq, it.vary
}

// open returns key's file, open, and its metadata in buf (see readMeta):
// the body is bodyLen bytes at off, its first len(head) bytes also in
// head (nil when the file is not kept open). The caller releases h. A
// file held open (diskopen.go) costs no syscall; another is opened,
// checked, and kept open. A file that does not check is removed and is
// a miss.
func (d *disk) open(key, buf []byte, digest uint64) (h *diskFD, head, meta []byte, off, bodyLen int64, ok bool) {
	d.mu.Lock()
	it := d.items[digest]
	if it == nil {
		d.mu.Unlock()
		d.misses.Add(1)
		return nil, nil, buf, 0, 0, false
	}
	it.prev.next, it.next.prev = it.next, it.prev
	d.pushFront(it)
	if o := it.open; o != nil {
		if string(o.key) != string(key) {
			d.mu.Unlock()
			d.misses.Add(1) // another key of the same digest
			return nil, nil, buf, 0, 0, false
		}
		h := o.h
		h.refs.Add(1)
		meta = append(buf[:0], o.meta...)
		check := d.checkDueLocked(o)
		d.mu.Unlock()
		if check && fileGone(h.fd) {
			// Removed behind the index's back (the directory deleted):
			// gone for good, and not served from now on.
			h.release()
			d.mu.Lock()
			if d.items[digest] == it {
				d.dropLocked(digest, false)
			}
			d.mu.Unlock()
			d.misses.Add(1)
			return nil, nil, meta[:0], 0, 0, false
		}
		d.hits.Add(1)
		return h, o.head, meta, o.bodyOff, o.len, true
	}
	verified := it.verified
	d.mu.Unlock()
	f, meta, off, bodyLen, ok := d.openFile(key, buf, digest, verified)
	if !ok {
		return nil, nil, meta, 0, 0, false
	}
	h = newDiskFD(f, 1)
	head = make([]byte, min(bodyLen, diskHeadLen))
	if _, err := f.ReadAt(head, off); err != nil {
		head = nil
	}
	d.mu.Lock()
	// Kept open only when the index still holds the file opened: under
	// mu, an item replaced or dropped meanwhile is no longer items'.
	if d.items[digest] == it {
		it.verified = true
		if it.open == nil && head != nil {
			d.keepOpenLocked(it, h, key, meta, head, off, bodyLen)
		}
	}
	d.mu.Unlock()
	d.hits.Add(1)
	return h, head, meta, off, bodyLen, true
}

// openFile opens key's file, checks it (in full unless verified) and
// reads its metadata into buf. A file that does not check is removed and
// is a miss.
func (d *disk) openFile(key, buf []byte, digest uint64, verified bool) (f *os.File, meta []byte, off, bodyLen int64, ok bool) {
	f, err := os.Open(d.path(digest))
	if err != nil {
		// Evicted or replaced meanwhile (a miss), removed by someone
		// else (forgotten: under mu the index and the names agree, so a
		// file indexed there and absent is gone for good), or a failing
		// disk.
		if errors.Is(err, fs.ErrNotExist) {
			d.mu.Lock()
			if _, serr := os.Stat(d.path(digest)); d.items[digest] != nil && errors.Is(serr, fs.ErrNotExist) {
				d.dropLocked(digest, false)
			}
			d.mu.Unlock()
		} else {
			d.fail("open", err)
		}
		d.misses.Add(1)
		return nil, buf, 0, 0, false
	}
	var size int64 = -1
	st, err := f.Stat()
	if err == nil {
		size = st.Size()
		if !verified && !verifyFile(f, size) {
			err = ErrCorrupt
		}
	}
	if err == nil {
		var e Entry
		meta, _, off, bodyLen, ok = readMeta(f, size, digest, key, buf, &e)
		if !ok {
			err = ErrCorrupt
		}
	}
	if err != nil {
		f.Close()
		d.corrupt.Add(1)
		d.misses.Add(1)
		d.mu.Lock()
		// Remove it only when it is still the indexed file.
		if it := d.items[digest]; it != nil && it.size == size {
			d.dropLocked(digest, true)
		}
		d.mu.Unlock()
		return nil, meta, 0, 0, false
	}
	return f, meta, off, bodyLen, true
}

// stats reads the tier's counters.
func (d *disk) stats() DiskStats {
	d.mu.Lock()
	s := DiskStats{Bytes: d.used, FillBytes: d.filling, Objects: int64(len(d.items)), MaxBytes: d.max, OpenFiles: int64(d.openCount)}
	d.mu.Unlock()
	s.Hits, s.Misses, s.Writes = d.hits.Load(), d.misses.Load(), d.writes.Load()
	s.Evictions, s.Errors, s.Corrupt = d.evictions.Load(), d.errs.Load(), d.corrupt.Load()
	s.Degraded = time.Now().UnixNano() < d.downUntil.Load()
	s.DegradedTotal, s.Dropped = d.degraded.Load(), d.dropped.Load()
	s.FillRefused = d.fillRefused.Load()
	return s
}
