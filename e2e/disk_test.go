package e2e

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
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
		e.shield.wait(t)
		stopped := time.Since(start)
		e.startShield()
		t.Logf("%v: stopped in %v, ready again in %v; disk tier %v entries", sig, stopped.Round(time.Millisecond),
			(time.Since(start) - stopped).Round(time.Millisecond), metric("shield_cache_disk_entries"))
	}
	restart(syscall.SIGTERM)
	readBack("after SIGTERM")
	restart(syscall.SIGKILL)
	readBack("after kill -9")
}
