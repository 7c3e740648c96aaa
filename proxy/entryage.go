package proxy

import (
	"time"

	"github.com/shield-proxy/shield/stale"
)

// age is the entry's current age at now (RFC 9111 §4.2.3), from the age
// it had when stored and the time it was stored.
func (e *entry) age(now time.Time) time.Duration {
	return stale.CurrentAgeUnixNano(time.Duration(e.initialAge), e.storedAt, now.UnixNano())
}

// classify says whether the entry, at age, is fresh, servable stale
// (inside its stale-while-revalidate or stale-if-error window) or
// expired, given the request's directives cc (nil: none).
func (e *entry) classify(age time.Duration, cc *stale.Directives) stale.State {
	return stale.Classify(age, time.Duration(e.lifetime), time.Duration(e.swr), time.Duration(e.sie), cc)
}
