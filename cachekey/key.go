package cachekey

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Version is the key layout version, the first byte of every key. Bump it when
// the layout or any normalisation changes: keys outlive the process (cache
// files) and must agree between nodes (rendezvous).
const Version byte = 2

// varyTag precedes every Vary dimension appended by AppendVary.
const varyTag byte = 'V'

// Parts are the inputs of one key. All byte slices are only read during
// Append; the caller keeps ownership and may reuse them afterwards.
type Parts struct {
	// Namespace is the namespace version, bumped by a namespace purge so
	// that every older key of the route or tenant becomes unreachable.
	Namespace uint32
	// Route is the route name.
	Route string
	// Scheme is "http" or "https" (lower-cased by Append).
	Scheme []byte
	// Host is the Host as received; Append lower-cases it, drops the
	// scheme's default port and one trailing dot (see AppendHost).
	Host []byte
	// HostPlain says the caller has checked Host with PlainHost (it is
	// its own canonical form), so Append does not read it twice.
	HostPlain bool
	// Path is the raw path as received: percent-encoding kept, no
	// dot-segment removal.
	Path []byte
	// Query is the raw query string without '?'; it may be empty.
	Query []byte
	// Tenant is empty unless the route is tenant-scoped.
	Tenant []byte
	// Headers holds the values for Rules.KeyHeaders, in the same order;
	// nil or empty means absent. Missing trailing entries count as absent
	// and extra entries are ignored.
	Headers [][]byte
}

// Append appends the canonical key for p under the rules r to dst and returns
// the extended slice; dst may be a reused buffer (pass buf[:0]). A nil r means
// no ignored query parameters and no key headers. The byte layout is
// described in the package documentation.
//
// Append is on the hit path: it does not allocate beyond growing dst, for
// queries of up to 64 parameters.
func Append(dst []byte, r *Rules, p *Parts) []byte {
	return r.appendHeaders(AppendURL(dst, r, p), p.Headers)
}

// AppendURL appends the part of the key that names the URL: everything
// Append writes except the key header section (p.Headers is not read).
// Every key of one URL — whatever its key header values — starts with
// these bytes, so their digest identifies the URL for invalidation: a
// purge by URL reaches every key_headers and Vary variant of it.
func AppendURL(dst []byte, r *Rules, p *Parts) []byte {
	dst = append(dst, Version)
	dst = binary.BigEndian.AppendUint32(dst, p.Namespace)
	dst = binary.AppendUvarint(dst, uint64(len(p.Route)))
	dst = append(dst, p.Route...)
	dst = appendSchemeField(dst, p.Scheme)
	if p.HostPlain {
		dst = appendField(dst, p.Host)
	} else {
		dst = appendHostField(dst, p.Scheme, p.Host)
	}
	dst = appendField(dst, p.Path)
	dst = r.appendQuery(dst, p.Query, true)
	return appendField(dst, p.Tenant)
}

// AppendHeaders appends the key header section for values (in
// Rules.KeyHeaders order) to a key prefix produced by AppendURL.
func (r *Rules) AppendHeaders(dst []byte, values [][]byte) []byte {
	return r.appendHeaders(dst, values)
}

// AppendVary appends one Vary dimension, the header name and the request's
// value, to a primary key produced by Append, giving a variant key. Call it
// once per name listed by the stored Vary marker, names in sorted lower-case
// order (the name is lower-cased here too).
//
// A nil value means the request lacks the header; a non-nil value, even an
// empty one, means it is present. The two encode differently (RFC 9111 §4.1:
// an absent header only matches an absent header). Values are normalised as
// by AppendValue. The bytes of name and value are only read.
func AppendVary(dst, name, value []byte) []byte {
	dst = append(dst, varyTag)
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	dst = appendLower(dst, name)
	if value == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	if caseFreeList(name) {
		return appendListField(dst, value)
	}
	return appendValueField(dst, value)
}

// caseFreeList reports the request fields whose values are lists of
// case-insensitive tokens with parameters, so that Vary matching may
// ignore case and all whitespace (RFC 9111 §4.1 allows normalising "in a
// way that is known to have identical semantics"): Accept-Encoding
// (codings and q are case-insensitive, RFC 9110 §12.5.3, §8.4.1) and
// Accept-Language (language ranges are case-insensitive, RFC 4647 §2).
func caseFreeList(name []byte) bool {
	return equalFoldASCII(name, "accept-encoding") || equalFoldASCII(name, "accept-language")
}

// appendListField appends field(v normalised as by AppendValue, then
// lower-cased, with the OWS around ";" and "=" removed): "gzip;q=0.5" and
// "GZIP ; q=0.5" are one preference in the fields caseFreeList names.
func appendListField(dst, v []byte) []byte {
	start := len(dst)
	dst = append(dst, 0) // length placeholder, fixed by prefixLen
	vs := len(dst)
	dst = AppendValue(dst, v)
	w := vs
	for r := vs; r < len(dst); r++ {
		c := dst[r]
		if c == ' ' && ((r > vs && (dst[r-1] == ';' || dst[r-1] == '=')) ||
			(r+1 < len(dst) && (dst[r+1] == ';' || dst[r+1] == '='))) {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst[w] = c
		w++
	}
	return prefixLen(dst[:w], start)
}

// Digest is the 64-bit xxhash (seed 0) of key bytes; it feeds rendezvous
// hashing in routing.
func Digest(key []byte) uint64 {
	return xxhash.Sum64(key)
}

// appendSchemeField appends uvarint(len(scheme)) ‖ lower(scheme), in
// one append for the schemes the proxy passes (already lower case).
func appendSchemeField(dst, scheme []byte) []byte {
	switch string(scheme) {
	case "http":
		return append(dst, "\x04http"...)
	case "https":
		return append(dst, "\x05https"...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(scheme)))
	return appendLower(dst, scheme)
}

// appendField appends uvarint(len(b)) ‖ b.
func appendField(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendLower appends b with ASCII letters lower-cased.
func appendLower(dst, b []byte) []byte {
	n := len(dst)
	dst = append(dst, b...)
	for i, c := range dst[n:] {
		if 'A' <= c && c <= 'Z' {
			dst[n+i] = c + 'a' - 'A'
		}
	}
	return dst
}

// prefixLen turns dst[start:], which is one reserved byte followed by n
// bytes of payload, into uvarint(n) ‖ payload. It lets a field whose length
// is only known after writing it be written in one pass; the payload is
// moved only when n ≥ 128.
func prefixLen(dst []byte, start int) []byte {
	n := len(dst) - start - 1
	if n < 0x80 {
		dst[start] = byte(n)
		return dst
	}
	var tmp [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(tmp[:], uint64(n))
	dst = append(dst, tmp[:k-1]...) // grow by k-1
	copy(dst[start+k:], dst[start+1:start+1+n])
	copy(dst[start:], tmp[:k])
	return dst
}
