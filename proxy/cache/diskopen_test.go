package cache

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shield-proxy/shield/cachekey"
)

// putBig stores a disk-bound entry of key with body and fetch sequence seq.
func putBig(t *testing.T, c *Cache, key []byte, body string) {
	t.Helper()
	e := &Entry{Kind: KindResponse, Status: 200, KeyDigest: cachekey.Digest(key), FetchSeq: c.Invalidations().Next(), Body: []byte(body)}
	if !c.Put(key, AppendEntry(nil, e, nil, nil), e, PutOptions{}) {
		t.Fatal("Put refused")
	}
}

// readBody reads a disk hit's whole body: through Read, or through
// Section (what a connection's sendfile sends) when viaSection.
func readBody(t *testing.T, c *Cache, key []byte, viaSection bool) (string, bool) {
	t.Helper()
	_, _, f, n := c.GetVerifiedOrFile(nil, key)
	if f == nil {
		return "", false
	}
	defer f.Close()
	if !viaSection {
		b, err := io.ReadAll(f)
		if err != nil || int64(len(b)) != n {
			t.Fatalf("read %d of %d bytes: %v", len(b), n, err)
		}
		return string(b), true
	}
	// Read a little (fasthttp fills its buffer behind the head), then
	// the rest as sendfile would, by offset.
	head := make([]byte, 100)
	k, _ := io.ReadFull(f, head)
	fd, off, left := f.Section()
	if int64(k)+left != n {
		t.Fatalf("section of %d bytes after %d read, want %d in all", left, k, n)
	}
	rest := make([]byte, left)
	if _, err := f.h.f.ReadAt(rest, off); err != nil || fd != f.h.fd {
		t.Fatalf("section: %v", err)
	}
	f.Advance(left)
	if m, err := f.Read(head); m != 0 || err != io.EOF {
		t.Fatalf("after the section: %d bytes, %v; want EOF", m, err)
	}
	return string(head[:k]) + string(rest), true
}

// TestDiskOpenFiles: a file read once is kept open (its metadata with
// it) and serves later hits, by Read and by section; a replacement, a
// purge or an eviction forgets and closes it at once, so no hit reads a
// replaced or removed file, however long the link count check's interval
// (an hour here: none of this waits for it); a hit in flight finishes on
// the entry it started with. A file removed by hand is noticed by the
// first hit once the interval has passed.
func TestDiskOpenFiles(t *testing.T) {
	dir := t.TempDir()
	c := newDiskCache(t, dir, 64<<20)
	c.d.checkEvery = time.Hour
	key := []byte("k")
	one, two := bigBody(64<<10, "one-"), bigBody(80<<10, "two-")
	putBig(t, c, key, one)
	for i, viaSection := range []bool{false, true, false} {
		if got, ok := readBody(t, c, key, viaSection); !ok || got != one {
			t.Fatalf("hit %d: %d bytes (found %v), want the first body", i, len(got), ok)
		}
	}
	st, _ := c.DiskStats()
	if st.OpenFiles != 1 {
		t.Fatalf("%d files kept open after hits, want 1", st.OpenFiles)
	}
	// A hit in flight when the entry is replaced.
	_, _, inFlight, _ := c.GetVerifiedOrFile(nil, key)
	putBig(t, c, key, two)
	if st, _ := c.DiskStats(); st.OpenFiles != 0 {
		t.Fatalf("%d files kept open after the replacement, want 0", st.OpenFiles)
	}
	for i, viaSection := range []bool{true, false} {
		if got, ok := readBody(t, c, key, viaSection); !ok || got != two {
			t.Fatalf("hit %d after the replacement: %d bytes (found %v), want the new body", i, len(got), ok)
		}
	}
	if b, err := io.ReadAll(inFlight); err != nil || string(b) != one {
		t.Fatalf("the hit in flight read %d bytes (%v), want the old body whole", len(b), err)
	}
	inFlight.Close()
	// A purge: the key's file is forgotten and closed; nothing serves it.
	c.Del(key)
	if _, ok := readBody(t, c, key, false); ok {
		t.Fatal("a hit after Del")
	}
	if st, _ := c.DiskStats(); st.OpenFiles != 0 || st.Objects != 0 {
		t.Fatalf("after Del: %+v", st)
	}
	// Eviction: a tier of four entries' size keeps the newest.
	small := newDiskCache(t, t.TempDir(), 256<<10)
	small.d.checkEvery = time.Hour
	for i := range 6 {
		k := []byte{'e', byte('0' + i)}
		putBig(t, small, k, bigBody(60<<10, string(k)))
		if _, ok := readBody(t, small, k, true); !ok {
			t.Fatalf("entry %d: no hit right after Put", i)
		}
	}
	if st, _ := small.DiskStats(); st.OpenFiles != st.Objects || st.Objects > 4 {
		t.Fatalf("after evictions: %d kept open for %d entries", st.OpenFiles, st.Objects)
	}
	if _, ok := readBody(t, small, []byte("e0"), false); ok {
		t.Fatal("an evicted entry was served")
	}
	// Files removed behind the index's back (its directory deleted) are
	// served from their descriptor until the interval since the last
	// check has passed (no fstat per hit), then the first hit checks:
	// a miss, forgotten.
	gone := t.TempDir()
	c = newDiskCache(t, gone, 64<<20)
	c.d.checkEvery = time.Hour
	putBig(t, c, key, one)
	if _, ok := readBody(t, c, key, false); !ok {
		t.Fatal("no hit before the removal")
	}
	if err := os.RemoveAll(filepath.Join(gone, "disk")); err != nil {
		t.Fatal(err)
	}
	if got, ok := readBody(t, c, key, true); !ok || got != one {
		t.Fatalf("inside the interval: %d bytes (found %v), want the kept file served", len(got), ok)
	}
	c.d.mu.Lock()
	c.d.checkEvery = 0 // the interval has passed
	c.d.mu.Unlock()
	if _, ok := readBody(t, c, key, true); ok {
		t.Fatal("a removed file was served from its kept descriptor after the interval")
	}
	if st, _ := c.DiskStats(); st.OpenFiles != 0 || st.Objects != 0 {
		t.Fatalf("after the removal: %+v", st)
	}
}

// TestDiskOpenCheckInterval: a kept file's link count is checked by the
// first hit after diskCheckEvery and by no other hit in between, so a
// file removed by hand stops being served within the interval, on the
// tier's own clock (polled, bounded by a few intervals).
func TestDiskOpenCheckInterval(t *testing.T) {
	dir := t.TempDir()
	c := newDiskCache(t, dir, 64<<20)
	c.d.checkEvery = 50 * time.Millisecond
	key := []byte("k")
	putBig(t, c, key, bigBody(64<<10, "one-"))
	if _, ok := readBody(t, c, key, false); !ok {
		t.Fatal("no hit before the removal")
	}
	c.d.mu.Lock()
	o := c.d.items[cachekey.Digest(key)].open
	if o == nil {
		c.d.mu.Unlock()
		t.Fatal("the file read is not kept open")
	}
	// Just checked: the next hits inside the interval do not check.
	o.checked = c.d.now()
	if c.d.checkDueLocked(o) {
		t.Error("a check due right after one")
	}
	o.checked -= int64(c.d.checkEvery)
	if !c.d.checkDueLocked(o) || c.d.checkDueLocked(o) {
		t.Error("after the interval: want the first hit to check and the next not")
	}
	c.d.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(dir, "disk")); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	for {
		if _, ok := readBody(t, c, key, false); !ok {
			break
		}
		if time.Since(removed) > 20*c.d.checkEvery {
			t.Fatalf("a file removed %v ago is still served (check interval %v)", time.Since(removed), c.d.checkEvery)
		}
		time.Sleep(time.Millisecond)
	}
	if st, _ := c.DiskStats(); st.OpenFiles != 0 || st.Objects != 0 || st.Misses == 0 {
		t.Fatalf("after the removal was noticed: %+v", st)
	}
}

// TestDiskBodyReadFailureCounted: a disk hit's body whose read fails
// before its end (here the file cut short behind the index's back) is
// counted once as a truncated stream; a whole read is not.
func TestDiskBodyReadFailureCounted(t *testing.T) {
	dir := t.TempDir()
	c := newDiskCache(t, dir, 64<<20)
	putBig(t, c, []byte("whole"), bigBody(200<<10, "w"))
	if b, ok := readBody(t, c, []byte("whole"), false); !ok || len(b) != 200<<10 {
		t.Fatalf("whole read: %v, %d bytes", ok, len(b))
	}
	if ev, d := c.TruncatedStreams(); ev != 0 || d != 0 {
		t.Fatalf("after a whole read: %d evicted, %d disk truncated streams; want none", ev, d)
	}
	key := []byte("cut")
	putBig(t, c, key, bigBody(200<<10, "c"))
	_, _, f, n := c.GetVerifiedOrFile(nil, key)
	if f == nil {
		t.Fatal("no disk hit")
	}
	defer f.Close()
	p := c.d.path(cachekey.Digest(key))
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, fi.Size()-100<<10); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	_, _ = f.Read(make([]byte, 10))
	if _, d := c.TruncatedStreams(); int64(len(b)) >= n || d != 1 {
		t.Fatalf("read %d of %d bytes of a cut file; %d truncated streams counted, want 1", len(b), n, d)
	}
}
