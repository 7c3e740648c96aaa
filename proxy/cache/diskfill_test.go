package cache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/shield-proxy/shield/cachekey"
)

// startFill starts a disk fill of the entry response(key, seq, body)
// makes, and returns it with that entry and its encoding.
func startFill(t *testing.T, c *Cache, key []byte, seq int64, body string) (*DiskFill, *Entry, []byte) {
	t.Helper()
	enc, e := response(key, seq, body)
	he := *e
	he.Body = nil
	head := AppendEntry(nil, &he, nil, []Header{{Name: []byte("Content-Type"), Value: []byte("text/plain")}})
	w := c.StartDiskFill(key, head, len(body))
	if w == nil {
		t.Fatal("StartDiskFill: nil on a healthy tier")
	}
	return w, e, enc
}

// writeFill writes body to w in uneven chunks, checking that each is
// read back at once.
func writeFill(t *testing.T, w *DiskFill, body []byte) {
	t.Helper()
	for off := 0; off < len(body); {
		n := min(len(body)-off, 40<<10+7)
		if err := w.WriteAt(body[off:off+n], int64(off)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if _, err := w.ReadAt(got, int64(off)); err != nil || !bytes.Equal(got, body[off:off+n]) {
			t.Fatalf("ReadAt %d: %v, or not the bytes written", off, err)
		}
		off += n
	}
}

func tmpCount(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "disk", "tmp", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestDiskFillCommit: a body written as it arrives and stored becomes
// the very file Store writes for the whole entry (so its checksums
// hold: a restart's scan keeps it and its first read verifies it), read
// back as the entry's encoding; the fill's file stays readable until
// Close.
func TestDiskFillCommit(t *testing.T) {
	dir := t.TempDir()
	c := newDiskCache(t, dir, 64<<20)
	key := []byte("k-fill")
	body := bigBody(300<<10, "0123456789abcdefg")
	w, e, enc := startFill(t, c, key, c.Invalidations().Next(), body)
	if tmpCount(t, dir) != 1 {
		t.Fatal("no temporary file during the fill")
	}
	writeFill(t, w, []byte(body))
	if res := w.Store(e, PutOptions{}); res != Stored {
		t.Fatalf("Store: %v, want Stored", res)
	}
	files := diskFiles(t, dir)
	if len(files) != 1 || tmpCount(t, dir) != 0 {
		t.Fatalf("%d files, %d temporary after the commit; want 1, 0", len(files), tmpCount(t, dir))
	}
	b, err := os.ReadFile(files[0])
	if err != nil || !bytes.Equal(b, AppendDiskFile(nil, key, enc)) {
		t.Fatalf("the file is not the one Store writes for the entry (%v)", err)
	}
	if got := c.Get(nil, key); !bytes.Equal(got, enc) {
		t.Fatalf("Get: %d bytes, want the entry's %d", len(got), len(enc))
	}
	tail := make([]byte, 10)
	if _, err := w.ReadAt(tail, int64(len(body)-10)); err != nil || string(tail) != body[len(body)-10:] {
		t.Fatalf("ReadAt after the commit: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(diskFiles(t, dir)) != 1 {
		t.Fatal("Close removed the committed file")
	}
	// A restart keeps it, and its first read checks the file in full.
	c2 := newDiskCache(t, dir, 64<<20)
	if got, _ := c2.GetVerified(nil, key); !bytes.Equal(got, enc) {
		t.Fatalf("after a restart: %d bytes, want the entry", len(got))
	}
	if st, _ := c2.DiskStats(); st.Corrupt != 0 || st.Hits != 1 {
		t.Fatalf("after a restart: %+v", st)
	}
	if !bytes.Equal(JoinEntry([]byte(body), enc[len(body):]), enc) {
		t.Fatal("JoinEntry does not rebuild the entry")
	}
}

// TestDiskFillRefused: Store's decisions hold for a disk fill: an
// invalidation after its fetch started, or a newer fetch stored
// meanwhile, refuses it and removes its file; the key keeps what it held.
func TestDiskFillRefused(t *testing.T) {
	dir := t.TempDir()
	c := newDiskCache(t, dir, 64<<20)
	key := []byte("k-refused")
	body := bigBody(64<<10, "r")
	w, e, _ := startFill(t, c, key, c.Invalidations().Next(), body)
	writeFill(t, w, []byte(body))
	c.Invalidations().InvalidateURL(e.URLDigest, false)
	if res := w.Store(e, PutOptions{}); res != Refused {
		t.Fatalf("a fill a purge came after: %v, want Refused", res)
	}
	_ = w.Close()
	if len(diskFiles(t, dir)) != 0 || tmpCount(t, dir) != 0 {
		t.Fatal("a refused fill left a file")
	}

	w, e, _ = startFill(t, c, key, c.Invalidations().Next(), body)
	newer, ne := response(key, c.Invalidations().Next(), bigBody(64<<10, "n"))
	if !c.Put(key, newer, ne, PutOptions{}) {
		t.Fatal("Put refused")
	}
	writeFill(t, w, []byte(body))
	if res := w.Store(e, PutOptions{}); res != Refused {
		t.Fatalf("a fill a newer fetch was stored over: %v, want Refused", res)
	}
	_ = w.Close()
	if got := c.Get(nil, key); !bytes.Equal(got, newer) || tmpCount(t, dir) != 0 {
		t.Fatal("the newer entry did not stay, or a temporary file was left")
	}
}

// TestDiskFillFailures: a body write failing makes the tier degraded
// (the caller goes on without it and aborts the fill: no file left); a
// fill whose finishing fails is Dropped, and the key's older entry is
// gone (the fill won); no fill starts while the tier backs off, nor for
// an entry below its threshold.
func TestDiskFillFailures(t *testing.T) {
	dir := t.TempDir()
	c := newDiskCache(t, dir, 64<<20)
	key := []byte("k-fail")
	old, oe := response(key, c.Invalidations().Next(), bigBody(64<<10, "o"))
	if !c.Put(key, old, oe, PutOptions{}) {
		t.Fatal("Put refused")
	}
	if c.StartDiskFill(key, old[64<<10:], 1<<10) != nil {
		t.Fatal("a fill started for an entry below the tier's threshold")
	}
	var failOp string
	c.SetDiskFault(func(op string) error {
		if op == failOp {
			return syscall.EIO
		}
		return nil
	})

	body := bigBody(64<<10, "f")
	w, e, _ := startFill(t, c, key, c.Invalidations().Next(), body)
	failOp = "finish"
	writeFill(t, w, []byte(body))
	if res := w.Store(e, PutOptions{}); res != Dropped {
		t.Fatalf("a fill whose finishing failed: %v, want Dropped", res)
	}
	_ = w.Close()
	if v := c.Get(nil, key); len(v) != 0 || len(diskFiles(t, dir)) != 0 || tmpCount(t, dir) != 0 {
		t.Fatalf("after a dropped fill: the key holds %d bytes, %d files, %d temporary", len(v), len(diskFiles(t, dir)), tmpCount(t, dir))
	}
	if st, _ := c.DiskStats(); !st.Degraded || st.Dropped != 1 {
		t.Fatalf("stats %+v: want degraded, 1 dropped", st)
	}
	if c.StartDiskFill(key, old[64<<10:], 64<<10) != nil {
		t.Fatal("a fill started while the tier backs off")
	}

	c.d.downUntil.Store(0) // the backoff is over
	w, _, _ = startFill(t, c, key, c.Invalidations().Next(), body)
	failOp = "write"
	if err := w.WriteAt([]byte(body), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WriteAt on a failing disk: %v", err)
	}
	w.Abort()
	if tmpCount(t, dir) != 0 {
		t.Fatal("Abort left the temporary file")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.DiskStats(); !st.Degraded || st.DegradedTotal != 2 {
		t.Fatalf("stats %+v: want the tier degraded again", st)
	}
}

// committedBytes is the size of the tier's committed files on disk.
func committedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, f := range diskFiles(t, dir) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// TestDiskFillReservation: a disk fill's whole file counts in the tier's
// size from its start (evicting committed files as a commit would), a
// fill the files being written leave no room for is refused, an aborted
// fill gives its bytes back, and a committed one is counted once (as a
// file, no longer as a fill).
func TestDiskFillReservation(t *testing.T) {
	dir := t.TempDir()
	const size = 1 << 20
	c := newDiskCache(t, dir, size)
	for i := range 12 {
		key := []byte("old" + strconv.Itoa(i))
		enc, e := response(key, c.Invalidations().Next(), bigBody(64<<10, "o"))
		c.Put(key, enc, e, PutOptions{})
	}
	check := func(when string, wantFill int64) DiskStats {
		t.Helper()
		st, _ := c.DiskStats()
		if st.Bytes+st.FillBytes > size || st.FillBytes != wantFill || st.Bytes != committedBytes(t, dir) {
			t.Fatalf("%s: %d committed + %d filling bytes (%d files on disk), want %d filling, at most %d in all",
				when, st.Bytes, st.FillBytes, committedBytes(t, dir), wantFill, size)
		}
		return st
	}
	before := check("committed only", 0)
	body := bigBody(240<<10, "f")
	var fills []*DiskFill
	var entries []*Entry
	var reserved int64
	for i := range 4 {
		w, e, _ := startFill(t, c, []byte("fill"+strconv.Itoa(i)), c.Invalidations().Next(), body)
		fills, entries = append(fills, w), append(entries, e)
		reserved += w.reserved()
		check("fills started", reserved)
	}
	if st, _ := c.DiskStats(); st.Evictions == before.Evictions {
		t.Fatal("fills evicted no committed file")
	}
	enc, e := response([]byte("fill-more"), c.Invalidations().Next(), body)
	he := *e
	he.Body = nil
	if st, _ := c.DiskStats(); st.FillRefused != 0 {
		t.Fatalf("%d refusals counted before any", st.FillRefused)
	}
	if w := c.StartDiskFill([]byte("fill-more"), AppendEntry(nil, &he, nil, nil), len(body)); w != nil {
		t.Fatal("a fill beyond what the fills in progress leave was started")
	}
	if st, _ := c.DiskStats(); st.FillRefused != 1 {
		t.Fatalf("a refused fill: %d refusals counted, want 1", st.FillRefused)
	}
	// A whole entry the fills leave no room for goes to memory, the disk
	// not failing.
	if res := c.Store([]byte("put-more"), enc, e, PutOptions{}); res != Stored {
		t.Fatalf("Store with the tier full of fills: %v, want Stored (in memory)", res)
	}
	if ok, _, _ := c.d.stored(cachekey.Digest([]byte("put-more"))); ok || len(c.Get(nil, []byte("put-more"))) == 0 {
		t.Fatal("an entry the fills leave no room for is not in memory only")
	}
	check("refused", reserved)
	if st, _ := c.DiskStats(); st.Errors != 0 || st.Degraded || st.FillRefused != 2 {
		t.Fatalf("a full tier counted as a failing disk, or its 2 refusals not counted: %+v", st)
	}

	fills[0].Abort()
	reserved -= fills[0].reserved()
	check("a fill aborted", reserved)
	_ = fills[0].Close()
	writeFill(t, fills[1], []byte(body))
	if res := fills[1].Store(entries[1], PutOptions{}); res != Stored {
		t.Fatalf("Store: %v", res)
	}
	reserved -= fills[1].reserved()
	st := check("a fill committed", reserved)
	if ok, _, _ := c.d.stored(cachekey.Digest([]byte("fill1"))); !ok {
		t.Fatal("the committed fill is not indexed")
	}
	_ = fills[1].Close()
	// Refused after being written (a newer fetch stored meanwhile).
	newer, ne := response([]byte("fill2"), c.Invalidations().Next(), bigBody(8<<10, "n"))
	c.Put([]byte("fill2"), newer, ne, PutOptions{})
	writeFill(t, fills[2], []byte(body))
	if res := fills[2].Store(entries[2], PutOptions{}); res != Refused {
		t.Fatalf("Store over a newer fetch: %v", res)
	}
	reserved -= fills[2].reserved()
	check("a fill refused", reserved)
	_ = fills[2].Close()
	_ = fills[3].Close() // neither stored nor aborted: Close aborts
	check("all fills ended", 0)
	if tmpCount(t, dir) != 0 || st.Objects == 0 {
		t.Fatalf("%d temporary files left, %d objects", tmpCount(t, dir), st.Objects)
	}
}

// TestDiskFillReservationConcurrent: fills and Puts racing never take
// the tier, committed and in progress, beyond its size, and leave no
// reservation behind.
func TestDiskFillReservationConcurrent(t *testing.T) {
	dir := t.TempDir()
	const size = 1 << 20
	c := newDiskCache(t, dir, size)
	var wg sync.WaitGroup
	var over atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if st, _ := c.DiskStats(); st.Bytes+st.FillBytes > size {
				over.Store(st.Bytes + st.FillBytes)
			}
		}
	}()
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				key := []byte("g" + strconv.Itoa(g) + "-" + strconv.Itoa(i%5))
				body := bigBody((100+40*g)<<10, "x")
				if i%3 == 0 {
					enc, e := response(key, c.Invalidations().Next(), body)
					c.Put(key, enc, e, PutOptions{})
					continue
				}
				_, e := response(key, c.Invalidations().Next(), body)
				he := *e
				he.Body = nil
				w := c.StartDiskFill(key, AppendEntry(nil, &he, nil, []Header{{Name: []byte("Content-Type"), Value: []byte("text/plain")}}), len(body))
				if w == nil {
					continue
				}
				if err := w.WriteAt([]byte(body), 0); err == nil && i%4 != 1 {
					w.Store(e, PutOptions{})
				}
				_ = w.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	st, _ := c.DiskStats()
	if n := over.Load(); n != 0 {
		t.Fatalf("the tier's accounting reached %d bytes, beyond %d", n, size)
	}
	if st.FillBytes != 0 || st.Bytes != committedBytes(t, dir) || tmpCount(t, dir) != 0 || st.Writes == 0 {
		t.Fatalf("after the fills: %+v, %d bytes in files, %d temporary", st, committedBytes(t, dir), tmpCount(t, dir))
	}
}
