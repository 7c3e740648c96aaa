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

// TestDiskTierCapacity: a 32 MiB memory cache with a 512 MiB disk tier
// takes 256 MiB of 1 MiB objects and serves them back as hits with
// identical bytes — before and after a kill -9 — while the process's
// RSS stays near the memory tier's size (bodies are sent from files,
// not kept in memory).
func TestDiskTierCapacity(t *testing.T) {
	t.Parallel()
	const (
		objects = 256
		size    = 1 << 20
		workers = 8
		ramSize = 32 << 20
	)
	dir := t.TempDir()
	e := newEnv(t, func(c *shieldConfig) {
		c.CachePath = filepath.Join(dir, "cache")
		c.MaxObjectSize = "2MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 512 * config.MiB}
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
	_, took := pass("fill", true)
	t.Logf("fill: %d × %d bytes in %v", objects, size, took)
	hits, took := pass("read", false)
	rss := soakRSS(t, e.shield.cmd.Process.Pid)
	t.Logf("read back: %d/%d hits in %v; VmRSS %d MiB (cache.size %d MiB)", hits, objects, took, rss>>20, ramSize>>20)
	if hits < objects*95/100 {
		t.Errorf("read back: %d/%d hits, want ≥ 95%%", hits, objects)
	}
	m, err := doHTTP(e.client, "GET", "http://"+e.cfg.Admin+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metric := func(name string) float64 { v, _ := promText(m.body).value(name); return v }
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

	e.client.CloseIdleConnections()
	e.shield.signal(t, syscall.SIGKILL)
	e.shield.wait(t)
	e.startShield()
	hits, took = pass("after kill -9", false)
	rss = soakRSS(t, e.shield.cmd.Process.Pid)
	t.Logf("after kill -9: %d/%d hits in %v; VmRSS %d MiB", hits, objects, took, rss>>20)
	if hits < objects*95/100 {
		t.Errorf("after kill -9: %d/%d hits, want ≥ 95%%", hits, objects)
	}
	// Hits from disk keep nothing of the bodies: the process stays near
	// its memory tier plus the runtime, far below the 256 MiB served.
	if limit := int64(ramSize + 96<<20); rss > limit {
		t.Errorf("VmRSS %d MiB after serving %d MiB from disk, want ≤ %d MiB", rss>>20, objects*size>>20, limit>>20)
	}
}
