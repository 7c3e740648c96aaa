package stale

import "time"

// Facts is what the storage and freshness rules need to know about one
// origin exchange, extracted by the caller from the request and response
// headers. The byte slices are only read during the call.
type Facts struct {
	// Method is the request method, case-sensitive (RFC 9110 §9.1).
	Method []byte
	// Authorization: the request carried an Authorization field.
	Authorization bool
	// RequestNoStore: the request's Cache-Control has no-store.
	RequestNoStore bool

	// Status is the response status code.
	Status int
	// CC is the response's parsed Cache-Control; nil when it has none.
	CC *Directives
	// SetCookie: the response carries Set-Cookie.
	SetCookie bool
	// VaryStar: the response's Vary lists "*".
	VaryStar bool
	// Date, Expires and LastModified are the raw field values; nil or empty
	// when absent.
	Date, Expires, LastModified []byte
	// ETag: the response carries an ETag (a validator for revalidation).
	ETag bool
	// ResponseTime is when the response was received; it stands in for a
	// missing or invalid Date (RFC 9110 §6.6.1). Required.
	ResponseTime time.Time
}

// explicitFreshness reports whether the response states its own expiration
// (RFC 9111 §4.2.1): s-maxage, max-age, or an Expires field (even an invalid
// one, which means "already expired", RFC 9111 §5.3).
func (f *Facts) explicitFreshness(cc *Directives) bool {
	return cc.SMaxAge >= 0 || cc.MaxAge >= 0 || len(f.Expires) > 0
}

// heuristicAllowed reports whether a lifetime may be assigned without
// explicit freshness: heuristically cacheable status (RFC 9110 §15.1) or
// public (RFC 9111 §5.2.2.9).
func heuristicAllowed(status int, cc *Directives) bool {
	return heuristicStatus(status) || cc.Public
}

// heuristicStatus reports whether status is heuristically cacheable (RFC 9110
// §15.1), minus 206, which this cache never stores (it fetches whole objects
// and answers ranges itself). These
// are also the statuses this cache "understands" for must-understand.
func heuristicStatus(status int) bool {
	switch status {
	case 200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// date returns the response's Date, or ResponseTime when it has none or an
// invalid one.
func (f *Facts) date() time.Time {
	if t, ok := ParseHTTPDate(f.Date); ok {
		return t
	}
	return f.ResponseTime
}
