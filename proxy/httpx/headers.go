package httpx

import "bytes"

// Header names and values used on the request path (H + the field name),
// as byte slices so that setting them does not convert strings per
// request. The hit path looks its fields up with PeekCanonical, which
// skips copying and normalising the name on every call: fasthttp stores
// request names in canonical form (shield never disables normalising),
// so these must be canonical too (proxy's TestCanonicalNames).
var (
	HAge            = []byte("Age")
	HCacheStatus    = []byte("Cache-Status")
	HCacheControl   = []byte("Cache-Control")
	HConnection     = []byte("Connection")
	HContentLength  = []byte("Content-Length")
	HDate           = []byte("Date")
	HETag           = []byte("ETag")
	HExpires        = []byte("Expires")
	HLink           = []byte("Link")
	HIfMatch        = []byte("If-Match")
	HIfModSince     = []byte("If-Modified-Since")
	HIfNoneMatch    = []byte("If-None-Match")
	HIfUnmodSince   = []byte("If-Unmodified-Since")
	HLastModified   = []byte("Last-Modified")
	HPragma         = []byte("Pragma")
	HRetryAfter     = []byte("Retry-After")
	HSetCookie      = []byte("Set-Cookie")
	HVary           = []byte("Vary")
	HVia            = []byte("Via")
	HXForwardedFor  = []byte("X-Forwarded-For")
	HXForwardedHost = []byte("X-Forwarded-Host")
	HXForwardedProt = []byte("X-Forwarded-Proto")
	HXForwardedPort = []byte("X-Forwarded-Port")

	ViaValue = []byte("1.1 shield")
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

// IsHopByHop reports whether name must be dropped when forwarding, given
// the message's Connection field value.
func IsHopByHop(name, connection []byte) bool {
	for _, h := range hopByHop {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return len(connection) > 0 && ListContains(connection, name)
}

// ListContains reports whether the comma-separated token list contains
// tok (case-insensitive, OWS trimmed).
func ListContains(list, tok []byte) bool {
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

// IsForwardedHeader reports Forwarded and every X-Forwarded-* field:
// none a client sent is copied to an upstream request; proxy's
// setForwarded writes the ones shield vouches for.
func IsForwardedHeader(name []byte) bool {
	const prefix = "X-Forwarded-"
	return (len(name) > len(prefix) && bytes.EqualFold(name[:len(prefix)], []byte(prefix))) ||
		bytes.EqualFold(name, []byte("Forwarded"))
}

// IsEdgeForwarded reports the forwarding fields an edge node sets for
// the key's owner (proxy's setForwarded), which the owner forwards as
// they are.
func IsEdgeForwarded(name []byte) bool {
	return bytes.EqualFold(name, HXForwardedFor) || bytes.EqualFold(name, HXForwardedProt) ||
		bytes.EqualFold(name, HXForwardedHost) || bytes.EqualFold(name, HXForwardedPort)
}

// NotStored reports the response fields never written into a cache
// entry: they describe one transfer (Age, Content-Length are recomputed when
// serving), or are replaced by ours (Cache-Status, Via is stored already
// combined with our own entry).
func NotStored(name []byte) bool {
	return bytes.EqualFold(name, HAge) ||
		bytes.EqualFold(name, HContentLength) ||
		bytes.EqualFold(name, HCacheStatus) ||
		bytes.EqualFold(name, HVia)
}

// NotModifiedHeader reports the fields a 304 carries (RFC 9110 §15.4.5).
func NotModifiedHeader(name []byte) bool {
	for _, h := range [...][]byte{HCacheControl, HDate, HETag, HExpires, HVary, HLastModified, []byte("Content-Location")} {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return false
}
