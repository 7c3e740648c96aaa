package routing

import (
	"bytes"
	"errors"
)

// Paths are matched against route prefixes in one spelling, so that a
// prefix means the same whatever the spelling of the request: origins
// percent-decode paths before they route, and "/%61dmin/" must not
// escape a route for "/admin/".
//
// The matching form (AppendMatchForm) decodes every percent-encoded octet
// except two, which stay encoded with upper-case hex digits:
//
//   - %2F, an encoded '/': a character inside a segment, not a separator
//     (RFC 3986 §2.2: "/a%2Fb" and "/a/b" are different resources). npm's
//     "/@scope%2Fname", GitLab's "/projects/group%2Fproject" and object
//     store keys depend on it.
//   - %25, an encoded '%': kept so that the form is decoded exactly once
//     and "%252F" cannot turn into an encoded slash.
//
// The '%' of a malformed escape (not followed by two hex digits) is
// written %25 ("%%410" must not become an escape, %A0, by decoding %41).
// Route prefixes are put in the same form when the table is built.
//
// An encoded slash must not move a request across routes either: an
// origin that decodes %2F reads "/api%2Fv1/x" as "/api/v1/x". So a path
// holding %2F is also matched with every %2F read as '/', and when the two
// readings pick different routes the path is refused (ErrAmbiguousPath)
// rather than routed by either reading.

// ErrAmbiguousPath reports a path whose route depends on whether its
// encoded slashes (%2F) are read as '/'.
var ErrAmbiguousPath = errors.New("routing: an encoded slash (%2F) in the path changes its route")

// AppendMatchForm appends the matching form of the raw path p to dst (see
// above). It stops once limit bytes of the form were written (limit < 0:
// no limit): a prefix comparison needs no more.
func AppendMatchForm(dst, p []byte, limit int) []byte {
	return appendForm(dst, p, limit, false)
}

// appendForm writes the matching form; slashes also decodes %2F.
func appendForm(dst, p []byte, limit int, slashes bool) []byte {
	start := len(dst)
	for i := 0; i < len(p); i++ {
		if limit >= 0 && len(dst)-start >= limit {
			break
		}
		c := p[i]
		if c != '%' {
			dst = append(dst, c)
			continue
		}
		var hi, lo byte
		ok := i+2 < len(p)
		if ok {
			var ok2 bool
			hi, ok = unhex(p[i+1])
			lo, ok2 = unhex(p[i+2])
			ok = ok && ok2
		}
		if !ok {
			// A malformed escape: its '%' stands for itself, written
			// %25 so that it cannot start an escape with what follows.
			dst = append(dst, "%25"...)
			continue
		}
		switch b := hi<<4 | lo; {
		case b == '%', b == '/' && !slashes:
			dst = append(dst, '%', upperHex[hi], upperHex[lo])
		default:
			dst = append(dst, b)
		}
		i += 2
	}
	return dst
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// hasEncodedSlash reports whether the raw path p holds %2F or %2f.
func hasEncodedSlash(p []byte) bool {
	for i := bytes.IndexByte(p, '%'); i >= 0 && i+2 < len(p); {
		if p[i+1] == '2' && p[i+2]|0x20 == 'f' {
			return true
		}
		j := bytes.IndexByte(p[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}
