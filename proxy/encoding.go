package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Accept-Encoding canonicalisation. Clients spell one preference many
// ways ("gzip, deflate, br", "br, gzip", "gzip;q=1.0, br"), and with an
// origin's Vary: Accept-Encoding each spelling would be its own variant
// and its own origin fetch. Like mature shared caches, shield reduces the
// field to the single coding it would pick — the first of the route's
// codings (default br, gzip) the client accepts (RFC 9110 §12.5.3), else
// identity — before keying and forwarding, so a URL has at most one
// variant per coding.
//
// A plain route (codings, no compression, Accept-Encoding not a key
// header) reduces the field only when something reads it
// (settleEncoding): a Vary marker's variant key, a fetch, a forward to
// the key's owner, anything but a fresh hit of a primary entry, which
// never looks at it — a hit then skips the rewrite.

var (
	hAcceptEncoding = []byte("Accept-Encoding")
	codingIdentity  = []byte("identity")
)

// startEncoding reduces h's Accept-Encoding for the request sc serves on
// r now when keying or the lookup needs it (a compress route, an
// Accept-Encoding key header), else leaves it to settleEncoding.
func (sc *scratch) startEncoding(r *route, h *fasthttp.RequestHeader) {
	if r.comp != nil || r.aeKeyed {
		sc.coding = r.canonicalEncoding(h)
		return
	}
	if r.codings != nil {
		sc.aeRoute = r
	}
}

// settleEncoding reduces h's Accept-Encoding if startEncoding left it for
// later: every reader of the field but the hit calls it first.
func (sc *scratch) settleEncoding(h *fasthttp.RequestHeader) {
	if r := sc.aeRoute; r != nil {
		sc.aeRoute = nil
		r.canonicalEncoding(h)
	}
}

// canonicalEncoding rewrites h's Accept-Encoding to the route's pick. It
// allocates nothing once the request's header storage has grown to fit.
// On a route that compresses itself (compress.go) the pick is the coding
// shield will answer with, returned (0: identity), and the field becomes
// identity: that is what the origin is asked for, and what keys see.
func (r *route) canonicalEncoding(h *fasthttp.RequestHeader) uint8 {
	if r.comp != nil {
		ae := h.PeekBytes(hAcceptEncoding)
		idx := r.comp.negotiate(ae)
		if !bytes.Equal(ae, codingIdentity) {
			h.SetBytesKV(hAcceptEncoding, codingIdentity)
		}
		return idx
	}
	if r.codings == nil {
		return 0
	}
	ae := h.PeekCanonical(hAcceptEncoding)
	if len(ae) == 0 {
		// None accepted by name: identity, as the loop below would find.
		h.SetCanonical(hAcceptEncoding, codingIdentity)
		return 0
	}
	if pick := r.pickPlain(ae); pick != nil {
		if !bytes.Equal(ae, pick) {
			h.SetCanonical(hAcceptEncoding, pick)
		}
		return 0
	}
	for _, c := range r.codings {
		if accepts(ae, c) {
			if !bytes.Equal(ae, c) {
				h.SetCanonical(hAcceptEncoding, c)
			}
			return 0
		}
	}
	if !bytes.Equal(ae, codingIdentity) {
		h.SetCanonical(hAcceptEncoding, codingIdentity)
	}
	return 0
}

// pickPlain is the pick for a plain list ("gzip, deflate, br": no
// parameters, no "*"), where a coding is accepted exactly when it is
// named: one pass over the list instead of one per route coding. It
// returns nil when ae is not plain or names none of the route's codings;
// the general loop decides then. FuzzPickPlain checks it against accepts.
func (r *route) pickPlain(ae []byte) []byte {
	if len(ae) == 0 || bytes.IndexByte(ae, ';') >= 0 || bytes.IndexByte(ae, '*') >= 0 {
		return nil
	}
	best := len(r.codings)
	for len(ae) > 0 {
		var name []byte
		name, _, ae = nextElement(ae)
		for i, c := range r.codings[:best] {
			if bytes.EqualFold(name, c) {
				best = i
				break
			}
		}
	}
	if best == len(r.codings) {
		return nil
	}
	return r.codings[best]
}

// accepts reports whether the Accept-Encoding value ae accepts coding:
// listed (or matched by "*") with a q-value above 0. An explicit entry
// for the coding overrides "*" (RFC 9110 §12.5.3). Malformed elements
// are ignored.
func accepts(ae, coding []byte) bool {
	star, named := false, false
	starOK, namedOK := false, false
	for len(ae) > 0 {
		var name, params []byte
		name, params, ae = nextElement(ae)
		ok := qPositive(params)
		switch {
		case bytes.EqualFold(name, coding):
			named, namedOK = true, ok
		case len(name) == 1 && name[0] == '*':
			star, starOK = true, ok
		}
	}
	if named {
		return namedOK
	}
	return star && starOK
}

// qPositive reports whether the parameters of one element leave its
// weight above zero (no q parameter means q=1).
func qPositive(params []byte) bool {
	v, ok := qParam(params)
	if !ok {
		return true
	}
	for _, c := range v {
		if c >= '1' && c <= '9' {
			return true
		}
	}
	return false
}

// nextElement splits the first element off a comma-separated list such
// as Accept-Encoding: its name (trimmed), its parameters (after the first
// ';', untrimmed) and the rest of the list.
func nextElement(list []byte) (name, params, rest []byte) {
	elem := list
	if i := bytes.IndexByte(list, ','); i >= 0 {
		elem, rest = list[:i], list[i+1:]
	}
	name, params, _ = bytes.Cut(elem, []byte(";"))
	return bytes.TrimSpace(name), params, rest
}

// qParam finds the first q parameter among an element's parameters and
// returns its value, trimmed; ok is false when there is none.
func qParam(params []byte) (v []byte, ok bool) {
	for len(params) > 0 {
		var p []byte
		if i := bytes.IndexByte(params, ';'); i >= 0 {
			p, params = params[:i], params[i+1:]
		} else {
			p, params = params, nil
		}
		k, v, found := bytes.Cut(bytes.TrimSpace(p), []byte("="))
		if found && bytes.EqualFold(bytes.TrimSpace(k), []byte("q")) {
			return bytes.TrimSpace(v), true
		}
	}
	return nil, false
}
