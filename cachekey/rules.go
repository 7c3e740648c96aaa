package cachekey

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Errors returned (wrapped, possibly several joined) by NewRules.
var (
	ErrEmptyName     = errors.New("cachekey: empty name")
	ErrInvalidName   = errors.New("cachekey: invalid name")
	ErrDuplicateName = errors.New("cachekey: duplicate name")
)

// Rules are a route's key rules, compiled once at config load (not per
// request). A nil *Rules is valid: no ignored query parameters and no key
// headers. Rules are immutable and safe for concurrent use.
type Rules struct {
	// ignore holds the query parameter names dropped from keys, raw; it is
	// searched linearly, faster than a map for the few names routes list.
	// ignoreSet holds the same names when there are many.
	ignore    []string
	ignoreSet map[string]struct{}
	// headers holds the key header names, lower-case and sorted, so the
	// config order of the names does not change keys.
	headers []string
}

// NewRules compiles a route's key rules. ignoreQuery lists query parameter
// names (compared raw and case-sensitively, see the package documentation)
// dropped from the key; keyHeaders lists request header names
// (case-insensitive) whose values become part of the key. Every problem is
// reported: empty names, names that can never match (a query name holding
// '&' or '=', a header name that is not an RFC 9110 token) and duplicates.
func NewRules(ignoreQuery, keyHeaders []string) (*Rules, error) {
	var errs []error
	r := &Rules{}
	for i, name := range ignoreQuery {
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("cachekey: ignore_query[%d]: %w", i, ErrEmptyName))
			continue
		case strings.ContainsAny(name, "&="):
			errs = append(errs, fmt.Errorf("cachekey: ignore_query[%d] %q: contains '&' or '=': %w", i, name, ErrInvalidName))
			continue
		}
		if slices.Contains(r.ignore, name) {
			errs = append(errs, fmt.Errorf("cachekey: ignore_query[%d] %q: %w", i, name, ErrDuplicateName))
			continue
		}
		r.ignore = append(r.ignore, name)
	}
	if len(r.ignore) > linearIgnore {
		r.ignoreSet = make(map[string]struct{}, len(r.ignore))
		for _, name := range r.ignore {
			r.ignoreSet[name] = struct{}{}
		}
	}
	for i, name := range keyHeaders {
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("cachekey: key_headers[%d]: %w", i, ErrEmptyName))
			continue
		case !isToken(name):
			errs = append(errs, fmt.Errorf("cachekey: key_headers[%d] %q: not a header field name: %w", i, name, ErrInvalidName))
			continue
		}
		lower := strings.ToLower(name)
		if slices.Contains(r.headers, lower) {
			errs = append(errs, fmt.Errorf("cachekey: key_headers[%d] %q: %w", i, name, ErrDuplicateName))
			continue
		}
		r.headers = append(r.headers, lower)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.Sort(r.headers)
	return r, nil
}

// KeyHeaders returns the canonical (lower-case) key header names in the order
// the caller must supply their values in Parts.Headers (sorted). The slice is
// shared: callers must not modify it. It is nil for a nil r.
func (r *Rules) KeyHeaders() []string {
	if r == nil {
		return nil
	}
	return r.headers
}

// linearIgnore is the number of ignored query names up to which they are
// searched linearly: comparing a few short strings (most fail on length) is
// cheaper than hashing the name for a map lookup.
const linearIgnore = 8

// ignored reports whether the query parameter name is dropped from keys.
func (r *Rules) ignored(name []byte) bool {
	if r == nil {
		return false
	}
	if r.ignoreSet != nil {
		_, ok := r.ignoreSet[string(name)] // no allocation: the compiler special-cases m[string(b)]
		return ok
	}
	for _, s := range r.ignore {
		if string(name) == s { // no allocation either
			return true
		}
	}
	return false
}

// isToken reports whether s is an RFC 9110 §5.6.2 token, the syntax of a
// header field name.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return s != ""
}

// IsToken reports whether b is a non-empty RFC 9110 §5.6.2 token. The
// request path checks every request field name with it, and the cache
// every field name of a head it prepares: one table for the grammar,
// in the package both already import.
//
// Eight bytes at a time, without a branch per byte: the table's answers
// for a name's bytes are and-ed eight (or, for 4 to 7 bytes, twice four,
// overlapping) at once. TestIsTokenAgreesWithTable and FuzzIsToken check
// it answers as the byte-by-byte loop over the table.
func IsToken(b []byte) bool {
	n := len(b)
	switch {
	case n == 0:
		return false
	case n < 4:
		for _, c := range b {
			if tokenTab[c] == 0 {
				return false
			}
		}
		return true
	case n < 8:
		return token4(b[:4])&token4(b[n-4:]) != 0
	}
	for i := 0; n-i > 8; i += 8 {
		if token8(b[i:i+8]) == 0 {
			return false
		}
	}
	// The last 1..8 bytes, read as the 8 ending the name (the ones
	// before them in it are checked already).
	return token8(b[n-8:]) != 0
}

// token4 is 1 when the 4 bytes of w are all tchar, else 0.
func token4(w []byte) uint8 {
	_ = w[3]
	return tokenTab[w[0]] & tokenTab[w[1]] & tokenTab[w[2]] & tokenTab[w[3]]
}

// token8 is 1 when the 8 bytes of w are all tchar, else 0.
func token8(w []byte) uint8 {
	_ = w[7]
	return tokenTab[w[0]] & tokenTab[w[1]] & tokenTab[w[2]] & tokenTab[w[3]] &
		tokenTab[w[4]] & tokenTab[w[5]] & tokenTab[w[6]] & tokenTab[w[7]]
}

// tokenTab is tokenChars as 1 and 0, for and-ing.
var tokenTab = func() (t [256]uint8) {
	for c, ok := range tokenChars {
		if ok {
			t[c] = 1
		}
	}
	return t
}()

// tokenChars marks tchar: ALPHA, DIGIT and "!#$%&'*+-.^_`|~".
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
