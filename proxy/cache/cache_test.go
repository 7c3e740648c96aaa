package cache

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/stale"
)

func newTestCache(t testing.TB) *Cache {
	t.Helper()
	return Open("", 32<<20, 1<<20, slog.New(slog.DiscardHandler))
}

// response returns a response entry for key fetched at seq, encoded, and
// its decoded form as Put takes it.
func response(key []byte, seq int64, body string) ([]byte, *Entry) {
	e := &Entry{Kind: KindResponse, Status: 200, StoredAt: time.Now().UnixNano(), Lifetime: int64(time.Hour),
		KeyDigest: cachekey.Digest(key), FetchSeq: seq, URLDigest: 42, Body: []byte(body)}
	return AppendEntry(nil, e, nil, []Header{{Name: []byte("Content-Type"), Value: []byte("text/plain")}}), e
}

// held decodes what c holds under key (ok false: nothing, or not an entry).
func held(c *Cache, key []byte) (e Entry, ok bool) {
	b, verified := c.GetVerified(nil, key)
	if len(b) == 0 || DecodeEntryCheck(b, &e, !verified) != nil {
		return Entry{}, false
	}
	return e, true
}

// TestPutNewerFetchWins: Puts of one key racing with different fetch
// sequences, in any interleaving, leave the answer whose fetch started
// last, and its Put is the one that reports stored last.
func TestPutNewerFetchWins(t *testing.T) {
	c := newTestCache(t)
	const rounds, writers = 300, 8
	for r := range rounds {
		key := []byte("race-" + strconv.Itoa(r))
		seqs := make([]int64, writers)
		for i := range seqs {
			seqs[i] = c.Invalidations().Next()
		}
		// Writers start in an order unrelated to their sequences.
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		newest := seqs[writers-1]
		var newestStored bool
		for i := range writers {
			seq := seqs[(i*5+r)%writers]
			wg.Add(1)
			go func() {
				defer wg.Done()
				enc, e := response(key, seq, "body "+strconv.FormatInt(seq, 10))
				start.Wait()
				ok := c.Put(key, enc, e, PutOptions{})
				if seq == newest {
					newestStored = ok
				}
			}()
		}
		start.Done()
		wg.Wait()
		got, ok := held(c, key)
		if !ok || got.FetchSeq != newest || string(got.Body) != "body "+strconv.FormatInt(newest, 10) {
			t.Fatalf("round %d: key holds seq %d (%v), want the newest fetch %d", r, got.FetchSeq, ok, newest)
		}
		if !newestStored {
			t.Fatalf("round %d: the newest fetch's Put reported not stored", r)
		}
	}
}

// TestPutAfterInvalidationRefused: an answer whose fetch started before
// an invalidation of its URL, of one of its tags, or of everything is
// not stored; a soft invalidation does not refuse it, and a fetch that
// started after the invalidation is stored.
func TestPutAfterInvalidationRefused(t *testing.T) {
	for _, tc := range []struct {
		name       string
		invalidate func(iv *Invalidations)
		stored     bool
	}{
		{"url", func(iv *Invalidations) { iv.InvalidateURL(42, false) }, false},
		{"tag", func(iv *Invalidations) { iv.InvalidateTag([]byte("news"), false) }, false},
		{"all", func(iv *Invalidations) { iv.InvalidateAll() }, false},
		{"soft url", func(iv *Invalidations) { iv.InvalidateURL(42, true) }, true},
		{"other url", func(iv *Invalidations) { iv.InvalidateURL(43, false) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t)
			key := []byte("k")
			seq := c.Invalidations().Next() // the fetch starts
			tc.invalidate(c.Invalidations())
			_, e := response(key, seq, "before")
			e.Tags = AppendTags(nil, []byte("sports, news"))
			enc := AppendEntry(nil, e, nil, nil)
			if got := c.Put(key, enc, e, PutOptions{}); got != tc.stored {
				t.Fatalf("Put = %v, want %v", got, tc.stored)
			}
			if _, ok := held(c, key); ok != tc.stored {
				t.Fatalf("key holds an entry: %v, want %v", ok, tc.stored)
			}
			// A fetch that started after the invalidation is stored.
			enc, e = response(key, c.Invalidations().Next(), "after")
			if !c.Put(key, enc, e, PutOptions{}) {
				t.Fatal("a fetch started after the invalidation was refused")
			}
		})
	}
}

// TestHandoffNeverOverwritesFill: an entry pushed by a leaving node
// (IfAbsent) racing a fill of the same key never overwrites the fill,
// whichever lands first: the check and the write are one step under the
// key's stripe. (A get, then a set without the lock, lets a fill land
// between them and be overwritten.)
func TestHandoffNeverOverwritesFill(t *testing.T) {
	c := newTestCache(t)
	const rounds, handoffs = 5000, 4
	for r := range rounds {
		key := []byte("hot-" + strconv.Itoa(r))
		// The leaving node's copy was fetched before this node's fill.
		pushed, pe := response(key, c.Invalidations().Next(), "handed off")
		fill, fe := response(key, c.Invalidations().Next(), "filled")
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		for range handoffs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				c.Put(key, pushed, pe, PutOptions{IfAbsent: true})
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			if !c.Put(key, fill, fe, PutOptions{}) {
				t.Errorf("round %d: the fill was refused", r)
			}
		}()
		start.Done()
		wg.Wait()
		if got, ok := held(c, key); !ok || string(got.Body) != "filled" {
			t.Fatalf("round %d: key holds %q, want the fill's entry", r, got.Body)
		}
	}
	// Absent: the hand-off is taken.
	key := []byte("cold")
	pushed, pe := response(key, c.Invalidations().Next(), "handed off")
	if !c.Put(key, pushed, pe, PutOptions{IfAbsent: true}) {
		t.Fatal("a hand-off to an empty key was refused")
	}
	if got, ok := held(c, key); !ok || string(got.Body) != "handed off" {
		t.Fatalf("key holds %q, want the hand-off", got.Body)
	}
}

// TestCorruptIsMiss: bytes under a key that are not an entry — foreign
// garbage, a flipped byte in a snapshot's entry, this process's own
// write of something that is not an entry — decode to ErrCorrupt (a
// miss), and do not stop a Put from replacing them.
func TestCorruptIsMiss(t *testing.T) {
	c := newTestCache(t)
	key := []byte("k")
	good, _ := response(key, 1, "good")
	flipped := bytes.Clone(good)
	flipped[1] ^= 0x20
	for name, plant := range map[string]func(){
		"foreign garbage":  func() { c.Fastcache().Set(key, bytes.Repeat([]byte("junk"), 40)) },
		"flipped snapshot": func() { c.Fastcache().Set(key, flipped) },
		"own non-entry":    func() { c.s.set(key, []byte("not an entry at all, but long enough to look like one.....")) },
		"short":            func() { c.Fastcache().Set(key, []byte{1, 2, 3}) },
	} {
		plant()
		b, verified := c.GetVerified(nil, key)
		if len(b) == 0 {
			t.Fatalf("%s: nothing read back", name)
		}
		var e Entry
		if err := DecodeEntryCheck(b, &e, !verified); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: decode = %v, want ErrCorrupt", name, err)
		}
		if _, ok := held(c, key); ok {
			t.Fatalf("%s: held an entry", name)
		}
		enc, fe := response(key, c.Invalidations().Next(), "fresh")
		if !c.Put(key, enc, fe, PutOptions{}) {
			t.Fatalf("%s: Put over corrupt bytes refused", name)
		}
		if got, ok := held(c, key); !ok || string(got.Body) != "fresh" {
			t.Fatalf("%s: after Put key holds %q", name, got.Body)
		}
		c.Del(key)
		if b := c.Get(nil, key); len(b) != 0 {
			t.Fatalf("%s: Del left %d bytes", name, len(b))
		}
	}
}

// TestPutVaryMarker: a varying answer's Put writes the marker under the
// primary key, keeps it while the Vary names are the same (rewriting it
// would drop the other variants) and rewrites it when they change.
func TestPutVaryMarker(t *testing.T) {
	c := newTestCache(t)
	primary := []byte("page")
	names := [][]byte{[]byte("accept-language")}
	put := func(lang string, names [][]byte, at int64) {
		t.Helper()
		key := cachekey.AppendVary(bytes.Clone(primary), names[0], []byte(lang))
		enc, e := response(key, c.Invalidations().Next(), lang)
		if !c.Put(key, enc, e, PutOptions{Vary: &Vary{Primary: primary, Names: names, At: at}}) {
			t.Fatalf("Put %s refused", lang)
		}
	}
	put("en", names, 100)
	m, ok := held(c, primary)
	if !ok || m.Kind != KindVary || m.StoredAt != 100 || len(m.VaryList()) != 1 || string(m.VaryList()[0]) != "accept-language" {
		t.Fatalf("marker %+v (%v), want a vary marker on accept-language at 100", m, ok)
	}
	put("de", names, 200)
	if m, _ := held(c, primary); m.StoredAt != 100 {
		t.Fatalf("marker rewritten for the same names (stored at %d)", m.StoredAt)
	}
	put("fr", [][]byte{[]byte("accept-encoding")}, 300)
	if m, _ := held(c, primary); m.StoredAt != 300 || string(m.VaryList()[0]) != "accept-encoding" {
		t.Fatalf("marker %+v not rewritten for other names", m)
	}
	// A marker is not an answer: a response stored under the primary key
	// later replaces it whatever its sequence.
	enc, e := response(primary, 1, "plain")
	if !c.Put(primary, enc, e, PutOptions{}) {
		t.Fatal("a response under a marker's key was refused")
	}
}

// TestPutDerived: a derived entry (a compressed sibling) is built once
// per identity answer and reused while it belongs to it; a new answer
// rebuilds it; build errors are returned; a dead one is not stored.
func TestPutDerived(t *testing.T) {
	c := newTestCache(t)
	key := []byte("k|gzip")
	seq := c.Invalidations().Next()
	var builds int
	build := func(body string, at int64) func() ([]byte, error) {
		return func() ([]byte, error) {
			builds++
			e := &Entry{Kind: KindResponse, Status: 200, StoredAt: at, Lifetime: int64(time.Hour), KeyDigest: cachekey.Digest(key), FetchSeq: seq, URLDigest: 7, Body: []byte(body)}
			return AppendEntry(nil, e, nil, nil), nil
		}
	}
	enc, built, err := c.PutDerived(key, seq, 10, build("one", 10))
	if err != nil || !built || builds != 1 {
		t.Fatalf("first: built %v, err %v, builds %d", built, err, builds)
	}
	again, built, err := c.PutDerived(key, seq, 10, build("two", 10))
	if err != nil || built || builds != 1 || !bytes.Equal(again, enc) {
		t.Fatalf("second: built %v, err %v, builds %d, same bytes %v", built, err, builds, bytes.Equal(again, enc))
	}
	// A refreshed identity answer (stored at 20): rebuilt.
	if _, built, _ := c.PutDerived(key, seq, 20, build("three", 20)); !built {
		t.Fatal("not rebuilt for a new identity answer")
	}
	if got, _ := held(c, key); string(got.Body) != "three" {
		t.Fatalf("holds %q, want the rebuilt one", got.Body)
	}
	boom := errors.New("boom")
	if _, _, err := c.PutDerived(key, seq, 30, func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("build error = %v, want boom", err)
	}
	if _, _, err := c.PutDerived(key, seq, 30, func() ([]byte, error) { return []byte("junk"), nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("undecodable build = %v, want ErrCorrupt", err)
	}
	// Invalidated since the identity's fetch: built and returned (the
	// requester gets it), not stored.
	c.Invalidations().InvalidateURL(7, false)
	enc, built, err = c.PutDerived(key, seq, 40, build("dead", 40))
	if err != nil || !built || len(enc) == 0 {
		t.Fatalf("dead: built %v, err %v", built, err)
	}
	if got, _ := held(c, key); string(got.Body) != "three" {
		t.Fatalf("holds %q after a dead build, want the earlier one", got.Body)
	}
}

// TestOpenSaveReload: a snapshot, its invalidation table and namespace
// versions survive a restart; the reloaded entries are not this
// process's writes (checked on read); unreadable sidecars drop the
// snapshot's entries (they are dead) instead of failing.
func TestOpenSaveReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "cache")
	logger := slog.New(slog.DiscardHandler)
	c := Open(path, 32<<20, 1<<20, logger)
	if c.Path() != path {
		t.Fatalf("Path = %q", c.Path())
	}
	key := []byte("k")
	enc, e := response(key, c.Invalidations().Next(), "kept")
	c.Put(key, enc, e, PutOptions{})
	if v := c.Namespaces().BumpRoute("r"); v != 1 {
		t.Fatalf("BumpRoute = %d", v)
	}
	c.Namespaces().BumpTenant("t")
	c.Invalidations().InvalidateURL(99, false)
	if err := c.SaveSnapshot(); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveInvalidations(); err != nil {
		t.Fatal(err)
	}
	d := Open(path, 32<<20, 1<<20, logger)
	b, verified := d.GetVerified(nil, key)
	var got Entry
	if verified || DecodeEntry(b, &got) != nil || string(got.Body) != "kept" {
		t.Fatalf("reloaded: verified %v, body %q", verified, got.Body)
	}
	if !d.Invalidations().Apply(&got) {
		t.Fatal("reloaded entry dead")
	}
	if v := d.Namespaces().Version("r", true, []byte("t")); v != 1<<16|1 {
		t.Fatalf("namespace %#x, want route 1, tenant 1", v)
	}
	if dead, _ := d.Invalidations().Verdict(e.FetchSeq, 99, nil); !dead {
		t.Fatal("the saved URL invalidation was lost")
	}

	for _, side := range []string{".ns", ".inval"} {
		if err := os.WriteFile(path+side, []byte("{garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		x := Open(path, 32<<20, 1<<20, logger)
		b := x.Get(nil, key)
		var xe Entry
		if DecodeEntry(b, &xe) != nil {
			t.Fatalf("%s: snapshot entry not loaded", side)
		}
		if x.Invalidations().Apply(&xe) {
			t.Fatalf("%s unreadable: the snapshot's entries are still served", side)
		}
		if err := c.SaveInvalidations(); err != nil { // restore both
			t.Fatal(err)
		}
	}

	// A snapshot path that is not a snapshot: started empty.
	bad := filepath.Join(dir, "file")
	if err := os.WriteFile(bad, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := Open(bad, 32<<20, 1<<20, logger).Get(nil, key); len(b) != 0 {
		t.Fatal("an unreadable snapshot yielded entries")
	}
	// No path: nothing saved, no error.
	n := newTestCache(t)
	if n.SaveSnapshot() != nil || n.SaveInvalidations() != nil {
		t.Fatal("saving without a path failed")
	}
	// A directory that cannot be made.
	blocked := Open(filepath.Join(bad, "cache"), 32<<20, 1<<20, logger)
	if blocked.SaveSnapshot() == nil || blocked.SaveInvalidations() == nil {
		t.Fatal("saving under a file succeeded")
	}
}

// TestServableAndApply: out of purge sync (gated) or past the sync lease
// nothing is servable; a soft invalidation cuts the entry's lifetime to
// the purge instant.
func TestServableAndApply(t *testing.T) {
	iv := newInvalidations()
	now := time.Now()
	seq := iv.Next()
	e := Entry{Kind: KindResponse, StoredAt: now.UnixNano(), Lifetime: int64(time.Hour), FetchSeq: seq, URLDigest: 5}
	if !iv.Servable(&e, now) {
		t.Fatal("a fresh entry is not servable")
	}
	iv.Gated.Store(true)
	if iv.Servable(&e, now) {
		t.Fatal("servable while gated")
	}
	iv.Gated.Store(false)
	iv.Lease.Store(now.Add(-time.Second).UnixNano())
	if iv.Servable(&e, now) {
		t.Fatal("servable past the lease")
	}
	iv.Lease.Store(0)
	at := iv.InvalidateURL(5, true)
	if !iv.Apply(&e) {
		t.Fatal("a soft purge killed the entry")
	}
	if want := e.InitialAge + (at - e.StoredAt); e.Lifetime != want {
		t.Fatalf("lifetime %d after a soft purge, want %d", e.Lifetime, want)
	}
	e.Tags = AppendTags(nil, []byte("a b"))
	iv.InvalidateTag([]byte("b"), true)
	if _, softAt := iv.Verdict(e.FetchSeq, 6, e.Tags); softAt == 0 {
		t.Fatal("a soft tag purge is not reported")
	}
	iv.InvalidateTag([]byte("a"), false)
	if iv.Apply(&e) {
		t.Fatal("a hard tag purge left the entry alive")
	}
}

// TestAppendTags: surrogate keys separated by spaces, tabs and commas,
// at most MaxTags kept.
func TestAppendTags(t *testing.T) {
	if got := AppendTags(nil, []byte(" a,\tb  c,,")); len(got) != 3*8 {
		t.Fatalf("%d tag bytes, want 3 tags", len(got))
	}
	var many []byte
	for i := range MaxTags + 10 {
		many = append(many, []byte("t"+strconv.Itoa(i)+" ")...)
	}
	if got := AppendTags(nil, many); len(got) != MaxTags*8 {
		t.Fatalf("%d tag bytes, want MaxTags", len(got))
	}
}

// TestEntryAgeClassify: age counts from the stored instant plus the age
// the answer had; classify follows the lifetime and windows.
func TestEntryAgeClassify(t *testing.T) {
	now := time.Now()
	e := Entry{StoredAt: now.Add(-10 * time.Second).UnixNano(), InitialAge: int64(5 * time.Second), Lifetime: int64(20 * time.Second), SWR: int64(time.Minute)}
	age := e.Age(now)
	if age < 15*time.Second || age > 16*time.Second {
		t.Fatalf("age %v, want 15s", age)
	}
	if s := e.Classify(age, nil); s != stale.Fresh {
		t.Fatalf("classify %v, want fresh", s)
	}
	if s := e.Classify(age+10*time.Second, nil); s == stale.Fresh || s == stale.Expired {
		t.Fatalf("classify %v inside the stale-while-revalidate window", s)
	}
}

// TestEntryLists: VaryList and HeaderList give back what was encoded.
func TestEntryLists(t *testing.T) {
	hs := []Header{{Name: []byte("A"), Value: []byte("1")}, {Name: []byte("B"), Value: nil}}
	vary := [][]byte{[]byte("x"), []byte("y")}
	enc := AppendEntry(nil, &Entry{Kind: KindResponse, Status: 200}, vary, hs)
	var e Entry
	if err := DecodeEntry(enc, &e); err != nil {
		t.Fatal(err)
	}
	gotV, gotH := e.VaryList(), e.HeaderList()
	if len(gotV) != 2 || string(gotV[1]) != "y" || len(gotH) != 2 || string(gotH[0].Name) != "A" || string(gotH[0].Value) != "1" || len(gotH[1].Value) != 0 {
		t.Fatalf("vary %q, headers %q", gotV, gotH)
	}
	if !sameVary(&e, vary) || sameVary(&e, vary[:1]) || sameVary(&e, [][]byte{[]byte("x"), []byte("z")}) {
		t.Fatal("sameVary disagrees with the encoded names")
	}
}

func TestParentDir(t *testing.T) {
	for in, want := range map[string]string{"/a/b": "/a", "/a": "/", "a": ".", "a/b/c": "a/b"} {
		if got := parentDir(in); got != want {
			t.Errorf("parentDir(%q) = %q, want %q", in, got, want)
		}
	}
}
