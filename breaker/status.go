package breaker

import "fmt"

// DefaultFailureStatuses are the answers that count as origin failures
// when the settings name none: a gateway's or an overloaded server's
// (502, 503, 504) — what an unhealthy origin answers on every path. A 500
// is an application's error on one request or one endpoint: one path
// answering 500 to everything while it is half the traffic must not open
// the breaker for the origin's healthy paths. Origins whose 500s do mean
// "down" list 500 in failure_statuses.
var DefaultFailureStatuses = []int{502, 503, 504}

// StatusSet is a set of HTTP status codes (100–599), a bitmap: Has
// costs a shift and a mask, and the set is a value (no allocation, safe
// to copy and share).
type StatusSet [10]uint64

// NewStatusSet returns the set of codes; codes outside 100–599 are left
// out (validate them first, with [ValidateStatuses]).
func NewStatusSet(codes []int) StatusSet {
	var s StatusSet
	for _, c := range codes {
		if c >= 100 && c <= 599 {
			s[c/64] |= 1 << (c % 64)
		}
	}
	return s
}

// Has reports whether code is in s.
func (s *StatusSet) Has(code int) bool {
	return code >= 100 && code <= 599 && s[code/64]&(1<<(code%64)) != 0
}

// ValidateStatuses reports the first code outside 100–599.
func ValidateStatuses(codes []int) error {
	for _, c := range codes {
		if c < 100 || c > 599 {
			return fmt.Errorf("breaker: failure status %d: must be in [100, 599]", c)
		}
	}
	return nil
}
