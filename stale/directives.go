package stale

import "bytes"

// MaxDeltaSeconds is the value an overflowing delta-seconds argument clamps
// to (RFC 9111 §1.2.2): 2^31−1, about 68 years, which the RFC treats as
// infinity and which fits any signed 32-bit field.
const MaxDeltaSeconds = 1<<31 - 1

// Directives holds the Cache-Control directives of one request or response.
// The zero value is NOT "no directives" (MaxAge 0 means max-age=0): call
// Reset before the first Parse and between messages.
type Directives struct {
	// Delta-seconds arguments, −1 when absent. An invalid max-age or
	// s-maxage is 0 (stale); an invalid argument of the others is −1.
	MaxAge, SMaxAge, StaleWhileRevalidate, StaleIfError, MaxStale, MinFresh int64

	NoStore, NoCache, Private, Public, MustRevalidate, ProxyRevalidate bool
	MustUnderstand, NoTransform, OnlyIfCached, Immutable               bool
	// MaxStaleAny is max-stale without an argument (RFC 9111 §5.2.1.2).
	MaxStaleAny bool

	// NoCacheQualified and PrivateQualified mark the qualified forms
	// no-cache="a, b" and private="a, b" (RFC 9111 §5.2.2.4, §5.2.2.7).
	// They do not set NoCache or Private: the response is storable without
	// the named fields, which QualifiedFields reads from the raw value. An
	// empty or malformed list reads as the bare directive.
	NoCacheQualified, PrivateQualified bool

	// seen has bit 1<<id set for every directive already parsed, so a later
	// duplicate is ignored even when the first one was invalid.
	seen uint32
}

// directiveID numbers the directives Parse understands; 0 is unknown.
type directiveID uint8

const (
	dirUnknown directiveID = iota
	dirMaxAge
	dirSMaxAge
	dirStaleWhileRevalidate
	dirStaleIfError
	dirMaxStale
	dirMinFresh
	dirNoStore
	dirNoCache
	dirPrivate
	dirPublic
	dirMustRevalidate
	dirProxyRevalidate
	dirMustUnderstand
	dirNoTransform
	dirOnlyIfCached
	dirImmutable
)

// noDirectives is what a message without Cache-Control parses to. Read only.
var noDirectives = Directives{MaxAge: -1, SMaxAge: -1, StaleWhileRevalidate: -1, StaleIfError: -1, MaxStale: -1, MinFresh: -1}

// orNone returns d, or the empty directives when d is nil.
func orNone(d *Directives) *Directives {
	if d == nil {
		return &noDirectives
	}
	return d
}

// Reset sets every delta to −1 and every flag to false.
func (d *Directives) Reset() { *d = noDirectives }

// Parse adds the directives of one Cache-Control field value (a comma list);
// call it once per field line. Names are case-insensitive, arguments may be
// tokens or quoted-strings, unknown directives and garbage are ignored, and
// it never panics. v is not retained.
func (d *Directives) Parse(v []byte) {
	for i := 0; i < len(v); i++ {
		start := i
		inQuote := false
	scan:
		for ; i < len(v); i++ {
			switch c := v[i]; {
			case inQuote && c == '\\':
				i++ // the escaped byte, whatever it is, cannot end the quote
			case c == '"':
				inQuote = !inQuote
			case !inQuote && c == ',':
				break scan
			}
		}
		d.parseElement(v[start:min(i, len(v))])
	}
}

// parseElement applies one list element, "name" or "name=value".
func (d *Directives) parseElement(e []byte) {
	name, val, hasVal := e, []byte(nil), false
	for i, c := range e {
		if c == '=' {
			name, val, hasVal = e[:i], trimOWS(e[i+1:]), true
			break
		}
	}
	id := lookupDirective(trimOWS(name))
	if id == dirUnknown || d.seen&(1<<id) != 0 {
		return
	}
	d.seen |= 1 << id
	switch id {
	case dirMaxAge:
		d.MaxAge = parseDelta(val, hasVal, 0)
	case dirSMaxAge:
		d.SMaxAge = parseDelta(val, hasVal, 0)
	case dirStaleWhileRevalidate:
		d.StaleWhileRevalidate = parseDelta(val, hasVal, -1)
	case dirStaleIfError:
		d.StaleIfError = parseDelta(val, hasVal, -1)
	case dirMinFresh:
		d.MinFresh = parseDelta(val, hasVal, -1)
	case dirMaxStale:
		if !hasVal {
			d.MaxStaleAny = true
		} else {
			d.MaxStale = parseDelta(val, true, -1)
		}
	case dirNoStore:
		d.NoStore = true
	case dirNoCache:
		if _, ok := fieldList(val, hasVal); ok {
			d.NoCacheQualified = true
		} else {
			d.NoCache = true
		}
	case dirPrivate:
		if _, ok := fieldList(val, hasVal); ok {
			d.PrivateQualified = true
		} else {
			d.Private = true
		}
	case dirPublic:
		d.Public = true
	case dirMustRevalidate:
		d.MustRevalidate = true
	case dirProxyRevalidate:
		d.ProxyRevalidate = true
	case dirMustUnderstand:
		d.MustUnderstand = true
	case dirNoTransform:
		d.NoTransform = true
	case dirOnlyIfCached:
		d.OnlyIfCached = true
	case dirImmutable:
		d.Immutable = true
	}
}

// lookupDirective maps a name, case-insensitively (ASCII only), to its id.
func lookupDirective(name []byte) directiveID {
	const longest = len("stale-while-revalidate")
	if len(name) < len("public") || len(name) > longest {
		return dirUnknown
	}
	var buf [longest]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(name)]) { // no allocation: the compiler compares in place
	case "max-age":
		return dirMaxAge
	case "s-maxage":
		return dirSMaxAge
	case "stale-while-revalidate":
		return dirStaleWhileRevalidate
	case "stale-if-error":
		return dirStaleIfError
	case "max-stale":
		return dirMaxStale
	case "min-fresh":
		return dirMinFresh
	case "no-store":
		return dirNoStore
	case "no-cache":
		return dirNoCache
	case "private":
		return dirPrivate
	case "public":
		return dirPublic
	case "must-revalidate":
		return dirMustRevalidate
	case "proxy-revalidate":
		return dirProxyRevalidate
	case "must-understand":
		return dirMustUnderstand
	case "no-transform":
		return dirNoTransform
	case "only-if-cached":
		return dirOnlyIfCached
	case "immutable":
		return dirImmutable
	}
	return dirUnknown
}

// parseDelta reads a delta-seconds argument in token or quoted-string form
// (RFC 9111 §1.2.2, §5.2), clamped to MaxDeltaSeconds; it returns invalid
// when there is no argument or it is not 1*DIGIT.
func parseDelta(v []byte, hasVal bool, invalid int64) int64 {
	if !hasVal || len(v) == 0 {
		return invalid
	}
	if v[0] != '"' {
		n, ok := digits(v)
		if !ok {
			return invalid
		}
		return n
	}
	// Quoted: unescape on the fly; the closing quote must be the last byte.
	var n int64
	count := 0
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch c {
		case '"':
			if i != len(v)-1 || count == 0 {
				return invalid
			}
			return n
		case '\\':
			i++
			if i == len(v) {
				return invalid
			}
			c = v[i]
		}
		if c < '0' || c > '9' {
			return invalid
		}
		n = addDigit(n, c)
		count++
	}
	return invalid // unterminated
}

// fieldList returns the field names of a qualified no-cache or private
// argument: a quoted-string without escapes whose content holds at least one
// token byte (RFC 9111 §5.2.2.4 requires the quoted form). Anything else is
// not ok, and the directive reads as its unqualified, stricter form.
func fieldList(v []byte, hasVal bool) ([]byte, bool) {
	if !hasVal || len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	in := v[1 : len(v)-1]
	names := false
	for _, c := range in {
		switch {
		case c == '"' || c == '\\':
			return nil, false
		case c != ',' && c != ' ' && c != '\t':
			names = true
		}
	}
	return in, names
}

// QualifiedFields appends to dst the field-name lists of every qualified
// no-cache and private directive in one Cache-Control value (each list
// followed by a comma), the names a shared cache must not store or reuse
// (RFC 9111 §5.2.2.4, §5.2.2.7). Only the first occurrence of each
// directive counts, as in Parse.
func QualifiedFields(dst, v []byte) []byte {
	var seenNoCache, seenPrivate bool
	for i := 0; i < len(v); i++ {
		start := i
		inQuote := false
	scan:
		for ; i < len(v); i++ {
			switch c := v[i]; {
			case inQuote && c == '\\':
				i++
			case c == '"':
				inQuote = !inQuote
			case !inQuote && c == ',':
				break scan
			}
		}
		e := v[start:min(i, len(v))]
		name, val, hasVal := e, []byte(nil), false
		if j := bytes.IndexByte(e, '='); j >= 0 {
			name, val, hasVal = e[:j], trimOWS(e[j+1:]), true
		}
		seen := &seenNoCache
		switch lookupDirective(trimOWS(name)) {
		case dirNoCache:
		case dirPrivate:
			seen = &seenPrivate
		default:
			continue
		}
		if *seen {
			continue
		}
		*seen = true
		if f, ok := fieldList(val, hasVal); ok {
			dst = append(append(dst, f...), ',')
		}
	}
	return dst
}

// ListHas reports whether the comma-separated field-name list holds name,
// ignoring ASCII case and optional whitespace. It allocates nothing.
func ListHas(list, name []byte) bool {
	for len(list) > 0 {
		i := bytes.IndexByte(list, ',')
		elem := list
		if i >= 0 {
			elem, list = list[:i], list[i+1:]
		} else {
			list = nil
		}
		if bytes.EqualFold(trimOWS(elem), name) {
			return true
		}
	}
	return false
}

// digits parses 1*DIGIT, clamped to MaxDeltaSeconds.
func digits(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = addDigit(n, c)
	}
	return n, true
}

// addDigit returns n*10 + digit c, saturating at MaxDeltaSeconds.
func addDigit(n int64, c byte) int64 {
	n = n*10 + int64(c-'0')
	if n > MaxDeltaSeconds {
		return MaxDeltaSeconds
	}
	return n
}

// trimOWS trims optional whitespace (SP / HTAB, RFC 9110 §5.6.3).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// PragmaNoCache reports whether a Pragma field value holds no-cache. RFC 9111
// §5.4: a request's Pragma: no-cache means Cache-Control: no-cache only when
// the request has no Cache-Control field, so call it (and set NoCache) only
// then.
func PragmaNoCache(v []byte) bool {
	for {
		i := bytes.IndexByte(v, ',')
		elem := v
		if i >= 0 {
			elem = v[:i]
		}
		if equalFoldASCII(trimOWS(elem), "no-cache") {
			return true
		}
		if i < 0 {
			return false
		}
		v = v[i+1:]
	}
}

// equalFoldASCII reports whether b equals the lower-case ASCII string s,
// ignoring ASCII case only.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
