package cache

import (
	"bytes"
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
	iv   *Invalidations
	ns   *Namespaces
	path string // snapshot path; "" keeps nothing on disk
	// stripes order the writes of one key (stripe): the check of what
	// the key holds and the write are one step under its lock.
	stripes [64]sync.Mutex
	saveMu  sync.Mutex // serialises saving the invalidation table
}

// Open loads the snapshot at path when there is one (with its
// invalidation table and namespace versions), else starts empty: size is
// the store's size in bytes, maxObject the largest body an entry may
// hold. A missing file is normal (first start); a bad one is logged and
// ignored: the cache is an optimisation, never a reason not to start.
// path "" keeps nothing on disk.
func Open(path string, size, maxObject int, logger *slog.Logger) *Cache {
	c := &Cache{s: openStore(path, size, maxObject, logger), iv: newInvalidations(), ns: newNamespaces(), path: path}
	if path != "" {
		if err := c.ns.load(path + ".ns"); err != nil && !os.IsNotExist(err) {
			logger.Warn("namespace versions unreadable; dropping the snapshot", "err", err)
			c.iv.InvalidateAll()
		}
		if err := c.iv.load(path + ".inval"); err != nil && !os.IsNotExist(err) {
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
// returns an empty slice (with dst's capacity) when there is none.
func (c *Cache) Get(dst, k []byte) []byte { return c.s.get(dst, k) }

// GetVerified is Get, and reports whether the value is known intact
// without checking its entry checksum (written by this process: decode it
// with DecodeEntryCheck(b, e, !verified)). It does not allocate when dst
// is large enough.
func (c *Cache) GetVerified(dst, k []byte) (v []byte, verified bool) { return c.s.getVerified(dst, k) }

// Del deletes what is stored under k.
func (c *Cache) Del(k []byte) { c.s.del(k) }

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

// Put stores enc, the encoding of e, under key, and is the only way an
// entry is written (fills, refreshes, hit-for-miss records, near copies,
// compressed siblings, hand-offs). It refuses, and reports false:
//
//   - an entry an invalidation of its URL or tags came after the fetch
//     started (inval.go): a fetch that raced a purge cannot undo it;
//   - an entry whose fetch started before that of the one the key holds
//     (the answer whose fetch started later wins, whatever order they
//     arrive in), or, with IfAbsent, any entry when the key holds one.
//
// The check of what the key holds and the write are one step under the
// key's stripe lock, so a write that lands between them cannot be
// overwritten.
func (c *Cache) Put(key, enc []byte, e *Entry, o PutOptions) bool {
	if dead, _ := c.iv.Verdict(e.FetchSeq, e.URLDigest, e.Tags); dead {
		return false
	}
	mu := c.stripe(cachekey.Digest(key))
	mu.Lock()
	defer mu.Unlock()
	return c.putLocked(key, enc, e, o)
}

// putLocked is Put past the invalidation check; the caller holds key's
// stripe lock.
func (c *Cache) putLocked(key, enc []byte, e *Entry, o PutOptions) bool {
	if o.IfAbsent {
		if cur := c.s.get(nil, key); len(cur) > 0 {
			return false
		}
	} else if c.newerStored(key, e.FetchSeq) {
		return false
	}
	if v := o.Vary; v != nil && len(v.Names) > 0 {
		// Keep the marker when it already names the same headers:
		// rewriting it would invalidate every other variant.
		var cur Entry
		curBuf := c.s.get(nil, v.Primary)
		if len(curBuf) == 0 || DecodeEntry(curBuf, &cur) != nil || cur.Kind != KindVary || !sameVary(&cur, v.Names) {
			marker := Entry{Kind: KindVary, StoredAt: v.At, KeyDigest: cachekey.Digest(v.Primary), FetchSeq: e.FetchSeq, URLDigest: e.URLDigest}
			c.s.set(v.Primary, AppendEntry(nil, &marker, v.Names, nil))
		}
	}
	c.s.set(key, enc)
	return true
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
	if b := c.s.get(nil, key); len(b) > 0 {
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
		c.putLocked(key, enc, &e, PutOptions{})
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
	return len(b) > 0 && DecodeEntry(b, &cur) == nil && cur.Kind != KindVary && cur.FetchSeq > seq
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
