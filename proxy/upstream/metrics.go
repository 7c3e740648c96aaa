package upstream

import (
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/statuspage"
)

// Every handle below is created when an origin is first built, never per
// request; label values come only from configuration (proxy/metrics.go
// says why VictoriaMetrics/metrics).

// fetchOutcome is the `outcome` label of shield_origin_fetches_total.
type fetchOutcome uint8

const (
	outOK          fetchOutcome = iota // any origin answer below 500
	outNotModified                     // 304 to our conditional request
	out5xx                             // origin answered 5xx
	outTimeout                         // no answer before the deadline
	outError                           // connection refused, reset, bad response
	numOutcomes
)

var outcomeLabels = [numOutcomes]string{"ok", "not_modified", "http_5xx", "timeout", "error"}

// durationBuckets are the fetch latency histogram bounds, in seconds: the
// same as proxy's request histogram, so the two compare bucket by bucket.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// originMetrics are one origin's handles.
type originMetrics struct {
	fetches        [numOutcomes]*metrics.Counter
	budgetRejected [admission.NumReasons]*metrics.Counter
	retries        *metrics.Counter
	staleRetries   *metrics.Counter
	notModified    *metrics.Counter // revalidations answered 304
	modified       *metrics.Counter // revalidations answered with a new response
	duration       *metrics.PrometheusHistogram
	inFlight       atomic.Int64
}

func newOriginMetrics(s *metrics.Set, origin string) *originMetrics {
	m := &originMetrics{
		duration: s.NewPrometheusHistogramExt(`shield_origin_fetch_duration_seconds{origin="`+origin+`"}`, durationBuckets),
	}
	for i := range m.fetches {
		m.fetches[i] = s.NewCounter(`shield_origin_fetches_total{origin="` + origin + `",outcome="` + outcomeLabels[i] + `"}`)
	}
	for r := admission.Reason(1); int(r) < admission.NumReasons; r++ {
		if r == admission.Rate || r == admission.Concurrency || r == admission.OriginShare || r == admission.Shed || r == admission.QueueTimeout {
			m.budgetRejected[r] = s.NewCounter(`shield_origin_budget_rejections_total{origin="` + origin + `",reason="` + r.String() + `"}`)
		}
	}
	for r := range m.budgetRejected {
		if m.budgetRejected[r] == nil {
			m.budgetRejected[r] = &metrics.Counter{} // never exported
		}
	}
	m.retries = s.NewCounter(`shield_origin_retries_total{origin="` + origin + `"}`)
	m.staleRetries = s.NewCounter(`shield_origin_stale_connection_retries_total{origin="` + origin + `"}`)
	m.notModified = s.NewCounter(`shield_revalidations_total{origin="` + origin + `",result="not_modified"}`)
	m.modified = s.NewCounter(`shield_revalidations_total{origin="` + origin + `",result="modified"}`)
	s.NewGauge(`shield_origin_in_flight{origin="`+origin+`"}`, func() float64 { return float64(m.inFlight.Load()) })
	return m
}

// WriteMetrics exports, at scrape time, the state the admission and
// breaker packages and the server pools keep for every origin: budgets,
// breakers, servers' health.
func (r *Registry) WriteMetrics(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for name, st := range r.states {
		l := `{origin="` + name + `"}`
		os := st.budget.Stats(now)
		metrics.WriteGaugeUint64(w, `shield_origin_budget_limit`+l, uint64(os.Limit))
		metrics.WriteGaugeUint64(w, `shield_origin_budget_in_flight`+l, uint64(os.InFlight))
		if b := st.brk.Load(); b != nil {
			bs := b.Stats()
			metrics.WriteGaugeUint64(w, `shield_breaker_state`+l, uint64(bs.State))
			for to := breaker.Closed; to <= breaker.Open; to++ {
				metrics.WriteCounterUint64(w, `shield_breaker_transitions_total{origin="`+name+`",to="`+to.String()+`"}`, bs.Transitions[to])
			}
			metrics.WriteCounterUint64(w, `shield_breaker_rejections_total`+l, bs.RejectedOpen+bs.RejectedProbes)
		}
		if st.servers != nil {
			for _, ss := range st.servers.snapshot(now) {
				sl := `{origin="` + name + `",server="` + ss.Name + `"}`
				up := uint64(0)
				if ss.Up {
					up = 1
				}
				metrics.WriteGaugeUint64(w, `shield_origin_server_up`+sl, up)
				metrics.WriteGaugeUint64(w, `shield_origin_server_in_flight`+sl, uint64(max(ss.InFlight, 0)))
				metrics.WriteCounterUint64(w, `shield_origin_server_requests_total`+sl, ss.Requests)
				metrics.WriteCounterUint64(w, `shield_origin_server_errors_total`+sl, ss.Errors)
				metrics.WriteCounterUint64(w, `shield_origin_server_ejections_total`+sl, ss.Ejects)
			}
		}
	}
}

// Status returns every origin's part of the admin status page at now, by
// name: budget, breaker, fetch counts, servers' health.
func (r *Registry) Status(now time.Time) []statuspage.Origin {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.states))
	for name := range r.states {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]statuspage.Origin, 0, len(names))
	for _, name := range names {
		out = append(out, r.states[name].status(name, now))
	}
	return out
}

func (st *state) status(name string, now time.Time) statuspage.Origin {
	bs := st.budget.Stats(now)
	o := statuspage.Origin{Name: name, Breaker: "disabled", InFlight: bs.InFlight, Budget: bs.Limit, Ramping: bs.Ramping}
	if b := st.brk.Load(); b != nil {
		o.Breaker = b.State().String()
	}
	for i, c := range st.m.fetches {
		n := c.Get()
		o.Fetches += n
		if fetchOutcome(i) >= out5xx {
			o.Errors += n
		}
	}
	o.ErrorRate = ratio(o.Errors, o.Fetches)
	if st.servers == nil {
		return o
	}
	for _, sv := range st.servers.snapshot(now) {
		h := "up"
		switch {
		case sv.Down:
			h = "down"
		case sv.Ejected:
			h = "ejected"
		}
		o.Servers = append(o.Servers, statuspage.Server{Name: sv.Name, Health: h, InFlight: sv.InFlight, Requests: sv.Requests, Errors: sv.Errors, ErrorRate: ratio(sv.Errors, sv.Requests)})
	}
	return o
}

// ratio is a/b, 0 when b is.
func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
