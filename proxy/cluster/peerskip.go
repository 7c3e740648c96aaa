package cluster

import (
	"sync/atomic"

	"github.com/shield-proxy/shield/breaker"
)

// peerSkip is a peer's breaker: after peerSkipTrip consecutive failures
// the peer is skipped (requests are served locally) for peerSkipFor,
// then one request probes it: success closes, failure skips again.
//
// Origins get the breaker package (gobreaker, failure ratios, metrics);
// a peer needs only this, and it is on the path of every forwarded hit,
// where gobreaker's two-step call allocates its callback each time.
// This one is a few atomics and allocates nothing.
type peerSkip struct {
	failures  atomic.Int32 // consecutive failures
	openUntil atomic.Int64 // unix ns; 0: closed
	probing   atomic.Bool  // the one half-open probe is out
}

const (
	peerSkipTrip = 3
	peerSkipFor  = 2e9 // ns
)

// allow says whether a request may go to the peer now (unix ns) and
// whether it is the half-open probe.
func (s *peerSkip) allow(now int64) (ok, probe bool) {
	until := s.openUntil.Load()
	switch {
	case until == 0:
		return true, false
	case now < until:
		return false, false
	case s.probing.CompareAndSwap(false, true):
		return true, true
	}
	return false, false
}

// done reports an allowed request's outcome.
func (s *peerSkip) done(probe bool, o breaker.Outcome, now int64) {
	switch o {
	case breaker.Success:
		s.failures.Store(0)
		if probe {
			s.openUntil.Store(0)
			s.probing.Store(false)
		}
	case breaker.Failure:
		n := s.failures.Add(1)
		switch {
		case probe:
			s.openUntil.Store(now + peerSkipFor)
			s.probing.Store(false)
		case n >= peerSkipTrip:
			s.openUntil.CompareAndSwap(0, now+peerSkipFor)
		}
	default: // Ignored: no word on the peer's health
		if probe {
			s.probing.Store(false)
		}
	}
}

// state is the breaker state at now, for the status page.
func (s *peerSkip) state(now int64) breaker.State {
	switch until := s.openUntil.Load(); {
	case until == 0:
		return breaker.Closed
	case now < until:
		return breaker.Open
	}
	return breaker.HalfOpen
}
