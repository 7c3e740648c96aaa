package proxy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/shield-proxy/shield/config"
)

// TestStreamedFillToDisk: with a disk tier, a streamed fill's clients get
// the origin's bytes as they arrive, the completed fill becomes a file of
// the tier (not a memory entry), and the next requests are hits sent from
// that file over a real connection, byte for byte; a purge of the URL
// takes it out of service.
func TestStreamedFillToDisk(t *testing.T) {
	const clients = 5
	body := fillBody(3 << 20)
	o := newSlowOrigin(t, body, 512<<10, false)
	dir := t.TempDir()
	p := newFillProxy(t, o.addr(), func(c *config.Config) {
		c.Cache.Path = filepath.Join(dir, "snap")
		c.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 64 * config.MiB}
	})
	addr := listen(t, p)

	cs := make([]*fillClient, clients)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { cs[i] = openFill(t, addr, "/disk", 128<<10) })
	}
	wg.Wait()
	for i, c := range cs {
		if c.err != nil {
			t.Fatalf("client %d: no first bytes while the origin holds the rest: %v", i, c.err)
		}
	}
	o.hold.open()
	for i, c := range cs {
		wg.Go(func() {
			if got, err := c.rest(); err != nil || !bytes.Equal(got, body) {
				t.Errorf("client %d: %d bytes, err %v; want the origin's %d", i, len(got), err, len(body))
			}
		})
	}
	wg.Wait()
	if files, _ := filepath.Glob(filepath.Join(dir, "disk", "??", "*")); len(files) != 1 {
		t.Fatalf("%d files in the disk tier after the fill, want 1", len(files))
	}
	for range 3 {
		h := openFill(t, addr, "/disk", 1)
		got, err := h.rest()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("hit from the disk tier: %d bytes, err %v", len(got), err)
		}
		if cs := h.resp.Header.Get("Cache-Status"); !strings.HasPrefix(cs, "shield; hit") {
			t.Fatalf("Cache-Status = %q, want a hit", cs)
		}
	}
	if st, _ := p.cache.DiskStats(); st.Hits < 3 || st.Objects != 1 {
		t.Errorf("disk stats %+v, want 3 hits on 1 object", st)
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("origin fetches = %d, want 1", n)
	}
	if _, err := p.Purge(map[string][]string{"url": {"http://" + testHost + "/disk"}}); err != nil {
		t.Fatal(err)
	}
	o.hold.open()
	if h := openFill(t, addr, "/disk", 1); h.err != nil || !strings.Contains(h.resp.Header.Get("Cache-Status"), "fwd=miss") {
		t.Fatalf("after a purge: %v, Cache-Status %q; want a miss", h.err, h.resp.Header.Get("Cache-Status"))
	} else if got, err := h.rest(); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("refill after the purge: %d bytes, err %v", len(got), err)
	}
}

// openFiles counts this process's open files under dir: a fill's file
// is closed once the fill and its readers are done.
func openFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("open files: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, dir+"/") {
			n++
		}
	}
	return n
}

// noGC turns the garbage collector off for the test: an *os.File left
// open is closed by the collector once unreachable, which would hide a
// fill that never closes its file from noOpenFiles.
func noGC(t *testing.T) {
	t.Helper()
	prev := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
}

// noOpenFiles waits until the process holds no file under dir open
// (with noGC: closed by the code, not by the collector) but those p's
// disk tier keeps open for hits (proxy/cache's diskopen.go).
func noOpenFiles(t *testing.T, p *Proxy, dir string) {
	t.Helper()
	waitUntil(t, "no file under the test's directory open but the disk tier's kept ones", func() bool {
		st, _ := p.cache.DiskStats()
		return int64(openFiles(t, dir)) == st.OpenFiles
	})
}

// TestDiskFillBackgroundRefresh: a background refresh (nobody's request
// reads its answer) through the disk tier stores the new answer and
// closes the fill's file.
func TestDiskFillBackgroundRefresh(t *testing.T) {
	noGC(t)
	dir := t.TempDir()
	p := testStreamedFillBackgroundRefresh(t, func(c *config.Config) {
		c.Cache.Path = filepath.Join(dir, "snap")
		c.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 64 * config.MiB}
	})
	if n := diskFiles(dir); n != 1 {
		t.Errorf("%d files in the disk tier, want 1 (the refreshed answer)", n)
	}

	noOpenFiles(t, p, dir)
}

// TestDiskFillRangeHeadConditional: HEAD and conditional requests are
// answered from a disk fill's head at once, a Range once it is complete
// (its entry read whole); the fill's file is closed afterwards.
func TestDiskFillRangeHeadConditional(t *testing.T) {
	noGC(t)
	dir := t.TempDir()
	p := testStreamedFillRangeHeadConditional(t, func(c *config.Config) {
		c.Cache.Path = filepath.Join(dir, "snap")
		c.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 64 * config.MiB}
	})
	if n := diskFiles(dir); n != 1 {
		t.Errorf("%d files in the disk tier, want 1", n)
	}
	noOpenFiles(t, p, dir)
}

// newDiskFillProxy is a fill proxy with a 64 MiB disk tier under dir.
func newDiskFillProxy(t *testing.T, originAddr, dir string) *Proxy {
	t.Helper()
	return newFillProxy(t, originAddr, func(c *config.Config) {
		c.Cache.Path = filepath.Join(dir, "snap")
		c.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 64 * config.MiB}
	})
}

// tmpFiles counts the disk tier's uncommitted files.
func tmpFiles(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "disk", "tmp", "*"))
	return len(files)
}

// diskFiles counts the disk tier's committed files.
func diskFiles(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "disk", "??", "*"))
	return len(files)
}

// fillInFlight is a streamed fill in flight (nil: none).
func fillInFlight(p *Proxy) *fill {
	for i := range p.fl.shards {
		s := &p.fl.shards[i]
		s.mu.Lock()
		for _, f := range s.m {
			if f.fill != nil {
				s.mu.Unlock()
				return f.fill
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// TestDiskFillNoBuffer: a fill bound for the disk tier writes the body
// into the tier's temporary file as it arrives and keeps no buffer of
// it; its clients, and a late joiner starting from byte 0 while the
// origin still holds the rest, get the origin's bytes; the file is
// committed once, and no temporary file is left.
func TestDiskFillNoBuffer(t *testing.T) {
	noGC(t)
	body := fillBody(3 << 20)
	o := newSlowOrigin(t, body, 512<<10, false)
	dir := t.TempDir()
	p := newDiskFillProxy(t, o.addr(), dir)
	addr := listen(t, p)

	first := openFill(t, addr, "/nobuf", 256<<10)
	if first.err != nil {
		t.Fatal(first.err)
	}
	fl := fillInFlight(p)
	if fl == nil {
		t.Fatal("no streamed fill in flight")
	}
	fl.mu.Lock()
	buf, disk := fl.buf, fl.disk
	fl.mu.Unlock()
	if buf != nil || disk == nil {
		t.Fatalf("fill: buffer of %d bytes, disk file %v; want the body on disk only", len(buf), disk != nil)
	}
	if n := tmpFiles(dir); n != 1 {
		t.Fatalf("%d temporary files during the fill, want 1", n)
	}
	late := openFill(t, addr, "/nobuf", 300<<10) // past the first client's offset
	if late.err != nil {
		t.Fatal(late.err)
	}
	o.hold.open()
	for name, c := range map[string]*fillClient{"first": first, "late": late} {
		if got, err := c.rest(); err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: %d bytes, err %v; want the origin's %d", name, len(got), err, len(body))
		}
	}
	waitUntil(t, "the fill ends", func() bool { return p.fl.inFlight() == 0 })
	if n := o.hits.Load(); n != 1 {
		t.Errorf("origin fetches = %d, want 1 (the late joiner joins)", n)
	}
	if st, _ := p.cache.DiskStats(); st.Writes != 1 || st.Objects != 1 {
		t.Errorf("disk stats %+v, want the fill written once", st)
	}
	if n := tmpFiles(dir); n != 0 {
		t.Errorf("%d temporary files left", n)
	}
	if e, ok := stored(t, p, primaryKey(p, get(t, "/nobuf"))); !ok || e.Kind == 0 {
		t.Error("the completed fill is not readable from the cache")
	}
	noOpenFiles(t, p, dir)
}

// TestDiskFillPurgeDuringFill: a purge of the URL that lands while a disk
// fill runs refuses its commit, as Store refuses a memory fill: its
// client (whose request preceded the purge) gets the body whole, the file
// is removed, and the next request goes to the origin.
func TestDiskFillPurgeDuringFill(t *testing.T) {
	noGC(t)
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 256<<10, false)
	dir := t.TempDir()
	p := newDiskFillProxy(t, o.addr(), dir)
	addr := listen(t, p)

	c := openFill(t, addr, "/purged", 1024)
	if c.err != nil {
		t.Fatal(c.err)
	}
	if _, err := p.Purge(map[string][]string{"url": {"http://" + testHost + "/purged"}}); err != nil {
		t.Fatal(err)
	}
	o.hold.open()
	if got, err := c.rest(); err != nil || !bytes.Equal(got, body) {
		t.Errorf("client: %d bytes, err %v; want the whole body", len(got), err)
	}
	waitUntil(t, "the fill ends", func() bool { return p.fl.inFlight() == 0 })
	if n := p.g.overtaken.Get(); n != 1 {
		t.Errorf("overtaken = %d, want 1", n)
	}
	if st, _ := p.cache.DiskStats(); st.Writes != 0 || st.Objects != 0 {
		t.Errorf("disk stats %+v: a purged fill was committed", st)
	}
	if n, m := tmpFiles(dir), diskFiles(dir); n != 0 || m != 0 {
		t.Errorf("%d temporary and %d committed files after a purged fill, want none", n, m)
	}
	next := openFill(t, addr, "/purged", 1)
	if got, err := next.rest(); err != nil || !bytes.Equal(got, body) {
		t.Errorf("next: %d bytes, err %v", len(got), err)
	}
	if n := o.hits.Load(); n != 2 {
		t.Errorf("origin fetches = %d, want 2", n)
	}
	noOpenFiles(t, p, dir)
}

// TestDiskFillOriginFailsMidway: an origin that fails halfway through a
// disk fill truncates its clients' transfers, stores nothing, and leaves
// no temporary file.
func TestDiskFillOriginFailsMidway(t *testing.T) {
	noGC(t)
	body := fillBody(2 << 20)
	o := newSlowOrigin(t, body, 512<<10, true)
	dir := t.TempDir()
	p := newDiskFillProxy(t, o.addr(), dir)
	addr := listen(t, p)

	leader := openFill(t, addr, "/cutdisk", 1024)
	waiter := openFill(t, addr, "/cutdisk", 1024)
	if leader.err != nil || waiter.err != nil {
		t.Fatalf("first bytes: %v, %v", leader.err, waiter.err)
	}
	if n := tmpFiles(dir); n != 1 {
		t.Fatalf("%d temporary files during the fill, want 1", n)
	}
	o.hold.open()
	for name, c := range map[string]*fillClient{"leader": leader, "waiter": waiter} {
		if got, err := c.rest(); !errors.Is(err, io.ErrUnexpectedEOF) || len(got) >= len(body) {
			t.Errorf("%s: %d bytes, err %v; want a truncated transfer", name, len(got), err)
		}
	}
	waitUntil(t, "the failed fill's flight ends", func() bool { return p.fl.inFlight() == 0 })
	if _, ok := stored(t, p, primaryKey(p, get(t, "/cutdisk"))); ok {
		t.Error("a failed fill was stored")
	}
	if n, m := tmpFiles(dir), diskFiles(dir); n != 0 || m != 0 {
		t.Errorf("%d temporary and %d committed files after a failed fill, want none", n, m)
	}
	if n := p.g.fillFailures.Get(); n != 1 {
		t.Errorf("fill failures = %d, want 1", n)
	}
	if o, d := truncatedCount(t, p, "origin"), truncatedCount(t, p, "disk"); o != 2 || d != 0 {
		t.Errorf("truncated responses: %d origin, %d disk; want 2 (leader, waiter), 0", o, d)
	}
	noOpenFiles(t, p, dir)
}

// TestDiskFillDiskFailsMidway: a disk whose writes fail during a fill
// puts the tier in its degraded state, and the fill goes on in memory:
// its clients get the whole body, the temporary file is removed, and the
// entry is stored in memory (it fits cache.size/8) and served as a hit.
func TestDiskFillDiskFailsMidway(t *testing.T) {
	noGC(t)
	body := fillBody(3 << 20)
	o := newSlowOrigin(t, body, 512<<10, false)
	dir := t.TempDir()
	p := newDiskFillProxy(t, o.addr(), dir)
	addr := listen(t, p)
	var failing atomic.Bool
	p.cache.SetDiskFault(func(op string) error {
		if failing.Load() {
			return syscall.EIO
		}
		return nil
	})

	cs := []*fillClient{openFill(t, addr, "/diskfail", 256<<10), openFill(t, addr, "/diskfail", 1024)}
	for i, c := range cs {
		if c.err != nil {
			t.Fatalf("client %d: %v", i, c.err)
		}
	}
	failing.Store(true)
	o.hold.open()
	for i, c := range cs {
		if got, err := c.rest(); err != nil || !bytes.Equal(got, body) {
			t.Errorf("client %d: %d bytes, err %v; want the origin's %d", i, len(got), err, len(body))
		}
	}
	waitUntil(t, "the fill ends", func() bool { return p.fl.inFlight() == 0 })
	st, _ := p.cache.DiskStats()
	if !st.Degraded || st.DegradedTotal != 1 || st.Writes != 0 {
		t.Errorf("disk stats %+v, want the tier degraded and nothing written", st)
	}
	if n, m := tmpFiles(dir), diskFiles(dir); n != 0 || m != 0 {
		t.Errorf("%d temporary and %d committed files, want none", n, m)
	}
	if _, ok := stored(t, p, primaryKey(p, get(t, "/diskfail"))); !ok {
		t.Fatal("the fill was not stored in memory")
	}
	h := openFill(t, addr, "/diskfail", 1)
	if got, err := h.rest(); err != nil || !bytes.Equal(got, body) || !strings.HasPrefix(h.resp.Header.Get("Cache-Status"), "shield; hit") {
		t.Errorf("after the fill: %d bytes, err %v, Cache-Status %q; want a hit", len(got), err, h.resp.Header.Get("Cache-Status"))
	}
	noOpenFiles(t, p, dir)
}
