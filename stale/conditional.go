package stale

// ETagMatch reports whether an If-None-Match field value matches the stored
// response's ETag under the weak comparison (RFC 9110 §8.8.3.2, §13.1.2), so
// the cache may answer 304. "*" matches any stored response; otherwise the
// value is a list of entity-tags ([W/]"opaque"), and a malformed member never
// matches, nor does a malformed or missing stored ETag. It allocates nothing.
// Call it only for GET and HEAD requests you hold a stored response for.
func ETagMatch(ifNoneMatch, etag []byte) bool {
	return etagListMatch(ifNoneMatch, etag, false)
}

// ETagMatchStrong reports whether an If-Match field value matches the
// stored response's ETag under the strong comparison (RFC 9110 §8.8.3.2,
// §13.1.1): "*" matches any stored response; otherwise a member matches
// only when neither it nor the stored ETag is weak (W/"x" never matches)
// and their opaque-tags are identical. A malformed member never matches,
// nor does a malformed or missing stored ETag, so a false answer is a
// false precondition (412). It allocates nothing.
func ETagMatchStrong(ifMatch, etag []byte) bool {
	return etagListMatch(ifMatch, etag, true)
}

// etagListMatch is ETagMatch (weak comparison) or ETagMatchStrong.
func etagListMatch(list, etag []byte, strong bool) bool {
	inm := trimOWS(list)
	if len(inm) == 1 && inm[0] == '*' {
		return true
	}
	if t := trimOWS(etag); strong && len(t) >= 2 && t[0] == 'W' && t[1] == '/' {
		return false
	}
	stored, ok := opaqueTag(etag)
	if !ok {
		return false
	}
	for i := 0; i < len(inm); {
		for i < len(inm) && (inm[i] == ' ' || inm[i] == '\t' || inm[i] == ',') {
			i++
		}
		weak := false
		if i+1 < len(inm) && inm[i] == 'W' && inm[i+1] == '/' {
			i += 2
			weak = true
		}
		if i < len(inm) && inm[i] == '"' {
			end := i + 1
			for end < len(inm) && inm[end] != '"' {
				end++
			}
			if end == len(inm) {
				return false // unterminated
			}
			tag := inm[i : end+1]
			i = end + 1
			for i < len(inm) && (inm[i] == ' ' || inm[i] == '\t') {
				i++
			}
			if (i == len(inm) || inm[i] == ',') && string(tag) == string(stored) && !(strong && weak) {
				return true
			}
		}
		// Skip the rest of this member (garbage, or the comma itself).
		for i < len(inm) && inm[i] != ',' {
			i++
		}
	}
	return false
}

// opaqueTag returns the quoted opaque-tag of an entity-tag, without its weak
// prefix, or false when etag is not [W/]"..." (RFC 9110 §8.8.3).
func opaqueTag(etag []byte) ([]byte, bool) {
	etag = trimOWS(etag)
	if len(etag) >= 2 && etag[0] == 'W' && etag[1] == '/' {
		etag = etag[2:]
	}
	if len(etag) < 2 || etag[0] != '"' || etag[len(etag)-1] != '"' {
		return nil, false
	}
	for _, c := range etag[1 : len(etag)-1] {
		if c == '"' {
			return nil, false
		}
	}
	return etag, true
}

// NotModifiedSince reports whether the stored representation has not been
// modified since the If-Modified-Since date (RFC 9110 §13.1.3), so the cache
// may answer 304. Pass the stored Last-Modified, or the stored Date when
// there is none (RFC 9111 §4.3.2). An invalid date on either side is false
// (the field is ignored). It allocates nothing.
//
// RFC 9110 §13.1.3 ignores If-Modified-Since when If-None-Match is present;
// NotModified applies that rule, this function does not.
func NotModifiedSince(ifModifiedSince, lastModified []byte) bool {
	since, ok := ParseHTTPDate(ifModifiedSince)
	if !ok {
		return false
	}
	lm, ok := ParseHTTPDate(lastModified)
	return ok && !lm.After(since)
}

// ModifiedSince reports whether the stored Last-Modified is later than an
// If-Unmodified-Since date (RFC 9110 §13.1.4): the precondition is false
// (412). An invalid date on either side — a list of dates too — or no
// Last-Modified is false: the field is ignored. It allocates nothing.
//
// RFC 9110 §13.1.4 ignores If-Unmodified-Since when If-Match is present;
// the caller applies that rule.
func ModifiedSince(ifUnmodifiedSince, lastModified []byte) bool {
	since, ok := ParseHTTPDate(ifUnmodifiedSince)
	if !ok {
		return false
	}
	lm, ok := ParseHTTPDate(lastModified)
	return ok && lm.After(since)
}

// NotModified evaluates a GET or HEAD request's If-None-Match and
// If-Modified-Since fields (nil or empty when absent) against a stored
// response's ETag and Last-Modified (or Date), with RFC 9110 §13.1.2-3
// precedence: If-None-Match, when present, decides alone.
func NotModified(ifNoneMatch, ifModifiedSince, etag, lastModified []byte) bool {
	if len(trimOWS(ifNoneMatch)) > 0 {
		return ETagMatch(ifNoneMatch, etag)
	}
	if len(ifModifiedSince) > 0 {
		return NotModifiedSince(ifModifiedSince, lastModified)
	}
	return false
}
