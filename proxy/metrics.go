package proxy

import (
	"io"
	"sync/atomic"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/VictoriaMetrics/metrics"
)

// Metrics use github.com/VictoriaMetrics/metrics rather than
// prometheus/client_golang: its counters are a single atomic add with the
// handle resolved once, so the hit path pays no label lookup and no
// allocation; it writes the Prometheus text format and standard `le`
// histograms (PrometheusHistogram; the per-request latency histogram is
// shield's own lock-free latencyHist, lathist.go, written in the same
// format). Every handle below is created when a route or origin is built,
// never per request; label values come only from configuration.

// result is how a request was answered, the `cache` label of
// shield_requests_total.
type result uint8

const (
	resHit         result = iota // fresh copy from cache
	resMiss                      // fetched from the origin (leader or alone)
	resCollapsed                 // waited on another request's fetch
	resRevalidated               // stale copy confirmed by a 304
	resStale                     // stale copy served (SWR / SIE)
	resBypass                    // not cacheable for this request (hit-for-miss, request no-store, Range...)
	resPass                      // method not cacheable
	resError                     // answered with a shield-generated 5xx
	resRejected                  // refused by admission (429)
	resPeer                      // answered by the key's owner node
	numResults
	// resDeferred: not answered, to be served again (serveRequestAs
	// inline); never counted.
	resDeferred = numResults
)

var resultLabels = [numResults]string{"hit", "miss", "collapsed", "revalidated", "stale", "bypass", "pass", "error", "rejected", "peer"}

// staleReason is the `reason` label of shield_stale_served_total and the
// Cache-Status detail of a stale answer.
type staleReason uint8

const (
	staleSWR staleReason = iota
	staleOrigin5xx
	staleOrigin429
	staleTimeout
	staleError
	staleBreakerOpen
	staleBudget
	staleOriginShare
	staleWaitTimeout
	staleShed
	staleQueueTimeout
	numStaleReasons
)

var staleLabels = [numStaleReasons]string{"stale-while-revalidate", "origin-5xx", "origin-429", "timeout", "error", "breaker-open", "budget", "origin-share", "wait-timeout", "shed", "queue-timeout"}

// staleReasonOf maps a failure detail to its stale reason.
func staleReasonOf(detail string) staleReason {
	for i, l := range staleLabels {
		if l == detail {
			return staleReason(i)
		}
	}
	return staleError
}

// durationBuckets are the request latency histogram bounds (proxy/upstream
// uses the same for fetches), in seconds.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// globalMetrics are process-wide handles.
type globalMetrics struct {
	set              *metrics.Set
	unrouted         *metrics.Counter
	badRequests      *metrics.Counter
	corrupt          *metrics.Counter
	waiters          *metrics.Counter // requests that joined a fetch in flight
	waitTimeouts     *metrics.Counter
	waitOverflow     *metrics.Counter // waiters beyond max_waiters that fetched alone
	waiting          atomic.Int64
	hitForMiss       *metrics.Counter // hit-for-miss records written
	notStored        *metrics.Counter
	overtaken        *metrics.Counter // answers not stored: invalidated or superseded while in flight
	peerPurgeRetries *metrics.Counter
	purgesPending    *metrics.Counter // purges answered before every peer acknowledged them
	purgesDropped    *metrics.Counter // queued purges given up on (the peer syncs them)
	invalidations    *metrics.Counter
	streamed         *metrics.Counter // responses too big to store, streamed through
	streamedFills    *metrics.Counter // misses streamed to their clients as they arrived (fill.go)
	fillFailures     *metrics.Counter // streamed fills whose body failed (not stored)
	// fill readers cut short (fillReader.cut): the fill failed (its
	// origin body, mostly), or its file could not be read
	// (writeTruncatedMetrics adds the cache's own causes).
	truncFill, truncFillDisk atomic.Uint64
	compressed               *metrics.Counter // bodies compressed by shield (routes[].compress)
	purges                   *metrics.Counter
	reloads                  *metrics.Counter
	adminCrossSite           *metrics.Counter // admin requests refused as cross-site
	stalls                   *metrics.Counter // watchdog gaps that closed the cache (proxy/cluster/purgesync.go)
	reloadFails              *metrics.Counter
}

func newGlobalMetrics(cache *fastcache.Cache) *globalMetrics {
	s := metrics.NewSet()
	g := &globalMetrics{
		set:              s,
		unrouted:         s.NewCounter(`shield_unrouted_requests_total`),
		badRequests:      s.NewCounter(`shield_bad_requests_total`),
		corrupt:          s.NewCounter(`shield_cache_corrupt_entries_total`),
		waiters:          s.NewCounter(`shield_coalesced_waiters_total`),
		waitTimeouts:     s.NewCounter(`shield_coalesced_wait_timeouts_total`),
		waitOverflow:     s.NewCounter(`shield_coalesced_overflow_total`),
		hitForMiss:       s.NewCounter(`shield_cache_hit_for_miss_total`),
		notStored:        s.NewCounter(`shield_cache_not_stored_total`),
		overtaken:        s.NewCounter(`shield_cache_overtaken_total`),
		peerPurgeRetries: s.NewCounter(`shield_peer_purge_retries_total`),
		purgesPending:    s.NewCounter(`shield_purge_answered_pending_total`),
		purgesDropped:    s.NewCounter(`shield_purge_queue_dropped_total`),
		invalidations:    s.NewCounter(`shield_cache_invalidations_total`),
		streamed:         s.NewCounter(`shield_origin_streamed_responses_total`),
		streamedFills:    s.NewCounter(`shield_cache_streamed_fills_total`),
		fillFailures:     s.NewCounter(`shield_cache_streamed_fill_failures_total`),
		compressed:       s.NewCounter(`shield_compressed_bodies_total`),
		purges:           s.NewCounter(`shield_purges_total`),
		reloads:          s.NewCounter(`shield_config_reloads_total`),
		adminCrossSite:   s.NewCounter(`shield_admin_cross_site_refused_total`),
		stalls:           s.NewCounter(`shield_process_stalls_total`),
		reloadFails:      s.NewCounter(`shield_config_reload_failures_total`),
	}
	s.NewGauge(`shield_coalesced_waiters`, func() float64 { return float64(g.waiting.Load()) })
	s.RegisterMetricsWriter(func(w io.Writer) { writeCacheStats(w, cache) })
	return g
}

// writeCacheStats exports fastcache's counters once per scrape.
func writeCacheStats(w io.Writer, c *fastcache.Cache) {
	var st fastcache.Stats
	c.UpdateStats(&st)
	metrics.WriteGaugeUint64(w, `shield_cache_entries`, st.EntriesCount)
	metrics.WriteGaugeUint64(w, `shield_cache_bytes`, st.BytesSize)
	metrics.WriteGaugeUint64(w, `shield_cache_max_bytes`, st.MaxBytesSize)
	metrics.WriteCounterUint64(w, `shield_cache_gets_total`, st.GetCalls)
	metrics.WriteCounterUint64(w, `shield_cache_sets_total`, st.SetCalls)
	metrics.WriteCounterUint64(w, `shield_cache_misses_total`, st.Misses)
	metrics.WriteCounterUint64(w, `shield_cache_collisions_total`, st.Collisions)
	metrics.WriteCounterUint64(w, `shield_cache_corruptions_total`, st.Corruptions)
}

// routeMetrics are one route's handles.
type routeMetrics struct {
	requests *resultCounts // shield_requests_total (lathist.go)
	stale    [numStaleReasons]*metrics.Counter
	duration *latencyHist // shield_request_duration_seconds (lathist.go)
	stored   *metrics.Counter
}

func newRouteMetrics(s *metrics.Set, route string) *routeMetrics {
	m := &routeMetrics{
		duration: newLatencyHist(`shield_request_duration_seconds`, `route="`+route+`"`, durationBuckets),
		stored:   s.NewCounter(`shield_cache_stored_total{route="` + route + `"}`),
		requests: newResultCounts(route),
	}
	for i := range m.stale {
		m.stale[i] = s.NewCounter(`shield_stale_served_total{route="` + route + `",reason="` + staleLabels[i] + `"}`)
	}
	s.RegisterMetricsWriter(m.requests.write)
	s.RegisterMetricsWriter(m.duration.write)
	return m
}

// writeTruncatedMetrics exports the responses whose body stream ended
// before its end once its length was on the wire (the connection closed,
// an HTTP/2 stream reset): by cause, a memory entry's piece evicted while
// it was sent, a disk read failing (a disk tier hit's or a disk fill's
// file), a streamed fill failing (its origin body, mostly).
func (p *Proxy) writeTruncatedMetrics(w io.Writer) {
	evicted, disk := p.cache.TruncatedStreams()
	metrics.WriteCounterUint64(w, `shield_truncated_responses_total{cause="evicted"}`, evicted)
	metrics.WriteCounterUint64(w, `shield_truncated_responses_total{cause="disk"}`, disk+p.g.truncFillDisk.Load())
	metrics.WriteCounterUint64(w, `shield_truncated_responses_total{cause="origin"}`, p.g.truncFill.Load())
}
