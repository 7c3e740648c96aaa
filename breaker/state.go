package breaker

import "errors"

// State is a breaker's state. Its numeric value is what the state gauge
// exports: Closed 0, HalfOpen 1, Open 2 (the order gobreaker uses too).
type State uint8

// The breaker states.
const (
	Closed   State = iota // calls go through and are counted
	HalfOpen              // a few probes go through
	Open                  // no call goes through
	numStates
)

// String returns "closed", "half-open" or "open", the label values for
// metrics and logs.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "unknown"
}

// Outcome is what one admitted origin call tells the breaker.
type Outcome uint8

// The outcomes. The zero value is Ignored so that an outcome variable left
// unset can neither trip nor heal the breaker.
const (
	// Ignored: not the origin's fault and no proof of its health (client
	// cancellation, budget or admission rejection, a 429 by default).
	Ignored Outcome = iota
	// Success: the origin answered (any status below 500 except 429).
	Success
	// Failure: 5xx, timeout, connection error, or any error we cannot name.
	Failure
	numOutcomes
)

// String returns "ignored", "success" or "failure".
func (o Outcome) String() string {
	switch o {
	case Ignored:
		return "ignored"
	case Success:
		return "success"
	case Failure:
		return "failure"
	}
	return "unknown"
}

// Errors returned by [Breaker.Allow]; both mean "make no origin call".
var (
	// ErrOpen: the breaker is open; RetryAfter says for how long.
	ErrOpen = errors.New("breaker: open")
	// ErrTooManyProbes: the breaker is half-open and all probe slots are
	// taken by calls still in flight.
	ErrTooManyProbes = errors.New("breaker: half-open, too many probes")
)

// errFailure and errIgnored carry an Outcome into gobreaker's func(error):
// gobreaker counts nil as success, errIgnored as excluded, anything else as
// failure.
var (
	errFailure = errors.New("breaker: origin failure")
	errIgnored = errors.New("breaker: ignored outcome")
)

// err maps o to what gobreaker's done callback expects. Unknown values are
// ignored rather than trusted.
func (o Outcome) err() error {
	switch o {
	case Success:
		return nil
	case Failure:
		return errFailure
	}
	return errIgnored
}
