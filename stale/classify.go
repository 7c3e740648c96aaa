package stale

import "time"

// State is what a stored response may be used for at serve time.
type State uint8

const (
	// Expired: unusable; fetch from the origin (conditionally if the entry
	// has a validator). The zero State, so a forgotten case is a miss.
	Expired State = iota
	// Fresh: serve it.
	Fresh
	// StaleRevalidate: inside stale-while-revalidate; serve it and refresh
	// it once in the background.
	StaleRevalidate
	// StaleIfErrorOnly: fetch from the origin; serve the stored copy only
	// if the fetch fails (error, 5xx, timeout, breaker open, budget spent).
	StaleIfErrorOnly
)

// String returns the state's name, for logs and tests.
func (s State) String() string {
	switch s {
	case Expired:
		return "expired"
	case Fresh:
		return "fresh"
	case StaleRevalidate:
		return "stale-while-revalidate"
	case StaleIfErrorOnly:
		return "stale-if-error"
	}
	return "invalid"
}

// Classify decides what a stored response of the given current age and
// freshness lifetime may be used for, given its stale windows (from Windows)
// and the request's Cache-Control req (nil: none). It allocates nothing.
//
//   - Fresh when lifetime > age (RFC 9111 §4.2) and the request accepts it:
//     not no-cache, not max-age=0, age ≤ max-age, and at least min-fresh
//     of freshness left (RFC 9111 §5.2.1).
//   - A fresh copy the request refused is StaleIfErrorOnly: revalidate, but
//     an outage is answered with the copy.
//   - Stale by less than swr, and the request allows it (no no-cache,
//     max-age=0, age beyond max-age or min-fresh): StaleRevalidate.
//   - Stale by less than sie: StaleIfErrorOnly.
//   - Otherwise Expired.
//
// Request max-stale is ignored (see the package doc); only-if-cached is the
// caller's (504 instead of a fetch).
func Classify(age, lifetime, swr, sie time.Duration, req *Directives) State {
	req = orNone(req)
	revalidate := req.NoCache || req.MaxAge == 0
	tooOld := req.MaxAge > 0 && age > seconds(req.MaxAge)
	if lifetime > age {
		if revalidate || tooOld || (req.MinFresh >= 0 && lifetime-age < seconds(req.MinFresh)) {
			return StaleIfErrorOnly
		}
		return Fresh
	}
	staleness := age - lifetime
	if staleness < swr && !revalidate && !tooOld && req.MinFresh < 0 {
		return StaleRevalidate
	}
	if staleness < sie {
		return StaleIfErrorOnly
	}
	return Expired
}

// TTL returns the remaining freshness in whole seconds, rounded down, for the
// ttl parameter of Cache-Status (RFC 9211 §2.5): negative once stale.
func TTL(age, lifetime time.Duration) int64 {
	d := lifetime - age
	s := d / time.Second
	if d%time.Second < 0 {
		s--
	}
	return int64(s)
}
