package proxy

import "bytes"

// Header names and values used on the request path, as byte slices so
// that setting them does not convert strings per request. The hit path
// looks its fields up with PeekCanonical, which skips copying and
// normalising the name on every call: fasthttp stores request names in
// canonical form (shield never disables normalising), so these must be
// canonical too (TestCanonicalNames).
var (
	hAge            = []byte("Age")
	hCacheStatus    = []byte("Cache-Status")
	hCacheControl   = []byte("Cache-Control")
	hConnection     = []byte("Connection")
	hContentLength  = []byte("Content-Length")
	hDate           = []byte("Date")
	hETag           = []byte("ETag")
	hExpires        = []byte("Expires")
	hLink           = []byte("Link")
	hIfModSince     = []byte("If-Modified-Since")
	hIfNoneMatch    = []byte("If-None-Match")
	hLastModified   = []byte("Last-Modified")
	hPragma         = []byte("Pragma")
	hRetryAfter     = []byte("Retry-After")
	hSetCookie      = []byte("Set-Cookie")
	hVary           = []byte("Vary")
	hVia            = []byte("Via")
	hXForwardedFor  = []byte("X-Forwarded-For")
	hXForwardedHost = []byte("X-Forwarded-Host")
	hXForwardedProt = []byte("X-Forwarded-Proto")
	hXForwardedPort = []byte("X-Forwarded-Port")

	viaValue = []byte("1.1 shield")
)

// hopByHop are the connection-specific fields a proxy must not forward
// (RFC 9110 §7.6.1), in addition to any named in the Connection field.
// Proxy-Connection and Keep-Alive are obsolete but still seen.
var hopByHop = [][]byte{
	[]byte("Connection"),
	[]byte("Keep-Alive"),
	[]byte("Proxy-Connection"),
	[]byte("Proxy-Authenticate"),
	[]byte("Proxy-Authorization"),
	[]byte("TE"),
	[]byte("Trailer"),
	[]byte("Transfer-Encoding"),
	[]byte("Upgrade"),
}

// isHopByHop reports whether name must be dropped when forwarding, given
// the message's Connection field value.
func isHopByHop(name, connection []byte) bool {
	for _, h := range hopByHop {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return len(connection) > 0 && listContains(connection, name)
}

// listContains reports whether the comma-separated token list contains
// tok (case-insensitive, OWS trimmed).
func listContains(list, tok []byte) bool {
	for len(list) > 0 {
		var item []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			item, list = list[:i], list[i+1:]
		} else {
			item, list = list, nil
		}
		if bytes.EqualFold(bytes.TrimSpace(item), tok) {
			return true
		}
	}
	return false
}

// isForwardedHeader reports Forwarded and every X-Forwarded-* field:
// none a client sent is copied to an upstream request; setForwarded
// writes the ones shield vouches for.
func isForwardedHeader(name []byte) bool {
	const prefix = "X-Forwarded-"
	return (len(name) > len(prefix) && bytes.EqualFold(name[:len(prefix)], []byte(prefix))) ||
		bytes.EqualFold(name, []byte("Forwarded"))
}

// isEdgeForwarded reports the forwarding fields an edge node sets for
// the key's owner (setForwarded), which the owner forwards as they are.
func isEdgeForwarded(name []byte) bool {
	return bytes.EqualFold(name, hXForwardedFor) || bytes.EqualFold(name, hXForwardedProt) ||
		bytes.EqualFold(name, hXForwardedHost) || bytes.EqualFold(name, hXForwardedPort)
}

// notStored are response fields never written into a cache entry: they
// describe one transfer (Age, Content-Length are recomputed when
// serving), or are replaced by ours (Cache-Status, Via is stored already
// combined with our own entry).
func notStored(name []byte) bool {
	return bytes.EqualFold(name, hAge) ||
		bytes.EqualFold(name, hContentLength) ||
		bytes.EqualFold(name, hCacheStatus) ||
		bytes.EqualFold(name, hVia)
}

// notModifiedHeader reports the fields a 304 carries (RFC 9110 §15.4.5).
func notModifiedHeader(name []byte) bool {
	for _, h := range [...][]byte{hCacheControl, hDate, hETag, hExpires, hVary, hLastModified, []byte("Content-Location")} {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return false
}
