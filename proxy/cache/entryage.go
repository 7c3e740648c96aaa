package cache

import (
	"time"

	"github.com/shield-proxy/shield/stale"
)

// Age is the entry's current age at now (RFC 9111 §4.2.3), from the age
// it had when stored and the time it was stored.
func (e *Entry) Age(now time.Time) time.Duration {
	return stale.CurrentAgeUnixNano(time.Duration(e.InitialAge), e.StoredAt, now.UnixNano())
}

// Classify says whether the entry, at age, is fresh, servable stale
// (inside its stale-while-revalidate or stale-if-error window) or
// expired, given the request's directives cc (nil: none).
func (e *Entry) Classify(age time.Duration, cc *stale.Directives) stale.State {
	return stale.Classify(age, time.Duration(e.Lifetime), time.Duration(e.SWR), time.Duration(e.SIE), cc)
}
