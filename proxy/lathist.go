package proxy

import (
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"
)

// latencyHist is shield_request_duration_seconds for one route: the
// Prometheus histogram metrics.PrometheusHistogram writes (same name,
// labels, `le` buckets, _sum and _count lines), kept without a lock.
// PrometheusHistogram takes a mutex on every Update, and on two cores
// serving hits that mutex's cache line moves between them on every
// request; here an observation is two atomic adds (its bucket, the sum)
// to one of latStripes stripes chosen by the connection, each stripe on
// its own cache lines, so two connections served at once on two cores
// rarely touch the same line. A scrape adds the stripes up; it reads
// each counter once, so every _bucket line and _count agree with one
// another (the count is the sum of the buckets read), and _sum may
// include an observation or two the buckets do not yet (or the reverse),
// which Prometheus tolerates of any histogram scraped while it is updated.
type latencyHist struct {
	name    string  // family name, e.g. shield_request_duration_seconds
	labels  string  // `route="x"`, without braces
	bounds  []int64 // bucket upper bounds in nanoseconds (durationBuckets)
	les     []string
	stripes [latStripes]latStripe
}

// latStripes stripes of latencyHist: a power of two.
const latStripes = 16

// latBuckets is len(durationBuckets) plus the +Inf bucket.
const latBuckets = 17

// latStripe is one stripe: the sum first and the low buckets (where hits
// fall) right after it, 192 bytes in all, so the words one observation
// adds to are at least 168 bytes from any other stripe's, whatever the
// allocation's alignment.
type latStripe struct {
	sumNanos atomic.Uint64
	counts   [latBuckets]atomic.Uint64 // the last is +Inf
	_        [192 - 8 - 8*latBuckets]byte
}

// newLatencyHist is a histogram named name{labels} with upper bounds
// bounds (seconds, increasing, at most latBuckets-1 of them).
func newLatencyHist(name, labels string, bounds []float64) *latencyHist {
	if len(bounds) != latBuckets-1 {
		panic(fmt.Sprintf("latencyHist: %d buckets, want %d", len(bounds), latBuckets-1))
	}
	h := &latencyHist{name: name, labels: labels}
	for _, b := range bounds {
		// The bounds are whole nanoseconds written in decimal (b*1e9 is
		// one only up to rounding): d <= b seconds, as PrometheusHistogram
		// compares d.Seconds() and b, exactly when d <= round(b*1e9).
		h.bounds = append(h.bounds, int64(math.Round(b*1e9)))
		h.les = append(h.les, fmt.Sprintf("%v", b)) // as PrometheusHistogram writes le
	}
	return h
}

// observe records d for a request on connection conn. A negative d is
// not counted (PrometheusHistogram drops negative values too).
func (h *latencyHist) observe(conn uint64, d time.Duration) {
	if d < 0 {
		return
	}
	s := &h.stripes[conn&(latStripes-1)]
	i := 0
	for i < len(h.bounds) && int64(d) > h.bounds[i] {
		i++
	}
	s.counts[i].Add(1)
	s.sumNanos.Add(uint64(d))
}

// write writes the histogram in the Prometheus text format, line for
// line as PrometheusHistogram writes it.
func (h *latencyHist) write(w io.Writer) {
	var counts [latBuckets]uint64
	var sum uint64
	for i := range h.stripes {
		s := &h.stripes[i]
		for j := range counts {
			counts[j] += s.counts[j].Load()
		}
		sum += s.sumNanos.Load()
	}
	var cum uint64
	for i, le := range h.les {
		cum += counts[i]
		fmt.Fprintf(w, "%s_bucket{%s,le=\"%s\"} %d\n", h.name, h.labels, le, cum)
	}
	cum += counts[latBuckets-1]
	fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", h.name, h.labels, cum)
	secs := float64(sum) / 1e9
	if float64(int64(secs)) == secs {
		fmt.Fprintf(w, "%s_sum{%s} %d\n", h.name, h.labels, int64(secs))
	} else {
		fmt.Fprintf(w, "%s_sum{%s} %g\n", h.name, h.labels, secs)
	}
	fmt.Fprintf(w, "%s_count{%s} %d\n", h.name, h.labels, cum)
}

// resultCounts is shield_requests_total for one route, by result,
// striped like latencyHist for the same reason: a metrics.Counter is one
// atomic add every request of every core makes to the same cache line.
// A scrape writes each result's line as metrics.Counter writes it.
type resultCounts struct {
	names   [numResults]string // full series names, labels included
	stripes [latStripes]resultStripe
}

// resultStripe is one stripe of resultCounts, 128 bytes: the counts are
// at least 48 bytes from another stripe's.
type resultStripe struct {
	n [numResults]atomic.Uint64
	_ [128 - 8*numResults]byte
}

func newResultCounts(route string) *resultCounts {
	c := &resultCounts{}
	for i := range c.names {
		c.names[i] = `shield_requests_total{route="` + route + `",cache="` + resultLabels[i] + `"}`
	}
	return c
}

// inc counts one request answered as r on connection conn.
func (c *resultCounts) inc(conn uint64, r result) {
	c.stripes[conn&(latStripes-1)].n[r].Add(1)
}

// get is the count of r.
func (c *resultCounts) get(r result) uint64 {
	var n uint64
	for i := range c.stripes {
		n += c.stripes[i].n[r].Load()
	}
	return n
}

func (c *resultCounts) write(w io.Writer) {
	for r, name := range c.names {
		fmt.Fprintf(w, "%s %d\n", name, c.get(result(r)))
	}
}
