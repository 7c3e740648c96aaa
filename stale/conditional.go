package stale

// ETagMatch reports whether an If-None-Match field value matches the stored
// response's ETag under the weak comparison (RFC 9110 §8.8.3.2, §13.1.2), so
// the cache may answer 304. "*" matches any stored response; otherwise the
// value is a list of entity-tags ([W/]"opaque"), and a malformed member never
// matches, nor does a malformed or missing stored ETag. It allocates nothing.
// Call it only for GET and HEAD requests you hold a stored response for.
func ETagMatch(ifNoneMatch, etag []byte) bool {
	inm := trimOWS(ifNoneMatch)
	if len(inm) == 1 && inm[0] == '*' {
		return true
	}
	stored, ok := opaqueTag(etag)
	if !ok {
		return false
	}
	for i := 0; i < len(inm); {
		for i < len(inm) && (inm[i] == ' ' || inm[i] == '\t' || inm[i] == ',') {
			i++
		}
		if i+1 < len(inm) && inm[i] == 'W' && inm[i+1] == '/' {
			i += 2
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
			if (i == len(inm) || inm[i] == ',') && string(tag) == string(stored) {
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
