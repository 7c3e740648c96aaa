package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/VictoriaMetrics/fastcache"

	"github.com/shield-proxy/shield/cachekey"
)

// Cache is one node's cache: the entry store (store.go), the
// invalidation table (inval.go), the namespace versions
// (namespaces.go), and the rule that orders writes of one key (Put).
type Cache struct {
	s    *store
	d    *disk // the disk tier (disk.go); nil: memory only
	iv   *Invalidations
	ns   *Namespaces
	path string // snapshot path; "" keeps nothing on disk
	// stripes order the writes of one key (stripe): the check of what
	// the key holds and the write are one step under its lock.
	stripes [64]sync.Mutex
	saveMu  sync.Mutex // serialises saving the invalidation table
	// ivLoaded: the invalidation table was loaded from beside the
	// snapshot, so entries fetched before this start can be checked.
	ivLoaded bool
	// memMax is the largest entry memory takes when a disk tier does not
	// (a failing disk): an eighth of it, as config bounds
	// max_object_size without a tier.
	memMax int
}

// Open loads the snapshot at path when there is one (with its
// invalidation table and namespace versions), else starts empty: size is
// the store's size in bytes, maxObject the largest body an entry may
// hold. A missing file is normal (first start); a bad one is logged and
// ignored: the cache is an optimisation, never a reason not to start.
// path "" keeps nothing on disk.
func Open(path string, size, maxObject int, logger *slog.Logger) *Cache {
	c := &Cache{s: openStore(path, size, maxObject, logger), iv: newInvalidations(), ns: newNamespaces(), path: path, memMax: size / 8}
	if path != "" {
		if err := c.ns.load(path + ".ns"); err != nil && !os.IsNotExist(err) {
			logger.Warn("namespace versions unreadable; dropping the snapshot", "err", err)
			c.iv.InvalidateAll()
		}
		switch err := c.iv.load(path + ".inval"); {
		case err == nil:
			c.ivLoaded = true
		case !os.IsNotExist(err):
			// Without the table we cannot tell which snapshot entries
			// were purged: none of them is served.
			logger.Warn("invalidation table unreadable; dropping the snapshot", "err", err)
			c.iv.InvalidateAll()
		}
	}
	return c
}

// Path is the snapshot path Open was given ("" when none).
func (c *Cache) Path() string { return c.path }

// Invalidations is the node's invalidation table.
func (c *Cache) Invalidations() *Invalidations { return c.iv }

// Namespaces are the node's namespace versions.
func (c *Cache) Namespaces() *Namespaces { return c.ns }

// Fastcache is the store's fastcache, for its statistics.
func (c *Cache) Fastcache() *fastcache.Cache { return c.s.c }

// Get appends the value stored under k to dst[:0] and returns it, or
// returns an empty slice (with dst's capacity) when there is none. An
// entry in the disk tier is read whole into dst.
func (c *Cache) Get(dst, k []byte) []byte {
	v, _ := c.GetVerified(dst, k)
	return v
}

// GetVerified is Get, and reports whether the value is known intact
// without checking its entry checksum (written by this process, or a
// disk tier file checked in full: decode it with
// DecodeEntryCheck(b, e, !verified)). It does not allocate when dst is
// large enough and the entry is in memory.
func (c *Cache) GetVerified(dst, k []byte) (v []byte, verified bool) {
	v, verified = c.s.getVerified(dst, k)
	if len(v) > 0 || c.d == nil {
		return v, verified
	}
	return c.getDisk(v, k)
}

// GetVerifiedMem is GetVerified from memory only, for a reader that must
// not wait: the disk tier is not looked at, and an entry stored in pieces
// of max bytes or more is not read; both come back empty, as misses.
func (c *Cache) GetVerifiedMem(dst, k []byte, max int) (v []byte, verified bool) {
	return c.s.getMem(dst, k, max)
}

// GetVerifiedOrFile is GetVerified, except that an entry held by the disk
// tier comes back as its metadata — a body-less entry encoding, decoded
// like any other (its Body is empty) — with f reading its bodyLen-byte
// body from the file (diskopen.go). The caller closes f (a response body
// stream does). f is nil for entries in memory and misses.
func (c *Cache) GetVerifiedOrFile(dst, k []byte) (v []byte, verified bool, f *DiskBody, bodyLen int64) {
	v, verified, f, _, bodyLen = c.GetVerifiedOrStream(dst, k, 0)
	return v, verified, f, bodyLen
}

// GetVerifiedOrStream is GetVerifiedOrFile, and also streams large
// entries from memory: one this process stored in pieces whose encoding
// is at least minMem bytes (minMem > 0) comes back as its metadata too,
// with r reading its bodyLen-byte body from the pieces (piecestream.go).
// The caller closes r (a response body stream does). At most one of f
// and r is not nil. Only the fresh-hit path uses it: everything else
// takes GetVerified.
func (c *Cache) GetVerifiedOrStream(dst, k []byte, minMem int) (v []byte, verified bool, f *DiskBody, r *PieceReader, bodyLen int64) {
	v, verified, r, bodyLen = c.s.getStream(dst, k, minMem)
	if len(v) > 0 || c.d == nil {
		return v, verified, nil, r, bodyLen
	}
	h, head, meta, off, n, ok := c.d.open(k, v[:0], cachekey.Digest(k))
	if !ok {
		return meta[:0], false, nil, nil, 0
	}
	return meta, true, newDiskBody(h, head, off, n, &c.d.failedStreams), nil, n
}

// TruncatedStreams counts response body streams the cache ended before
// their end: memory entries a piece of which was evicted while they were
// sent (PieceReader), and disk tier bodies whose read failed (DiskBody's
// Read; a failure inside sendfile is not told apart from the client's).
func (c *Cache) TruncatedStreams() (evicted, disk uint64) {
	evicted = c.s.evictedStreams.Load()
	if c.d != nil {
		disk = c.d.failedStreams.Load()
	}
	return evicted, disk
}

// getDisk reads k's entry from the disk tier into dst.
func (c *Cache) getDisk(dst, k []byte) ([]byte, bool) {
	h, head, meta, off, n, ok := c.d.open(k, nil, cachekey.Digest(k))
	if !ok {
		return dst[:0], false
	}
	defer h.release()
	encLen := n + int64(len(meta))
	if encLen > int64(c.s.maxEntry) {
		return dst[:0], false
	}
	if int64(cap(dst)) < encLen {
		dst = make([]byte, 0, encLen)
	}
	dst = dst[:encLen]
	copy(dst, head)
	if _, err := h.f.ReadAt(dst[len(head):n], off+int64(len(head))); err != nil {
		c.d.fail("read", err)
		return dst[:0], false
	}
	// The body goes back before the meta, whose footer names it again.
	copy(dst[n:], meta)
	binary.LittleEndian.PutUint32(dst[encLen-footerLen+4:], uint32(n))
	return dst, true
}

// Del deletes what is stored under k, in either tier.
func (c *Cache) Del(k []byte) {
	c.s.del(k)
	if c.d != nil {
		c.d.del(cachekey.Digest(k))
	}
}

// DiskStats are the disk tier's counters; ok is false without one.
func (c *Cache) DiskStats() (s DiskStats, ok bool) {
	if c.d == nil {
		return s, false
	}
	return c.d.stats(), true
}

// Vary is the marker a varying response's Put keeps under the primary
// key: the Vary names, and the instant from which variants are valid.
type Vary struct {
	Primary []byte   // the key without the variant's values
	Names   [][]byte // lower-case Vary names, as the variant's key was built from
	At      int64    // the marker's storedAt (unix ns): the response time
}

// PutOptions are what some writes need besides the entry.
type PutOptions struct {
	// Vary, when set, has Put keep the vary marker under Vary.Primary
	// (rewritten only when it names other headers).
	Vary *Vary
	// IfAbsent stores only when the key holds nothing at all (an entry
	// pushed by a leaving node: its fetch sequence is another node's
	// clock, so it is not compared with what this node fetched).
	IfAbsent bool
}

// PutResult is what Store did with an entry.
type PutResult uint8

const (
	// Stored: a tier holds the entry now.
	Stored PutResult = iota + 1
	// Refused: the entry lost to an invalidation or a newer fetch (or,
	// with IfAbsent, to what the key held); nothing changed.
	Refused
	// Dropped: the entry won, but no tier could keep it — the disk tier
	// failed to write it (or is backing off after a failure) and it is
	// larger than memory takes. What the key held is gone (older).
	Dropped
)

// Put is Store, reporting whether the entry is now stored (false when
// it was refused or dropped).
func (c *Cache) Put(key, enc []byte, e *Entry, o PutOptions) bool {
	return c.Store(key, enc, e, o) == Stored
}

// Store stores enc, the encoding of e, under key, and is the only way an
// entry is written (fills, refreshes, hit-for-miss records, near copies,
// compressed siblings, hand-offs). It refuses (Refused):
//
//   - an entry an invalidation of its URL or tags came after the fetch
//     started (inval.go): a fetch that raced a purge cannot undo it;
//   - an entry whose fetch started before that of the one the key holds
//     (the answer whose fetch started later wins, whatever order they
//     arrive in), or, with IfAbsent, any entry when the key holds one.
//
// The check of what the key holds and the write are one step under the
// key's stripe lock, so a write that lands between them cannot be
// overwritten. The rule spans both tiers: a key is held by one of them,
// and the entry compared is whichever holds it. An entry for the disk
// tier is written to a temporary file (and fsynced) before the lock is
// taken; the commit under the lock is a rename. An entry the failing
// disk could not take goes to memory when it fits cache.size/8, and is
// Dropped otherwise.
func (c *Cache) Store(key, enc []byte, e *Entry, o PutOptions) PutResult {
	if dead, _ := c.iv.Verdict(e.FetchSeq, e.URLDigest, e.Tags); dead {
		return Refused
	}
	var w *diskWrite
	tried := c.d.takes(len(enc))
	if tried {
		dw, err := c.d.write(key, enc)
		if err != nil {
			c.d.writeFailed(err)
		} else {
			w = &dw
		}
	}
	return c.storeWritten(key, enc, e, o, w, tried)
}

// storeWritten is Store past the invalidation check and the disk write:
// the check of what key holds and the write, under its stripe lock. w,
// when not nil, is the entry already written for the disk tier; enc is
// nil when the entry is only there (a disk fill, diskfill.go), and is then
// Dropped when w is nil or fails to commit. tried: the disk write was
// already attempted (w nil: it was not made), and is not tried again.
func (c *Cache) storeWritten(key, enc []byte, e *Entry, o PutOptions, w *diskWrite, tried bool) PutResult {
	mu := c.stripe(cachekey.Digest(key))
	mu.Lock()
	defer mu.Unlock()
	return c.putLocked(key, enc, e, o, w, tried)
}

// putLocked is Store past the invalidation check; the caller holds key's
// stripe lock. w, when not nil, is enc already written for the disk
// tier: it is committed, or removed when the write is refused; tried: a
// write was attempted already (storeWritten).
func (c *Cache) putLocked(key, enc []byte, e *Entry, o PutOptions, w *diskWrite, tried bool) PutResult {
	if o.IfAbsent && c.holds(key) || !o.IfAbsent && c.newerStored(key, e.FetchSeq) {
		if w != nil {
			c.d.abort(*w)
		}
		return Refused
	}
	if v := o.Vary; v != nil && len(v.Names) > 0 {
		// Keep the marker when it already names the same headers:
		// rewriting it would invalidate every other variant.
		var cur Entry
		curBuf := c.s.get(nil, v.Primary)
		if len(curBuf) == 0 || DecodeEntry(curBuf, &cur) != nil || cur.Kind != KindVary || !sameVary(&cur, v.Names) {
			marker := Entry{Kind: KindVary, StoredAt: v.At, KeyDigest: cachekey.Digest(v.Primary), FetchSeq: e.FetchSeq, URLDigest: e.URLDigest}
			c.s.set(v.Primary, AppendEntry(nil, &marker, v.Names, nil))
			if c.d != nil {
				c.d.del(cachekey.Digest(v.Primary))
			}
		}
	}
	if !c.setLocked(key, enc, e, w, tried) {
		return Dropped
	}
	return Stored
}

// setLocked writes enc under key in the tier it belongs to, and removes
// it from the other (the caller holds key's stripe lock). It reports
// false when neither keeps it: the disk failed (or is backing off) and
// enc is larger than memory takes (or nil: a disk fill's entry, held by
// w only); the key then holds nothing. Unless tried (Store attempted the
// write before taking the lock), an entry for the disk tier not written
// yet is written here.
func (c *Cache) setLocked(key, enc []byte, e *Entry, w *diskWrite, tried bool) bool {
	if c.d == nil {
		c.s.set(key, enc)
		return true
	}
	digest := cachekey.Digest(key)
	if w == nil && !tried && c.d.takes(len(enc)) {
		// PutDerived's entries are written here, under the lock.
		if dw, err := c.d.write(key, enc); err != nil {
			c.d.writeFailed(err)
		} else {
			w = &dw
		}
	}
	if w != nil {
		if err := c.d.commit(digest, *w, e); err != nil {
			c.d.fail("rename", err)
		} else {
			c.s.del(key)
			return true
		}
	}
	c.d.del(digest)
	if enc == nil || len(enc) > c.memMax {
		c.s.del(key)
		c.d.dropped.Add(1)
		return false
	}
	c.s.set(key, enc)
	return true
}

// holds reports whether either tier holds an entry under key (callers
// hold its stripe lock).
func (c *Cache) holds(key []byte) bool {
	if cur := c.s.get(nil, key); len(cur) > 0 {
		return true
	}
	if c.d == nil {
		return false
	}
	ok, _, _ := c.d.stored(cachekey.Digest(key))
	return ok
}

// PutDerived returns the entry stored under key when it was derived from
// the answer of fetch sequence fetchSeq stored at storedAt (a compressed
// sibling of that identity entry), else the one build encodes now, Put
// under key. Callers for one key are serialised on its stripe, so
// concurrent requests after an eviction build it once. built says build
// ran; its error is returned as it is.
func (c *Cache) PutDerived(key []byte, fetchSeq, storedAt int64, build func() ([]byte, error)) (enc []byte, built bool, err error) {
	digest := cachekey.Digest(key)
	mu := c.stripe(digest)
	mu.Lock()
	defer mu.Unlock()
	if b := c.Get(nil, key); len(b) > 0 {
		var s Entry
		if DecodeEntry(b, &s) == nil && s.KeyDigest == digest && s.FetchSeq == fetchSeq && s.StoredAt == storedAt {
			return b, false, nil
		}
	}
	enc, err = build()
	if err != nil {
		return nil, true, err
	}
	var e Entry
	if err := DecodeEntryCheck(enc, &e, false); err != nil {
		return nil, true, fmt.Errorf("cache: derived entry: %w", err)
	}
	if dead, _ := c.iv.Verdict(e.FetchSeq, e.URLDigest, e.Tags); !dead {
		c.putLocked(key, enc, &e, PutOptions{}, nil, false)
	}
	return enc, true, nil
}

// stripe is the lock ordering stores of one key.
func (c *Cache) stripe(digest uint64) *sync.Mutex { return &c.stripes[digest%uint64(len(c.stripes))] }

// newerStored reports whether key holds an entry whose fetch started
// after seq (callers hold the key's stripe lock).
func (c *Cache) newerStored(key []byte, seq int64) bool {
	b := c.s.get(nil, key)
	var cur Entry
	if len(b) > 0 {
		return DecodeEntry(b, &cur) == nil && cur.Kind != KindVary && cur.FetchSeq > seq
	}
	if c.d == nil {
		return false
	}
	ok, fetchSeq, vary := c.d.stored(cachekey.Digest(key))
	return ok && !vary && fetchSeq > seq
}

func sameVary(e *Entry, vary [][]byte) bool {
	if e.VaryCount != len(vary) {
		return false
	}
	it := e.VaryNames()
	for _, v := range vary {
		n, ok := it.Next()
		if !ok || !bytes.Equal(n, v) {
			return false
		}
	}
	return true
}

// SaveSnapshot writes the store's snapshot to the path Open was given
// (nothing when none).
func (c *Cache) SaveSnapshot() error {
	if c.path == "" {
		return nil
	}
	return c.s.save(c.path)
}

// SaveInvalidations persists the invalidation table and namespace
// versions beside the snapshot (after every purge, so that a crash does
// not forget one); nothing when there is no snapshot path.
func (c *Cache) SaveInvalidations() error {
	if c.path == "" {
		return nil
	}
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	if err := os.MkdirAll(parentDir(c.path), 0o755); err != nil {
		return fmt.Errorf("cache: save invalidations: %w", err)
	}
	if err := c.ns.save(c.path + ".ns"); err != nil {
		return err
	}
	return c.iv.save(c.path + ".inval")
}
