package proxy

import (
	"io"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
	"github.com/shield-proxy/shield/stale"
)

// The disk tier (proxy/cache's disk.go) holds large entries in files. A
// fresh hit on one is answered with the entry's head and the file as the
// body stream: fasthttp sends an *os.File body with sendfile on plain TCP
// connections, so the body is never copied into memory. Everything else
// — stale answers, revalidations, ranges, coded siblings, eager
// refreshes, forwarded and read-through requests — reads the entry whole
// (cache.GetVerified) and takes the memory path unchanged.

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

// getEntry is the lookup's store read: GetVerified, except that when the
// request can be answered from a file (sc.fileOK) a disk entry comes
// back as its metadata, its body left in sc.file.
func (p *Proxy) getEntry(b, key []byte, sc *scratch) ([]byte, bool) {
	if !sc.fileOK {
		return p.cache.GetVerified(b, key)
	}
	b, verified, f, n := p.cache.GetVerifiedOrFile(b, key)
	if f != nil {
		sc.closeFile()
		sc.file, sc.fileLen = f, n
	}
	return b, verified
}

// closeFile closes a disk entry's file the request did not send.
func (sc *scratch) closeFile() {
	if sc.file != nil {
		_ = sc.file.Close()
		sc.file, sc.fileLen = nil, 0
	}
}

// fileLookup answers a fresh hit whose body is in sc.file (done), or
// returns the lookup again with the entry read whole, for serveLookup's
// other paths.
func (p *Proxy) fileLookup(ctx *fasthttp.RequestCtx, rte *route, sc *scratch, e *cache.Entry, b []byte, lk lookupResult, now time.Time) (_ []byte, _ lookupResult, done bool) {
	if lk != lkHit {
		sc.closeFile()
		return b, lk, false
	}
	if (e.Kind == cache.KindResponse || e.Kind == cache.KindNearCopy) && sc.present&fieldRange == 0 {
		age := e.Age(now)
		eager := rte.eagerRefresh > 0 && float64(age) >= float64(e.Lifetime)*rte.eagerRefresh
		if !eager && e.Classify(age, &sc.cc) == stale.Fresh {
			p.serveFileHit(ctx, sc, e, b, age, csHitTTL)
			return b, lk, true
		}
	}
	sc.closeFile()
	sc.fileOK = false
	b, lk = p.lookup(b[:0], ctx, sc, e)
	return b, lk, false
}

// serveFileHit is serveHit for an entry whose body is sc.file's next
// sc.fileLen bytes: the response's body stream, closed once sent.
func (p *Proxy) serveFileHit(ctx *fasthttp.RequestCtx, sc *scratch, e *cache.Entry, b []byte, age time.Duration, csPrefix []byte) {
	resp := &ctx.Response
	c := condNone
	if sc.present&fieldsConditional != 0 {
		c = p.precondition(&ctx.Request.Header, e)
	}
	notModified := c == condNotModified
	ageSec, ttl := int64(age/time.Second), int64((time.Duration(e.Lifetime)-age)/time.Second)
	if c == condFailed {
		sc.closeFile()
		preconditionFailed(resp, e, sc, ageSec, ttl, csPrefix)
		resp.SwapBody(b[:0])
		return
	}
	if notModified || !p.heads.write(resp, sc, e, ageSec, ttl, csPrefix) {
		writeEntryHeaders(resp, e, notModified)
		stamp(&resp.Header, sc, ageSec, ttl, csPrefix)
	}
	sc.peerTags(resp, e)
	resp.SwapBody(b[:0])
	if notModified {
		sc.closeFile()
		resp.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	resp.SetBodyStream(sc.file, int(sc.fileLen))
	sc.file, sc.fileLen = nil, 0
}

// writeDiskMetrics exports the disk tier's counters (zero without one).
func (p *Proxy) writeDiskMetrics(w io.Writer) {
	st, _ := p.cache.DiskStats()
	metrics.WriteGaugeUint64(w, `shield_cache_disk_entries`, uint64(st.Objects))
	metrics.WriteGaugeUint64(w, `shield_cache_disk_bytes`, uint64(st.Bytes))
	metrics.WriteGaugeUint64(w, `shield_cache_disk_max_bytes`, uint64(st.MaxBytes))
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
