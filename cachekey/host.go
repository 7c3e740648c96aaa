package cachekey

import (
	"bytes"
	"encoding/binary"
)

// AppendHost appends the canonical form of host, as it appears in keys, to
// dst: ASCII lower-cased, the port dropped when it is scheme's default (80
// for http, 443 for https) or empty, and one trailing dot removed from the
// name. The package documentation gives the exact rules. The proxy can use
// it to forward the same host it keys on.
func AppendHost(dst, scheme, host []byte) []byte {
	name, port := canonicalHost(scheme, host)
	dst = appendLower(dst, name)
	if port != nil {
		dst = append(dst, ':')
		dst = appendLower(dst, port)
	}
	return dst
}

// appendHostField appends field(canonical host) without a second pass:
// lower-casing keeps lengths, so the length is known up front.
func appendHostField(dst, scheme, host []byte) []byte {
	if PlainHost(host) {
		return appendField(dst, host)
	}
	name, port := canonicalHost(scheme, host)
	n := len(name)
	if port != nil {
		n += 1 + len(port)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = appendLower(dst, name)
	if port != nil {
		dst = append(dst, ':')
		dst = appendLower(dst, port)
	}
	return dst
}

// PlainHost reports a host that is its own canonical form (AppendHost
// returns it unchanged, whatever the scheme) by a cheap test: no
// upper-case letter, no trailing dot on the name, and either no ':' or a
// port of digits that is neither 80 nor 443 — the Host of nearly every
// request, and the form the proxy rewrites Host to before it builds keys.
// It may say false for a canonical host ("[::1]:8080"); AppendHost
// decides those.
func PlainHost(host []byte) bool {
	name, port, hasPort := host, []byte(nil), false
	if i := bytes.IndexByte(host, ':'); i >= 0 {
		name, port, hasPort = host[:i], host[i+1:], true
	}
	var special byte
	for _, c := range name {
		special |= hostSpecial[c]
	}
	if special != 0 || len(name) > 0 && name[len(name)-1] == '.' {
		return false
	}
	return !hasPort || plainPort(port)
}

// plainPort reports a port no scheme drops: digits, neither 80 nor 443.
func plainPort(port []byte) bool {
	if len(port) == 0 || string(port) == "80" || string(port) == "443" {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hostSpecial marks ':' and the upper-case letters.
var hostSpecial = func() (t [256]byte) {
	t[':'] = 1
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = 1
	}
	return t
}()

// canonicalHost splits host into the name and the port to keep (nil when the
// port is absent or dropped), with the trailing dot of the name removed. Both
// are sub-slices of host and still need lower-casing.
func canonicalHost(scheme, host []byte) (name, port []byte) {
	name, port = splitHostPort(host)
	if port != nil && (len(port) == 0 || isDefaultPort(scheme, port)) {
		port = nil
	}
	// One trailing dot marks a fully qualified name (RFC 1034 §3.1) and names
	// the same host. A name ending in ".." is invalid; leaving it alone keeps
	// the canonical form a fixed point.
	if n := len(name); n > 0 && name[n-1] == '.' && (n == 1 || name[n-2] != '.') {
		name = name[:n-1]
	}
	return name, port
}

// splitHostPort returns the name and the port (without ':'), port nil when
// host carries none. An IP literal has its port after "]:"; otherwise only a
// host with exactly one ':' has a port, so that a malformed host with several
// colons is kept whole rather than guessed at.
func splitHostPort(host []byte) (name, port []byte) {
	if len(host) > 0 && host[0] == '[' {
		i := bytes.IndexByte(host, ']')
		if i < 0 || i+1 >= len(host) || host[i+1] != ':' {
			return host, nil
		}
		return host[:i+1], host[i+2:]
	}
	i := bytes.IndexByte(host, ':')
	if i < 0 || bytes.IndexByte(host[i+1:], ':') >= 0 {
		return host, nil
	}
	return host[:i], host[i+1:]
}

// isDefaultPort reports whether port is the default port of scheme; the
// scheme is compared case-insensitively, the port as an exact string.
func isDefaultPort(scheme, port []byte) bool {
	switch {
	case equalFoldASCII(scheme, "http"):
		return string(port) == "80"
	case equalFoldASCII(scheme, "https"):
		return string(port) == "443"
	}
	return false
}

// equalFoldASCII reports whether b equals the lower-case ASCII string s,
// ignoring ASCII case in b.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
