package proxy

import (
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
)

// The disk tier (proxy/cache's disk.go) holds large entries in files. A
// fresh hit on one is answered with the entry's head and the file as the
// body stream (streamhit.go): fasthttp sends an *os.File body with
// sendfile on plain TCP connections, so the body is never copied into
// memory.

// openDiskTier adds cfg's disk tier to the cache. A tier that cannot be
// opened leaves the cache in memory, logged: the cache is an
// optimisation, never a reason not to start.
func (p *Proxy) openDiskTier(cfg *config.Config) {
	d := cfg.Cache.Disk
	if d == nil {
		return
	}
	if err := p.cache.OpenDisk(cache.DiskConfig{Dir: d.Path, Size: int64(d.Size)}, p.logger); err != nil {
		p.logger.Error("cache disk tier unavailable; memory only", "err", err)
	}
}

// writeDiskMetrics exports the disk tier's counters (zero without one).
func (p *Proxy) writeDiskMetrics(w io.Writer) {
	st, _ := p.cache.DiskStats()
	metrics.WriteGaugeUint64(w, `shield_cache_disk_entries`, uint64(st.Objects))
	metrics.WriteGaugeUint64(w, `shield_cache_disk_bytes`, uint64(st.Bytes))
	metrics.WriteGaugeUint64(w, `shield_cache_disk_fill_bytes`, uint64(st.FillBytes))
	metrics.WriteCounterUint64(w, `shield_cache_disk_fill_refused_total`, st.FillRefused)
	metrics.WriteGaugeUint64(w, `shield_cache_disk_max_bytes`, uint64(st.MaxBytes))
	metrics.WriteGaugeUint64(w, `shield_cache_disk_open_files`, uint64(st.OpenFiles))
	metrics.WriteCounterUint64(w, `shield_cache_disk_hits_total`, st.Hits)
	metrics.WriteCounterUint64(w, `shield_cache_disk_misses_total`, st.Misses)
	metrics.WriteCounterUint64(w, `shield_cache_disk_writes_total`, st.Writes)
	metrics.WriteCounterUint64(w, `shield_cache_disk_evictions_total`, st.Evictions)
	metrics.WriteCounterUint64(w, `shield_cache_disk_errors_total`, st.Errors)
	metrics.WriteCounterUint64(w, `shield_cache_disk_corrupt_files_total`, st.Corrupt)
	var degraded uint64
	if st.Degraded {
		degraded = 1
	}
	metrics.WriteGaugeUint64(w, `shield_cache_disk_degraded`, degraded)
	metrics.WriteCounterUint64(w, `shield_cache_disk_degraded_total`, st.DegradedTotal)
	metrics.WriteCounterUint64(w, `shield_cache_disk_dropped_total`, st.Dropped)
}
