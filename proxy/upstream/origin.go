package upstream

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/admission"
	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/originpool"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// Origin is one upstream service as configured now: its servers (each a
// fasthttp.HostClient, so a client-controlled Host can never open
// connections elsewhere), the pool that tracks their health and picks one
// per request, plus the protection state that outlives reloads. Registry.Update
// builds one per origin per load; it is immutable once built.
type Origin struct {
	name       string
	servers    *serverSet
	hostHeader []byte // nil: the client's Host
	timeout    time.Duration
	// failStatus: the answers that count against a server's passive
	// health, the breaker's failure statuses (an application's 500 on one
	// path ejects no server either).
	failStatus breaker.StatusSet
	maxHints   int // 103 Early Hints relayed per answer (max_early_hints)
	*state
}

// state is what a reload keeps: the budget (in-flight counts,
// rate tokens), the breaker (when its settings are unchanged), the retry
// budget, the servers and their health (when the server settings are
// unchanged) and the metric handles.
type state struct {
	budget  *admission.Origin
	brk     atomic.Pointer[breaker.Breaker] // nil: breaker disabled
	brkConf config.Breaker
	retry   *breaker.RetryBudget
	m       *originMetrics
	servers *serverSet // guarded by Registry.mu; requests use Origin.servers
}

// Name is the origin's name in the configuration.
func (o *Origin) Name() string { return o.name }

// MaxHints is how many 103 Early Hints one answer of this origin may
// relay (max_early_hints).
func (o *Origin) MaxHints() int { return o.maxHints }

// Revalidated counts the answer to a conditional request
// (shield_revalidations_total): notModified for a 304.
func (o *Origin) Revalidated(notModified bool) {
	if notModified {
		o.m.notModified.Inc()
	} else {
		o.m.modified.Inc()
	}
}

// BodyFailed counts a fetch whose body could not be read after a good
// head as an error fetch, and returns what to answer instead.
func (o *Origin) BodyFailed() Failure {
	o.m.fetches[outError].Inc()
	return Failure{Status: fasthttp.StatusBadGateway, Detail: "error"}
}

// CloseIdleConnections closes the idle keep-alive connections to the
// origin's servers (tests, so that no connection outlives them).
func (o *Origin) CloseIdleConnections() {
	for _, s := range o.servers.servers {
		s.hc.CloseIdleConnections()
		s.fresh.CloseIdleConnections()
	}
}

// Lease is an origin budget slot held from the request until the body
// has been read or relayed: the budget bounds whole fetches, not just
// the wait for a response head, so it also bounds the connection pool
// (max_concurrency connections per server) and pool exhaustion cannot
// happen behind its back. End is idempotent; the zero Lease does nothing.
type Lease struct {
	o *Origin
	t *admission.Tenant
}

// End releases the budget slot.
func (l *Lease) End() {
	if l.o != nil {
		l.o.budget.Release(l.t)
		l.o = nil
	}
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
		FailureStatuses:          b.FailureStatuses,
	}
}

// Failure says why an origin could not give an answer, and what shield
// answers instead when no stale copy can.
type Failure struct {
	Status     int           // 502, 503 or 504
	Detail     string        // Cache-Status detail and stale reason label
	RetryAfter time.Duration // for 503s
}

// Call performs one protected origin call: the origin budget (and the
// tenant's share of it), the breaker, the fetch on a server the pool
// picks, and retries:
//
//   - a request that fails on a reused keep-alive connection before any
//     response byte (the origin closed it while idle) is sent again at once
//     on a new connection, for idempotent methods. This is not an origin
//     failure: it counts for neither the breaker nor the server's health
//     nor the retry budget.
//   - an idempotent request whose connection was refused or reset is
//     retried once on another server, inside the retry budget.
//
// Only the final outcome reaches the breaker, so one dead server among
// healthy ones does not open it (the pool ejects that server instead).
// On success resp holds the answer's head, its body still streaming, and
// the returned Lease holds the budget slot: End it once the body is read
// or relayed.
func (o *Origin) Call(t *admission.Tenant, prio admission.Priority, req *fasthttp.Request, resp *fasthttp.Response) (l Lease, ok bool, f Failure) {
	if reason, ra := o.budget.AcquireWait(time.Now(), t, prio); reason != admission.None {
		o.m.budgetRejected[reason].Inc()
		return Lease{}, false, Failure{Status: fasthttp.StatusServiceUnavailable, Detail: budgetDetail(reason), RetryAfter: ra}
	}
	now := time.Now()
	l = Lease{o: o, t: t}
	brk := o.brk.Load()
	var c breaker.Call
	if brk != nil {
		var err error
		if c, err = brk.Allow(); err != nil {
			l.End()
			return Lease{}, false, Failure{Status: fasthttp.StatusServiceUnavailable, Detail: "breaker-open", RetryAfter: brk.RetryAfter(now)}
		}
	}
	if o.hostHeader != nil {
		req.Header.SetHostBytes(o.hostHeader)
	}
	o.retry.Record(now)
	idem := breaker.Idempotent(string(req.Header.Method()))
	o.m.inFlight.Add(1)
	start := time.Now()
	deadline := start.Add(o.timeout)
	s := o.servers.pick(start, nil, t)
	err := o.attempt(s, req, resp, deadline, idem)
	if err != nil && idem && breaker.Retryable(err) && o.retry.TryRetry(time.Now()) {
		o.m.retries.Inc()
		resp.Reset()
		s = o.servers.pick(time.Now(), s, t)
		err = o.attempt(s, req, resp, time.Now().Add(o.timeout), idem)
	}
	o.m.inFlight.Add(-1)
	status := 0
	if err == nil {
		status = resp.StatusCode()
		o.m.duration.UpdateDuration(start)
	}
	if brk != nil {
		outcome := brk.Classify(status, err)
		if errors.Is(err, fasthttp.ErrNoFreeConns) {
			outcome = breaker.Ignored
		}
		c.Done(outcome)
	}
	if err != nil {
		l.End()
		if errors.Is(err, fasthttp.ErrNoFreeConns) {
			o.m.budgetRejected[admission.Concurrency].Inc()
			return Lease{}, false, Failure{Status: fasthttp.StatusServiceUnavailable, Detail: "budget", RetryAfter: time.Second}
		}
		outcome, st := classifyErr(err)
		o.m.fetches[outcome].Inc()
		return Lease{}, false, Failure{Status: st, Detail: outcomeLabels[outcome]}
	}
	switch {
	case status == fasthttp.StatusNotModified:
		o.m.fetches[outNotModified].Inc()
	case status >= 500:
		o.m.fetches[out5xx].Inc()
	default:
		o.m.fetches[outOK].Inc()
	}
	return l, true, Failure{}
}

// budgetDetail is the Cache-Status detail (and stale reason) of an origin
// budget refusal.
func budgetDetail(r admission.Reason) string {
	switch r {
	case admission.OriginShare:
		return "origin-share"
	case admission.Shed:
		return "shed"
	case admission.QueueTimeout:
		return "queue-timeout"
	}
	return "budget"
}

// attempt sends req to s and reads the response head into resp. A
// request lost on a reused connection before any response byte is sent
// again at once on a new one (a new connection that fails so is a real
// failure) (idempotent methods only: a non-idempotent
// request may have been acted on).
func (o *Origin) attempt(s *server, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, idem bool) error {
	s.ps.Start()
	err := s.hc.DoDeadline(req, resp, deadline)
	if err != nil && idem && lostBeforeResponse(err) && httpx.ReusedConn(resp) {
		o.m.staleRetries.Inc()
		resp.Reset()
		req.SetConnectionClose()
		err = s.fresh.DoDeadline(req, resp, deadline)
		req.Header.ResetConnectionClose()
	}
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	o.servers.pool.Done(s.ps, serverOutcome(status, err, &o.failStatus), time.Now())
	return err
}

// lostBeforeResponse reports whether err means the connection broke
// before any response byte: fasthttp's ErrConnectionClosed (EOF or reset
// on the first read), or a write that hit a closed socket. On a pooled
// connection that is the origin having closed it while idle.
func lostBeforeResponse(err error) bool {
	if errors.Is(err, fasthttp.ErrConnectionClosed) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write" &&
		(errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET))
}

// serverOutcome is what one attempt says about the server's health: a
// connection error, a timeout or one of the origin's failure statuses
// (breaker.failure_statuses; not an application's 500) is a failure.
func serverOutcome(status int, err error, fail *breaker.StatusSet) originpool.Outcome {
	switch {
	case err == nil && fail.Has(status):
		return originpool.Failure
	case err == nil:
		return originpool.Success
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return originpool.Neutral
	}
	return originpool.Failure
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
