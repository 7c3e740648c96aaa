package stale

// Reason says why a response is not stored; it is short, stable and fit for a
// metric label.
type Reason string

// Reasons returned by Storable. The empty Reason goes with ok = true.
const (
	ReasonMethod         Reason = "method"           // not GET or HEAD
	ReasonRequestNoStore Reason = "request-no-store" // request Cache-Control: no-store
	ReasonNoStore        Reason = "no-store"         // response Cache-Control: no-store
	ReasonMustUnderstand Reason = "must-understand"  // must-understand with a status this cache does not understand
	ReasonPrivate        Reason = "private"          // response Cache-Control: private
	ReasonAuthorization  Reason = "authorization"    // request had Authorization, response not marked shareable
	ReasonSetCookie      Reason = "set-cookie"       // Set-Cookie and the route does not allow it
	ReasonVaryStar       Reason = "vary-star"        // Vary: *
	ReasonStatus         Reason = "status"           // status not storable, or not without explicit freshness
	ReasonNoFreshness    Reason = "no-freshness"     // nothing would ever make the stored copy reusable
)

// Storable reports whether a shared cache may store the response (RFC 9111
// §3), and if not, why. The checks run in the order of the Reason constants,
// so the reason is the first rule that failed.
func Storable(f *Facts, p Policy) (bool, Reason) {
	cc := orNone(f.CC)
	if m := f.Method; string(m) != "GET" && string(m) != "HEAD" {
		return false, ReasonMethod
	}
	if f.RequestNoStore {
		return false, ReasonRequestNoStore
	}
	// RFC 9111 §5.2.2.3: with must-understand, a cache that understands the
	// status ignores no-store; one that does not, does not store.
	understood := heuristicStatus(f.Status)
	if cc.MustUnderstand && !understood {
		return false, ReasonMustUnderstand
	}
	if cc.NoStore && !cc.MustUnderstand {
		return false, ReasonNoStore
	}
	if cc.Private { // RFC 9111 §3, §5.2.2.7; private="x" strips x instead
		return false, ReasonPrivate
	}
	// RFC 9111 §3.5: only these directives make an authenticated response
	// shareable.
	if f.Authorization && !cc.Public && cc.SMaxAge < 0 && !cc.MustRevalidate {
		return false, ReasonAuthorization
	}
	if f.SetCookie && !p.AllowSetCookie {
		return false, ReasonSetCookie
	}
	if f.VaryStar { // RFC 9111 §4.1: never matches a later request
		return false, ReasonVaryStar
	}
	// Final statuses only (RFC 9111 §3). Any final status with explicit
	// freshness is storable (a 500 with max-age=60 included); a 206 is not
	// stored (the cache fetches whole objects and answers ranges itself),
	// and a 304 refreshes a stored entry rather than being one.
	if f.Status < 200 || f.Status > 599 || f.Status == 206 || f.Status == 304 {
		return false, ReasonStatus
	}
	explicit := f.explicitFreshness(cc)
	if !explicit && !heuristicAllowed(f.Status, cc) {
		return false, ReasonStatus
	}
	if !explicit && p.DefaultTTL <= 0 && len(f.LastModified) == 0 && !f.ETag {
		return false, ReasonNoFreshness
	}
	return true, ""
}
