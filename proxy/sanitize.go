package proxy

import (
	"bytes"

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
//     routed, keyed and forwarded as sent (cleanPath, routing's path.go).

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
	// hostPlain is no field: Host is its own canonical form (plainValidHost
	// or cachekey.PlainHost said so), so the key takes it as it is.
	hostPlain

	fieldsConditional = fieldIfNoneMatch | fieldIfModSince
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
		if !isTokenBytes(k) {
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
	return "", present
}

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

// isTokenBytes reports whether b is a non-empty RFC 9110 token.
func isTokenBytes(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return true
}

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
