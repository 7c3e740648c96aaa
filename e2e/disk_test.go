package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// TestDiskTierCapacity is issue #25's capacity run at its scale: a 64 MiB
// memory cache with a 2 GiB disk tier takes 1 GiB of 1 MiB objects (1024
// keys, fetched through shield from the origin) and serves them back as
// hits with identical bytes — at once, after a clean restart (SIGTERM)
// and after a kill -9 — while the process's RSS stays near the memory
// tier's size (bodies are sent from files, not kept in memory).
func TestDiskTierCapacity(t *testing.T) {
	t.Parallel()
	const (
		objects = 1024
		size    = 1 << 20
		workers = 8
		ramSize = 64 << 20
		// rssMargin is the runtime, buffers and the index above the
		// memory tier: far below the 1 GiB served.
		rssMargin = 200 << 20
	)
	dir := t.TempDir()
	e := newEnv(t, func(c *shieldConfig) {
		c.CachePath = filepath.Join(dir, "cache")
		c.MaxObjectSize = "2MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Cache.Size = ramSize
			cc.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 2 * config.GiB}
		}))
	})
	target := func(i int) string {
		return fmt.Sprintf("/disk/%d?size=%d&cc=public,max-age=3600", i, size)
	}
	sums := make([][32]byte, objects)
	// pass requests every object once with workers in parallel and
	// returns how many were hits with the body first fetched.
	pass := func(name string, record bool) (hits int, took time.Duration) {
		start := time.Now()
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Go(func() {
				for i := range next {
					r, err := e.try("GET", target(i))
					if err != nil {
						t.Errorf("%s: %v", name, err)
						continue
					}
					if r.status != 200 || len(r.body) != size {
						t.Errorf("%s %d: status %d, %d bytes", name, i, r.status, len(r.body))
						continue
					}
					sum := sha256.Sum256(r.body)
					mu.Lock()
					if record {
						sums[i] = sum
					} else if sum != sums[i] {
						t.Errorf("%s %d: body differs from the first fetch", name, i)
					}
					if strings.HasPrefix(r.header.Get("Cache-Status"), "shield; hit") {
						hits++
					}
					mu.Unlock()
				}
			})
		}
		for i := range objects {
			next <- i
		}
		close(next)
		wg.Wait()
		return hits, time.Since(start)
	}
	metric := func(name string) float64 { v, _ := promText(e.metrics()).value(name); return v }
	// readBack is one read pass after phase: ≥ 95 % hits, and shield's
	// RSS within the memory tier plus rssMargin.
	readBack := func(phase string) {
		t.Helper()
		fetches := e.stats().ByPath
		hits, took := pass(phase, false)
		rss := soakRSS(t, e.shield.cmd.Process.Pid)
		var refetched int64
		for p, n := range e.stats().ByPath {
			if strings.HasPrefix(p, "/disk/") {
				refetched += n - fetches[p]
			}
		}
		t.Logf("%s: %d/%d hits (%.1f %%), %d origin fetches, in %v (%.0f MiB/s); VmRSS %d MiB, VmHWM %d MiB (cache.size %d MiB); disk hits %v",
			phase, hits, objects, 100*float64(hits)/objects, refetched, took.Round(time.Millisecond),
			float64(objects*size>>20)/took.Seconds(), rss>>20, procStatus(t, e.shield.cmd.Process.Pid, "VmHWM")>>10,
			ramSize>>20, metric("shield_cache_disk_hits_total"))
		if hits < objects*95/100 {
			t.Errorf("%s: %d/%d hits, want ≥ 95%%", phase, hits, objects)
		}
		if limit := int64(ramSize + rssMargin); rss > limit {
			t.Errorf("%s: VmRSS %d MiB after serving %d MiB from disk, want ≤ %d MiB", phase, rss>>20, objects*size>>20, limit>>20)
		}
	}

	_, took := pass("fill", true)
	t.Logf("fill: %d × %d bytes in %v (%.0f MiB/s)", objects, size, took.Round(time.Millisecond), float64(objects*size>>20)/took.Seconds())
	readBack("read back")
	t.Logf("disk tier: %v entries, %.0f MiB, %v evictions, %v errors", metric("shield_cache_disk_entries"),
		metric("shield_cache_disk_bytes")/(1<<20), metric("shield_cache_disk_evictions_total"), metric("shield_cache_disk_errors_total"))
	if metric("shield_cache_disk_entries") < objects*95/100 || metric("shield_cache_disk_errors_total") != 0 {
		t.Errorf("disk tier metrics: %v entries, %v errors", metric("shield_cache_disk_entries"), metric("shield_cache_disk_errors_total"))
	}

	// HEAD and Range answers of a disk entry: the head alone, and the
	// part cut from the stored object.
	if r := e.do("HEAD", target(7)); r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "1048576" {
		t.Errorf("HEAD of a disk entry: %d, %d bytes, Content-Length %q", r.status, len(r.body), r.header.Get("Content-Length"))
	}
	if r := e.get(target(7), "Range", "bytes=1000-1099"); r.status != 206 || len(r.body) != 100 {
		t.Errorf("Range of a disk entry: %d, %d bytes", r.status, len(r.body))
	}
	if r := e.get(target(7)); !strings.HasPrefix(r.header.Get("Cache-Status"), "shield; hit") || sha256.Sum256(r.body) != sums[7] {
		t.Errorf("GET after HEAD and Range: %v", r)
	}

	restart := func(sig syscall.Signal) {
		t.Helper()
		e.client.CloseIdleConnections()
		start := time.Now()
		e.shield.signal(t, sig)
		code := e.shield.wait(t)
		stopped := time.Since(start)
		if sig == syscall.SIGTERM && code != 0 {
			t.Errorf("shield exited %d on SIGTERM, want 0", code)
		}
		e.startShield()
		t.Logf("%v: stopped in %v, ready again in %v; disk tier %v entries", sig, stopped.Round(time.Millisecond),
			(time.Since(start) - stopped).Round(time.Millisecond), metric("shield_cache_disk_entries"))
	}
	restart(syscall.SIGTERM)
	readBack("after SIGTERM")
	restart(syscall.SIGKILL)
	readBack("after kill -9")
}

// TestDiskTierFailing: the disk tier failing under a running node never
// crashes it nor serves a wrong body. Its directory removed: entries are
// misses within the kept files' check interval (a second; served whole
// from their descriptors until then), fetched again and written again
// (the directories recreated), then hits. Its temporary directory replaced by a file (every write
// fails): a warning is logged, shield_cache_disk_degraded is 1, entries
// memory takes are cached there, larger ones are served whole and
// counted dropped, not stored.
func TestDiskTierFailing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	diskDir := filepath.Join(dir, "disk")
	e := newEnv(t, func(c *shieldConfig) {
		c.CachePath = filepath.Join(dir, "cache")
		c.MaxObjectSize = "16MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Cache.Size = 64 * config.MiB // memory takes up to 8 MiB
			cc.Cache.Disk = &config.CacheDisk{Path: diskDir, Size: 256 * config.MiB}
		}))
	})
	// rate: the origin sends at 1 GiB/s and says its body's sha256.
	target := func(name string, size int) string {
		return fmt.Sprintf("/failing/%s?size=%d&rate=%d&cc=public,max-age=3600", name, size, 1<<30)
	}
	// get fetches name and checks the body against the origin's sum;
	// it returns whether the answer was a hit.
	get := func(name string, size int) bool {
		t.Helper()
		r := e.get(target(name, size))
		sum := sha256.Sum256(r.body)
		if r.status != 200 || len(r.body) != size || r.header.Get("X-Origin-Body-Sha256") != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s: %d, %d bytes, sha256 %x, origin says %q", name, r.status, len(r.body), sum, r.header.Get("X-Origin-Body-Sha256"))
		}
		return parseCacheStatus(r.header).hit
	}
	metric := func(name string) float64 { v, _ := promText(e.metrics()).value(name); return v }
	const objects = 8
	pass := func() (hits int) {
		for i := range objects {
			if get(strconv.Itoa(i), 1<<20) {
				hits++
			}
		}
		return hits
	}
	pass()
	if hits := pass(); hits != objects || metric("shield_cache_disk_entries") != objects {
		t.Fatalf("healthy: %d/%d hits, %v disk entries", hits, objects, metric("shield_cache_disk_entries"))
	}

	if err := os.RemoveAll(diskDir); err != nil {
		t.Fatal(err)
	}
	// A kept file's link count is checked at most once a second
	// (proxy/cache/diskopen.go): each object is served whole from its
	// descriptor until then, then misses once, is fetched and written again.
	removed := time.Now()
	missed := 0
	for i := range objects {
		for get(strconv.Itoa(i), 1<<20) {
			if time.Since(removed) > 10*time.Second {
				t.Fatalf("object %d still a hit %v after its file was removed", i, time.Since(removed))
			}
			time.Sleep(10 * time.Millisecond)
		}
		missed++
	}
	hits := pass()
	t.Logf("disk directory removed: %d/%d misses within %v, then %d/%d hits; %v disk entries, %v errors",
		missed, objects, time.Since(removed), hits, objects, metric("shield_cache_disk_entries"), metric("shield_cache_disk_errors_total"))
	if hits != objects || metric("shield_cache_disk_entries") != objects {
		t.Errorf("disk directory removed: %d hits of %d after the misses, %v disk entries; want all hits from disk again",
			hits, objects, metric("shield_cache_disk_entries"))
	}

	tmp := filepath.Join(diskDir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		small, large := get("small", 1<<20), get("large", 12<<20)
		if i > 0 && (!small || large) {
			t.Errorf("failing disk, round %d: 1 MiB hit %v (want true, kept in memory), 12 MiB hit %v (want false, too large for memory)", i, small, large)
		}
	}
	if e.shield.exited() {
		t.Fatal("shield exited on a failing disk")
	}
	m := promText(e.metrics())
	val := func(name string) float64 { v, _ := m.value(name); return v }
	t.Logf("failing disk: %v errors, degraded %v (%v times), %v dropped; stored %v", val("shield_cache_disk_errors_total"),
		val("shield_cache_disk_degraded"), val("shield_cache_disk_degraded_total"), val("shield_cache_disk_dropped_total"),
		val(`shield_cache_stored_total{route="demo"}`))
	// Stored: the objects twice (before and after the removal) and the
	// small one; never the dropped large one.
	if val("shield_cache_disk_errors_total") < 1 || val("shield_cache_disk_degraded") != 1 || val("shield_cache_disk_dropped_total") != 3 ||
		val(`shield_cache_stored_total{route="demo"}`) != 2*objects+1 {
		t.Errorf("failing disk metrics: want errors, degraded 1, 3 dropped, %d stored", 2*objects+1)
	}
	// The line crosses a pipe to the test's copier goroutine: poll it.
	eventually(t, "a warning logged for the failing disk", func() bool {
		return strings.Contains(e.shield.stderr.String(), "cache disk tier failing")
	})
}
