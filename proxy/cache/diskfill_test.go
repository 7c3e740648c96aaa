package cache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
