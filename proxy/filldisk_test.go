package proxy

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
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
