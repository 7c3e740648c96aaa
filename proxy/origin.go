package proxy

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/config"
)

// origin is one upstream service as configured now: a fasthttp.HostClient
// per server address, picked round-robin (HostClient rather than Client,
// so a client-controlled Host can never open connections elsewhere,
// STYLE §3.8), plus the protection state that outlives reloads.
type origin struct {
	name    string
	clients []*fasthttp.HostClient
	next    atomic.Uint32
	timeout time.Duration
	*originState
}

// originState is what a reload keeps: the budget (in-flight counts,
// rate tokens), the breaker (when its settings are unchanged), the retry
// budget and the metric handles.
type originState struct {
	budget  *admission.Origin
	brk     atomic.Pointer[breaker.Breaker] // nil: breaker disabled
	brkConf config.Breaker
	retry   *breaker.RetryBudget
	m       *originMetrics
}

func newClients(oc *config.Origin) []*fasthttp.HostClient {
	dialTimeout := oc.ConnectTimeout
	var cs []*fasthttp.HostClient
	for _, addr := range oc.Servers {
		cs = append(cs, &fasthttp.HostClient{
			Addr: addr,
			Name: "shield",
			// Dial through DialTimeout so the request deadline still
			// applies (a custom Dial ignores it, fasthttp client.go).
			DialTimeout: func(addr string, _ time.Duration) (net.Conn, error) {
				return fasthttp.DialTimeout(addr, dialTimeout)
			},
			// The budget (admission.Origin) bounds in-flight fetches;
			// the pool only needs to be as large.
			MaxConns: oc.MaxConcurrency,
			// Per-read/write bounds; the whole fetch is bounded by the
			// deadline passed to DoDeadline.
			ReadTimeout:  oc.Timeout,
			WriteTimeout: oc.Timeout,
			// No hidden retries: they multiply origin load and hide
			// failures from the breaker (STYLE §3.11). shield retries
			// once, explicitly, inside the retry budget.
			MaxIdemponentCallAttempts: 1,
			ReadBufferSize:            int(oc.MaxResponseHeaderSize),
			// Bodies are streamed so that objects above max_object_size
			// pass through without being buffered whole.
			StreamResponseBody: true,
			// Forward the path exactly as received: the cache key uses
			// the raw path, so the origin must see the same bytes.
			DisablePathNormalizing:   true,
			NoDefaultUserAgentHeader: true,
		})
	}
	return cs
}

func breakerSettings(b config.Breaker) breaker.Settings {
	return breaker.Settings{
		ConsecutiveFailures:      uint32(b.ConsecutiveFailures),
		FailureRatio:             b.FailureRatio,
		MinRequests:              uint32(b.MinRequests),
		Interval:                 b.Interval,
		OpenFor:                  b.OpenFor,
		HalfOpenProbes:           uint32(b.HalfOpenProbes),
		TooManyRequestsIsFailure: b.TripOn429,
	}
}

// do sends req and reads the response head into resp under deadline.
// The body, if any, is left in resp.BodyStream().
func (o *origin) do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	c := o.clients[0]
	if n := len(o.clients); n > 1 {
		c = o.clients[int(o.next.Add(1))%n]
	}
	o.m.inFlight.Add(1)
	defer o.m.inFlight.Add(-1)
	return c.DoDeadline(req, resp, deadline)
}

// failure says why an origin could not give an answer, and what shield
// answers instead when no stale copy can.
type failure struct {
	status     int           // 502, 503 or 504
	detail     string        // Cache-Status detail and stale reason label
	retryAfter time.Duration // for 503s
}

// call performs one protected origin call: the origin budget (and the
// tenant's share of it), the breaker, the fetch, and at most one retry of
// an idempotent request that failed to connect, inside the retry budget.
// On success resp holds the answer's head; its body is still streaming.
func (o *origin) call(t *admission.Tenant, req *fasthttp.Request, resp *fasthttp.Response) (ok bool, f failure) {
	now := time.Now()
	if reason, ra := o.budget.Acquire(now, t); reason != admission.None {
		o.m.budgetRejected[reason].Inc()
		detail := "budget"
		if reason == admission.OriginShare {
			detail = "origin-share"
		}
		return false, failure{status: fasthttp.StatusServiceUnavailable, detail: detail, retryAfter: ra}
	}
	defer o.budget.Release(t)
	brk := o.brk.Load()
	var c breaker.Call
	if brk != nil {
		var err error
		if c, err = brk.Allow(); err != nil {
			return false, failure{status: fasthttp.StatusServiceUnavailable, detail: "breaker-open", retryAfter: brk.RetryAfter(now)}
		}
	}
	o.retry.Record(now)
	start := time.Now()
	err := o.do(req, resp, start.Add(o.timeout))
	if err != nil && breaker.Retryable(err) && breaker.Idempotent(string(req.Header.Method())) && o.retry.TryRetry(time.Now()) {
		o.m.retries.Inc()
		resp.Reset()
		err = o.do(req, resp, time.Now().Add(o.timeout))
	}
	status := 0
	if err == nil {
		status = resp.StatusCode()
		o.m.duration.UpdateDuration(start)
	}
	if brk != nil {
		c.Done(brk.Classify(status, err))
	}
	if err != nil {
		outcome, st := classifyErr(err)
		o.m.fetches[outcome].Inc()
		return false, failure{status: st, detail: outcomeLabels[outcome]}
	}
	switch {
	case status == fasthttp.StatusNotModified:
		o.m.fetches[outNotModified].Inc()
	case status >= 500:
		o.m.fetches[out5xx].Inc()
	default:
		o.m.fetches[outOK].Inc()
	}
	return true, failure{}
}

// classifyErr maps a transport error to the fetch outcome and the status
// shield answers with: 504 when the origin did not answer in time, 502
// when it could not be reached or answered garbage.
func classifyErr(err error) (fetchOutcome, int) {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, fasthttp.ErrDialTimeout),
		errors.As(err, &ne) && ne.Timeout():
		return outTimeout, fasthttp.StatusGatewayTimeout
	default:
		return outError, fasthttp.StatusBadGateway
	}
}
