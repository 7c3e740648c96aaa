package proxy

import (
	"bytes"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/cache"
)

// Range requests (RFC 9110 §14). shield stores whole objects: a Range
// request is keyed, coalesced and fetched like a plain GET (the cache
// fetch drops Range and If-Range), and the range is cut from the stored
// body. Objects above max_object_size pass the Range to the origin.

// maxRanges bounds a multi-range request; more is answered whole (a
// server may ignore Range, RFC 9110 §14.2), which also defuses requests
// built to multiply the body.
const maxRanges = 16

// byteRange is an inclusive span [first, last] of a representation.
type byteRange struct{ first, last int }

// parseRanges resolves a Range value against a body of size bytes into
// dst. ok is false when the field is to be ignored (not a bytes range,
// malformed, too many ranges); an ok result with no ranges means none is
// satisfiable (416). It allocates nothing when dst has room.
func parseRanges(dst []byteRange, v []byte, size int) (_ []byteRange, ok bool) {
	v = bytes.TrimSpace(v)
	if len(v) < 6 || !bytes.EqualFold(v[:6], []byte("bytes=")) {
		return dst, false
	}
	v = v[6:]
	n := 0
	for len(v) > 0 {
		var spec []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			spec, v = v[:i], v[i+1:]
		} else {
			spec, v = v, nil
		}
		spec = bytes.TrimSpace(spec)
		if len(spec) == 0 {
			continue
		}
		if n++; n > maxRanges {
			return dst, false
		}
		dash := bytes.IndexByte(spec, '-')
		if dash < 0 {
			return dst, false
		}
		a, b := spec[:dash], spec[dash+1:]
		var r byteRange
		switch {
		case len(a) == 0: // suffix: the last b bytes
			k, ok := atoiRange(b)
			if !ok {
				return dst, false
			}
			if k == 0 || size == 0 {
				continue // unsatisfiable
			}
			r = byteRange{first: max(size-k, 0), last: size - 1}
		default:
			first, ok := atoiRange(a)
			if !ok {
				return dst, false
			}
			last := size - 1
			if len(b) > 0 {
				l, ok := atoiRange(b)
				if !ok || l < first {
					return dst, false
				}
				last = min(l, size-1)
			}
			if first >= size {
				continue // unsatisfiable
			}
			r = byteRange{first: first, last: last}
		}
		dst = append(dst, r)
	}
	if n == 0 {
		return dst, false
	}
	return dst, true
}

// atoiRange parses 1*DIGIT, saturating far above any object size.
func atoiRange(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < 1<<40 {
			n = n*10 + int(c-'0')
		}
	}
	return n, true
}

// ifRangeMatches reports whether If-Range (absent: true) holds for e:
// an entity tag must equal the stored strong ETag, a date the stored
// Last-Modified exactly (RFC 9110 §13.1.5: strong comparison only).
func ifRangeMatches(h *fasthttp.RequestHeader, e *cache.Entry) bool {
	v := bytes.TrimSpace(h.PeekBytes(hIfRange))
	if len(v) == 0 {
		return true
	}
	if v[0] == '"' || bytes.HasPrefix(v, []byte("W/")) {
		return v[0] == '"' && len(e.ETag) > 0 && e.ETag[0] == '"' && bytes.Equal(v, e.ETag)
	}
	return len(e.LastModified) > 0 && bytes.Equal(v, e.LastModified)
}

var (
	hIfRange       = []byte("If-Range")
	hContentRange  = []byte("Content-Range")
	hAcceptRanges  = []byte("Accept-Ranges")
	bytesUnit      = []byte("bytes")
	multipartType  = "multipart/byteranges; boundary="
	rangeBoundary  = "shield-byteranges-7d1c0a"
	contentRangeSP = []byte("bytes ")
)

// wantsRange reports whether a range answer applies: a GET with Range
// for a stored 200.
func wantsRange(h *fasthttp.RequestHeader, e *cache.Entry) bool {
	return e.Status == fasthttp.StatusOK && h.IsGet() && len(h.PeekCanonical(hRange)) > 0
}

// appendContentRange appends "bytes first-last/size".
func appendContentRange(dst []byte, r byteRange, size int) []byte {
	dst = append(dst, contentRangeSP...)
	dst = strconv.AppendInt(dst, int64(r.first), 10)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, int64(r.last), 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(size), 10)
}

// rangeAnswer turns resp, already holding e's 200 headers, into the
// answer to the request's Range: 206 with one part (body returned as the
// slice of full to send), 206 multipart/byteranges (a new body), or 416.
// whole is true when Range is ignored and the full body goes out. tmp is
// scratch for formatting; ranges is scratch for parsing.
func rangeAnswer(resp *fasthttp.Response, h *fasthttp.RequestHeader, e *cache.Entry, full []byte, tmp []byte, ranges []byteRange) (part, multipart []byte, whole bool, tmpOut []byte, rangesOut []byteRange) {
	size := len(full)
	rs, whole, tmp := rangeHead(resp, h, e, size, tmp, ranges)
	switch {
	case whole:
		return nil, nil, true, tmp, rs
	case len(rs) == 0:
		return full[:0], nil, false, tmp, rs
	case len(rs) == 1:
		return full[rs[0].first : rs[0].last+1], nil, false, tmp, rs
	}
	ct := resp.Header.ContentType()
	var body []byte
	for _, r := range rs {
		body = append(body, "\r\n--"+rangeBoundary+"\r\n"...)
		if len(ct) > 0 {
			body = append(append(append(body, "Content-Type: "...), ct...), "\r\n"...)
		}
		body = append(body, "Content-Range: "...)
		body = appendContentRange(body, r, size)
		body = append(body, "\r\n\r\n"...)
		body = append(body, full[r.first:r.last+1]...)
	}
	body = append(body, "\r\n--"+rangeBoundary+"--\r\n"...)
	resp.SetStatusCode(fasthttp.StatusPartialContent)
	resp.Header.SetContentType(multipartType + rangeBoundary)
	return nil, body, false, tmp, rs
}

// rangeHead is the part of rangeAnswer that needs only the body's size:
// it sets Accept-Ranges, and for no satisfiable range the 416 and its
// Content-Range, for one the 206 and its Content-Range, and returns the
// ranges (whole: Range is ignored). For more than one it sets nothing
// else: the caller builds the multipart answer.
func rangeHead(resp *fasthttp.Response, h *fasthttp.RequestHeader, e *cache.Entry, size int, tmp []byte, ranges []byteRange) (rs []byteRange, whole bool, tmpOut []byte) {
	resp.Header.SetBytesKV(hAcceptRanges, bytesUnit)
	if !ifRangeMatches(h, e) {
		return ranges, true, tmp
	}
	rs, ok := parseRanges(ranges[:0], h.PeekCanonical(hRange), size)
	if !ok {
		return rs, true, tmp
	}
	switch len(rs) {
	case 0:
		resp.SetStatusCode(fasthttp.StatusRequestedRangeNotSatisfiable)
		tmp = strconv.AppendInt(append(append(tmp[:0], contentRangeSP...), "*/"...), int64(size), 10)
		resp.Header.SetBytesKV(hContentRange, tmp)
	case 1:
		resp.SetStatusCode(fasthttp.StatusPartialContent)
		tmp = appendContentRange(tmp[:0], rs[0], size)
		resp.Header.SetBytesKV(hContentRange, tmp)
	}
	return rs, false, tmp
}
