// Package cachekey builds shield's canonical cache keys and their 64-bit
// digests (docs/architecture.md §4).
//
// A key names one cacheable resource of one route: two requests get the same
// key exactly when shield may answer one with the response stored for the
// other. The package is pure (stdlib and xxhash only, no fasthttp types) and
// its hot function, [Append], does not allocate for queries of up to 64
// parameters. [Rules] are compiled once per route at config load.
//
// # Invariants
//
//   - Injective: every field is length-prefixed, so two different sets of
//     canonical inputs never produce the same bytes; no delimiter in a path,
//     query or header value can shift a field boundary.
//   - Deterministic and versioned: the bytes depend only on the inputs and
//     [Version]. Keys are persisted (fastcache files) and hashed for
//     rendezvous across nodes, so any change to the layout or to a
//     normalisation below must bump [Version].
//   - Normalisation is idempotent: canonicalising an already canonical host,
//     query or header value changes nothing ([AppendHost],
//     [Rules.AppendQuery], [AppendValue]).
//   - The HTTP method is not part of the key: GET and HEAD share it.
//
// # Byte layout, version 1
//
// Notation: field(x) = uvarint(len(x)) ‖ x, where uvarint is the unsigned
// LEB128 varint of encoding/binary (binary.AppendUvarint). All lengths are
// byte counts.
//
//	key     = version namespace
//	          field(route) field(scheme) field(host) field(path)
//	          field(query) field(tenant)
//	          uvarint(H) { field(hname) field(hvalue) }×H
//	variant = key { 0x56 field(vname) presence }…
//	presence = 0x00                  (header absent)
//	         | 0x01 field(vvalue)    (header present, value may be empty)
//
// where:
//
//   - version: one byte, [Version] (1).
//   - namespace: Parts.Namespace as 4 bytes, big-endian.
//   - route: Parts.Route as is.
//   - scheme: Parts.Scheme, ASCII lower-cased.
//   - host: the canonical host of [AppendHost]: ASCII lower-cased; the port
//     dropped when it is the scheme's default ("80" with http, "443" with
//     https, compared as exact strings, so "080" is kept) or empty
//     ("host:" → "host", RFC 3986 §6.2.3); then one trailing dot removed from
//     the name part ("example.com." → "example.com") unless the name ends in
//     "..", which is not a valid DNS name and is kept as is so that the
//     canonical form is a fixed point. The port is the text after the last
//     ':' when the host has exactly one ':', or after "]:" when it starts
//     with '[' (an IP literal); any other host has no port.
//   - path: Parts.Path byte for byte: no percent-decoding, no dot-segment
//     removal, no case change, and "" stays distinct from "/". The proxy
//     must forward the same raw path it keys on (fasthttp's PathOriginal),
//     otherwise two resources of the origin could share one entry.
//   - query: the canonical query of [Rules.AppendQuery]: Parts.Query split on
//     '&' only; empty parameters dropped; parameters whose name (the raw
//     bytes before the first '=', or the whole parameter when it has no '=')
//     equals a configured ignored name byte for byte are dropped, unless the
//     parameter contains ';' (origins that also split on ';' would read the
//     rest as another parameter, which must then be in the key); the rest
//     sorted by name in bytewise order, stably (parameters with equal names
//     keep their order, because a=1&a=2 and a=2&a=1 mean different things to
//     many APIs); joined with '&'. Names and values stay raw, so "a", "a=" and
//     "%61" are three different parameters.
//   - tenant: Parts.Tenant as is; empty when the route is not tenant-scoped.
//   - H: the number of configured key headers of the route (Rules.KeyHeaders);
//     hname is the lower-case header name, in [Rules.KeyHeaders] order
//     (sorted), and hvalue the value normalised as by [AppendValue]. An
//     absent header and an empty value both encode as an empty hvalue.
//   - 0x56 ('V'): the vary tag, written once before each Vary dimension;
//     vname is the lower-cased header name and vvalue the value normalised
//     as by [AppendValue]. A primary key is self-delimiting, so no variant
//     key equals a primary key and no two dimension lists collide.
//
// The digest is xxhash64 (seed 0, github.com/cespare/xxhash/v2) of the whole
// key or variant key. testdata/vectors.json pins examples of both.
//
// # Decisions not stated in docs/architecture.md
//
//   - ';' does not separate query parameters. Go's net/url stopped accepting
//     it in Go 1.17 and most origins split on '&' only; treating "a=1;b=2" as
//     two parameters would merge URLs the origin tells apart ("parameter
//     cloaking" cache poisoning).
//   - Ignored query names are compared raw and case-sensitively (no
//     percent-decoding): "utm%5Fsource" is not "utm_source". The mistake can
//     only split the cache, never merge responses.
//   - "?" with nothing after it, "&&" and no query at all are the same key
//     (zero parameters).
//   - Key header names are part of the key, so renaming a key header in the
//     config can never make old entries answer for the new header. Their
//     order in the config does not matter (they are sorted).
//   - Host normalisation merges "Example.COM.:443" with "example.com" for
//     https. The proxy should forward the canonical host (or only route
//     hosts the origin treats alike), or those spellings could poison each
//     other.
//   - Header value normalisation (leading/trailing OWS trimmed, OWS around
//     commas removed, other runs of SP/HTAB collapsed to one SP) does not
//     understand quoted strings: `"a  b"` and `"a b"` share a key.
//   - Append never panics on bad input and has no size limits; sizes are
//     bounded by the listener's header limits.
package cachekey
