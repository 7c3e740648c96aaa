package proxy

import (
	"bytes"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
)

// Requests are made to mean one thing before anything is derived from
// them: the route, the cache key, the tenant and the Vary values are read
// from exactly the request the origin will receive, so no part of a
// request can make shield store an answer under a key that does not
// describe it.
//
//   - Field names must be tokens (RFC 9110 §5.1): "Content Length: 5"
//     is 400, not a header one side ignores and the other reads.
//   - Fields nominated by Connection are removed from the request up
//     front (they are hop-by-hop and never reach the origin), so they
//     cannot feed a key header, a tenant header or a Vary value.
//   - Host is rewritten to its canonical form (lower case, no trailing
//     dot, no default port), the form the key uses, before routing.
//   - Paths with dot segments (plain or encoded, "/public/%2e%2e/me") or
//     backslashes (plain or encoded) are 400: an origin that resolves
//     them would serve another path than the one routed and keyed
//     ("/public/../private/me"). Encoded slashes are ordinary: they are
//     routed, keyed and forwarded as encoded slashes (cleanPath, routing's
//     path.go).
//   - The target's percent-encoding is put in its normal form (RFC 3986
//     §6.2.2.1-2): escapes of unreserved characters (ALPHA, DIGIT, "-",
//     ".", "_", "~") are decoded, every other escape keeps its octet
//     encoded with upper-case hex digits ("%2f" is "%2F"; %2F, %25 and all
//     reserved characters stay encoded), and a '%' that starts no escape
//     is written %25, as routing reads it. "/%61pi/%78" is "/api/x": one
//     resource, one cache entry, one purge (purge.go normalises the URL it
//     is given the same way), and the origin is sent the normal form, so
//     what is stored is exactly the origin's answer for the target keyed
//     (an origin telling "%2f" from "%2F" apart cannot give one spelling's
//     answer to the other). Path and query alike: the key holds the query
//     as sent (cachekey), so "?%61=1" is "?a=1".

// sanitize applies the rules above; msg is non-empty when the request
// must be refused. It does not allocate for ordinary requests.
func sanitize(ctx *fasthttp.RequestCtx) (msg string) {
	msg, _ = sanitizeHost(ctx, false)
	return msg
}

// reqFields marks request fields a hit reads, as sanitize's pass over
// the names saw them. A clear bit means the field is absent, so its
// PeekCanonical — a scan of every field — is skipped; a set bit decides
// nothing (the field may since have been removed).
type reqFields uint8

const (
	fieldCacheControl reqFields = 1 << iota
	fieldPragma
	fieldIfNoneMatch
	fieldIfModSince
	fieldRange
	fieldIfMatch
	fieldIfUnmodSince
	// hostPlain is no field: Host is its own canonical form (plainValidHost
	// or cachekey.PlainHost said so), so the key takes it as it is.
	hostPlain

	fieldsConditional = fieldIfNoneMatch | fieldIfModSince | fieldIfMatch | fieldIfUnmodSince
)

// sanitizeHost is sanitize for a request whose Host the caller has
// already read: plainHost true says it is its own canonical form
// (plainValidHost), so it is not read again. It also says which of the
// fields reqFields tracks the request has (names compared as stored,
// as PeekCanonical compares them).
func sanitizeHost(ctx *fasthttp.RequestCtx, plainHost bool) (msg string, present reqFields) {
	h := &ctx.Request.Header
	// One pass checks every name and finds the first Connection field,
	// the value PeekBytes(httpx.HConnection) would return for a non-empty one
	// (an empty or absent first field, or the synthetic "close" All
	// yields last, nominates nothing either way).
	var conn []byte
	seenConn := false
	for k, v := range h.All() {
		if !cachekey.IsToken(k) {
			return "invalid header field name", 0
		}
		switch len(k) {
		case len("Connection"):
			if !seenConn && string(k) == "Connection" {
				conn, seenConn = v, true
			}
		case len("Range"):
			if string(k) == "Range" {
				present |= fieldRange
			}
		case len("Pragma"):
			if string(k) == "Pragma" {
				present |= fieldPragma
			}
		case len("Cache-Control"): // and If-None-Match
			switch string(k) {
			case "Cache-Control":
				present |= fieldCacheControl
			case "If-None-Match":
				present |= fieldIfNoneMatch
			}
		case len("If-Modified-Since"):
			if string(k) == "If-Modified-Since" {
				present |= fieldIfModSince
			}
		case len("If-Match"):
			if string(k) == "If-Match" {
				present |= fieldIfMatch
			}
		case len("If-Unmodified-Since"):
			if string(k) == "If-Unmodified-Since" {
				present |= fieldIfUnmodSince
			}
		}
	}
	if len(conn) > 0 && nominatesFields(conn) {
		var names [][]byte
		for item := range bytes.SplitSeq(conn, []byte(",")) {
			item = bytes.TrimSpace(item)
			if len(item) > 0 && !isConnectionOption(item) {
				names = append(names, bytes.Clone(item))
			}
		}
		for _, n := range names {
			h.DelBytes(n)
		}
	}
	if plainHost || cachekey.PlainHost(h.Host()) {
		present |= hostPlain
	} else {
		canonicalizeHost(ctx, h.Host())
	}
	if !cleanPath(ctx.Request.URI().PathOriginal()) {
		return "path with dot segments or backslashes", 0
	}
	// A target without '%' costs one IndexByte.
	if t := h.RequestURI(); bytes.IndexByte(t, '%') >= 0 {
		normalizeTarget(&ctx.Request, t)
	}
	return "", present
}

// normalizeTarget rewrites req's target t to its normal percent-encoding
// (see above) when it is not in it already; one in normal form is read
// once more and not written.
func normalizeTarget(req *fasthttp.Request, t []byte) {
	i := bytes.IndexByte(t, '%')
	if normalEscapes(t[i:]) {
		return
	}
	var buf [256]byte
	req.SetRequestURIBytes(appendNormalEscapes(append(buf[:0], t[:i]...), t[i:]))
}

// normalTarget is normalizeTarget for a target (or a path, or a query)
// held in a string.
func normalTarget(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 || normalEscapes([]byte(s[i:])) {
		return s
	}
	return string(appendNormalEscapes([]byte(s[:i]), []byte(s[i:])))
}

// normalEscapes reports whether every '%' of b starts an escape with
// upper-case hex digits of an octet that is not unreserved: b is its own
// normal form.
func normalEscapes(b []byte) bool {
	for i := bytes.IndexByte(b, '%'); i >= 0; i = bytes.IndexByte(b, '%') {
		if i+2 >= len(b) || !upperHexDigit(b[i+1]) || !upperHexDigit(b[i+2]) ||
			unreserved[unhexUpper(b[i+1])<<4|unhexUpper(b[i+2])] {
			return false
		}
		b = b[i+3:]
	}
	return true
}

// appendNormalEscapes appends the normal form of b to dst: unreserved
// characters decoded, other escapes with upper-case hex digits, a '%'
// that starts no escape written %25 (so that the form is idempotent:
// "%%361" is "%2561", not "%61").
func appendNormalEscapes(dst, b []byte) []byte {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '%' {
			dst = append(dst, c)
			continue
		}
		hi, ok1 := hexVal(b, i+1)
		lo, ok2 := hexVal(b, i+2)
		switch d := hi<<4 | lo; {
		case !ok1 || !ok2:
			dst = append(dst, "%25"...)
			continue
		case unreserved[d]:
			dst = append(dst, d)
		default:
			dst = append(dst, '%', hexUpper[hi], hexUpper[lo])
		}
		i += 2
	}
	return dst
}

const hexUpper = "0123456789ABCDEF"

// hexVal is the value of the hex digit b[i]; ok is false past the end
// or for a byte that is not one.
func hexVal(b []byte, i int) (v byte, ok bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func upperHexDigit(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

// unhexUpper is the value of an upper-case hex digit.
func unhexUpper(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// unreserved marks RFC 3986's unreserved characters.
var unreserved = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~" {
		t[c] = true
	}
	return t
}()

// canonicalizeHost rewrites Host to its canonical form when that
// differs and is not empty.
func canonicalizeHost(ctx *fasthttp.RequestCtx, host []byte) {
	var buf [256]byte
	scheme := schemeHTTP
	if ctx.IsTLS() {
		scheme = schemeHTTPS
	}
	if canon := cachekey.AppendHost(buf[:0], scheme, host); !bytes.Equal(canon, host) && len(canon) > 0 {
		ctx.Request.Header.SetHostBytes(canon)
	}
}

// nominatesFields reports whether a Connection value names anything but
// the connection options close and keep-alive.
func nominatesFields(conn []byte) bool {
	for len(conn) > 0 {
		var item []byte
		if i := bytes.IndexByte(conn, ','); i >= 0 {
			item, conn = conn[:i], conn[i+1:]
		} else {
			item, conn = conn, nil
		}
		item = bytes.TrimSpace(item)
		if len(item) > 0 && !isConnectionOption(item) {
			return true
		}
	}
	return false
}

func isConnectionOption(tok []byte) bool {
	return bytes.EqualFold(tok, []byte("close")) || bytes.EqualFold(tok, []byte("keep-alive"))
}

// cleanPath reports whether p has no "." or ".." segment and no
// backslash. Dots count plain or encoded (%2E), and segments end at '/'
// and at an encoded slash (%2F): an origin that decodes %2F reads
// "/a%2F..%2Fb" as "/a/../b". Backslashes count plain or encoded (%5C),
// which some origins read as '/'. Encoded slashes themselves are
// ordinary path characters (routing's path.go says how they route).
func cleanPath(p []byte) bool {
	if plainPath(p) {
		return true
	}
	return cleanPathFull(p)
}

// plainPath is cleanPath's fast path: a path with no '%' and no '\' in
// which no segment starts with '.' is clean (a dot segment starts with
// '.', and without '%' segments begin only at the start and after '/').
// A false answer decides nothing: cleanPathFull reads the path then.
// FuzzCleanPathFast checks it never accepts what cleanPathFull refuses.
func plainPath(p []byte) bool {
	prev := byte('/')
	for _, c := range p {
		if c == '%' || c == '\\' || (c == '.' && prev == '/') {
			return false
		}
		prev = c
	}
	return true
}

// cleanPathFull is cleanPath for every path.
func cleanPathFull(p []byte) bool {
	if bytes.IndexByte(p, '\\') >= 0 {
		return false
	}
	dots := 0 // the current segment's length if it is all dots, else -1
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) {
			switch c1, c2 := p[i+1], p[i+2]|0x20; {
			case c1 == '5' && c2 == 'c':
				return false
			case c1 == '2' && c2 == 'f':
				c, i = '/', i+2
			case c1 == '2' && c2 == 'e':
				c, i = '.', i+2
			}
		}
		switch {
		case c == '/':
			if dots == 1 || dots == 2 {
				return false
			}
			dots = 0
		case c == '.' && dots >= 0:
			dots++
		default:
			dots = -1
		}
	}
	return dots != 1 && dots != 2
}
