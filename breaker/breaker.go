package breaker

import (
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker is one origin's circuit breaker. It is safe for concurrent use;
// create it with [New].
type Breaker struct {
	name             string
	openFor          time.Duration
	tooManyIsFailure bool      // Settings.TooManyRequestsIsFailure
	failStatus       StatusSet // Settings.FailureStatuses
	onChange         func(name string, from, to State)
	cb               *gobreaker.TwoStepCircuitBreaker[struct{}]

	// epoch is a monotonic base for openedAt, read once in New, so that
	// RetryAfter measures elapsed time on the monotonic clock and an int64
	// is enough to hold the instant.
	epoch time.Time
	// openedAt is the time since epoch of the last transition to Open,
	// stored by the state hook before state (so a reader that sees Open
	// sees an openedAt at least as new).
	openedAt atomic.Int64
	// state mirrors the last transition gobreaker reported. It can lag
	// behind gobreaker's lazy Open→HalfOpen move; RetryAfter clamps for that.
	state atomic.Uint32

	transitions    [numStates]atomic.Uint64   // by destination state
	outcomes       [numOutcomes]atomic.Uint64 // Call.Done by outcome
	rejectedOpen   atomic.Uint64              // Allow returned ErrOpen
	rejectedProbes atomic.Uint64              // Allow returned ErrTooManyProbes
}

// New returns a closed breaker named name (the origin, used as the metric
// label and passed to onChange). s gets its defaults; New panics if s is
// invalid, so validate configuration with [Settings.Validate] first.
//
// onChange, if not nil, is called on every state change. It runs with
// gobreaker's mutex held: it must be quick (atomic store, counter,
// non-blocking channel send), must not block or log synchronously, and must
// not call the Breaker, which would deadlock.
func New(name string, s Settings, onChange func(name string, from, to State)) *Breaker {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	s = s.WithDefaults()
	b := &Breaker{
		name:             name,
		openFor:          s.OpenFor,
		tooManyIsFailure: s.TooManyRequestsIsFailure,
		failStatus:       NewStatusSet(s.FailureStatuses),
		onChange:         onChange,
		epoch:            time.Now(),
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          name,
		MaxRequests:   s.HalfOpenProbes,
		Interval:      s.Interval,
		BucketPeriod:  s.Interval / windowBuckets,
		Timeout:       s.OpenFor,
		ReadyToTrip:   readyToTrip(s),
		OnStateChange: b.stateChanged,
		IsExcluded:    func(err error) bool { return err == errIgnored },
	})
	return b
}

// readyToTrip is gobreaker's ReadyToTrip for s. gobreaker calls it with the
// window's counts after each failure in the closed state.
//
// Consecutive failures decide only while the window holds fewer than
// MinRequests outcomes; from then on the failure ratio does. Under load,
// one endpoint that fails every time while the others succeed produces
// runs of consecutive failures just by interleaving (one endpoint in five
// gives a run of 5 every 3125 requests), which must not open the breaker
// for the whole origin; its ratio (0.2) stays below FailureRatio. A dead
// origin fails every request, so the ratio trips it as fast.
func readyToTrip(s Settings) func(gobreaker.Counts) bool {
	return func(c gobreaker.Counts) bool {
		decided := uint64(c.TotalSuccesses) + uint64(c.TotalFailures)
		if decided < uint64(s.MinRequests) {
			return c.ConsecutiveFailures >= s.ConsecutiveFailures
		}
		return float64(c.TotalFailures) >= s.FailureRatio*float64(decided)
	}
}

// stateChanged is gobreaker's OnStateChange; it runs under gobreaker's mutex.
func (b *Breaker) stateChanged(_ string, from, to gobreaker.State) {
	f, t := fromGobreaker(from), fromGobreaker(to)
	if t == Open {
		b.openedAt.Store(int64(time.Since(b.epoch)))
	}
	b.state.Store(uint32(t))
	b.transitions[t].Add(1)
	if b.onChange != nil {
		b.onChange(b.name, f, t)
	}
}

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return HalfOpen
	case gobreaker.StateOpen:
		return Open
	}
	return Closed
}

// Call is one origin call admitted by [Breaker.Allow].
type Call struct {
	b    *Breaker
	done func(error) // gobreaker's; nil for the zero Call
}

// Done reports the call's outcome. Call it exactly once per admitted call,
// on every path (a half-open probe never reported holds its slot until the
// breaker changes state); a second call would be counted twice. Done on the
// zero Call, as returned with an error, does nothing.
func (c Call) Done(o Outcome) {
	if c.done == nil {
		return
	}
	if o >= numOutcomes {
		o = Ignored
	}
	c.b.outcomes[o].Add(1)
	c.done(o.err())
}

// Allow asks to make one origin call. If it returns an error ([ErrOpen] or
// [ErrTooManyProbes], nothing else), make no call: serve stale, or 503 with
// [Breaker.RetryAfter]. Otherwise make the call and report its outcome with
// Call.Done. A rejection does not allocate; an admission allocates once
// (gobreaker's callback), which is fine on the miss path.
func (b *Breaker) Allow() (Call, error) {
	done, err := b.cb.Allow()
	if err != nil {
		if err == gobreaker.ErrOpenState {
			b.rejectedOpen.Add(1)
			return Call{}, ErrOpen
		}
		b.rejectedProbes.Add(1)
		return Call{}, ErrTooManyProbes
	}
	return Call{b: b, done: done}, nil
}

// Name returns the name given to New.
func (b *Breaker) Name() string { return b.name }

// State returns the current state. It takes gobreaker's lock and applies a
// due Open→HalfOpen move, so a scrape sees the state a call would see.
func (b *Breaker) State() State { return fromGobreaker(b.cb.State()) }

// RetryAfter returns how long from now until the open breaker may let a probe
// through: OpenFor minus the time since it opened, never negative. It is 0
// when the breaker is not open (a half-open rejection: probes are in flight,
// try again soon). Callers round it up to whole seconds, at least 1, for the
// Retry-After header. It does not allocate or lock.
func (b *Breaker) RetryAfter(now time.Time) time.Duration {
	if State(b.state.Load()) != Open {
		return 0
	}
	elapsed := now.Sub(b.epoch) - time.Duration(b.openedAt.Load())
	left := b.openFor - elapsed
	switch {
	case left < 0:
		return 0
	case left > b.openFor: // now was read before the breaker opened
		return b.openFor
	}
	return left
}

// Stats is a snapshot of a breaker's counters for export at scrape time.
// The counters only grow.
type Stats struct {
	State       State
	Transitions [numStates]uint64   // state changes, indexed by destination State
	Outcomes    [numOutcomes]uint64 // Call.Done, indexed by Outcome
	// RejectedOpen and RejectedProbes count Allow returning ErrOpen and
	// ErrTooManyProbes: origin calls the breaker saved.
	RejectedOpen, RejectedProbes uint64
}

// Stats returns the breaker's state and counters. It takes gobreaker's lock
// once (for the state); the counters are read without it, so they are each
// exact but not a single instant together.
func (b *Breaker) Stats() Stats {
	st := Stats{
		State:          b.State(),
		RejectedOpen:   b.rejectedOpen.Load(),
		RejectedProbes: b.rejectedProbes.Load(),
	}
	for i := range st.Transitions {
		st.Transitions[i] = b.transitions[i].Load()
	}
	for i := range st.Outcomes {
		st.Outcomes[i] = b.outcomes[i].Load()
	}
	return st
}

// Classify maps a fetch result to an Outcome like the package [Classify],
// with the breaker's own failure statuses, and a 429 a Failure when the
// settings say so.
func (b *Breaker) Classify(status int, err error) Outcome {
	if err == nil && status == statusTooManyRequests && b.tooManyIsFailure {
		return Failure
	}
	return classify(status, err, &b.failStatus)
}
