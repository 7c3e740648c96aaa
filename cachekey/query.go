package cachekey

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// smallParams and stackParams are how many query parameters Append sorts in
// arrays on the stack: typical queries fit the small array, which is cheap
// to zero on every call; up to stackParams use a larger one, still without
// allocating; longer queries allocate.
const (
	smallParams = 8
	stackParams = 64
)

// param locates one query parameter in the raw query: q[start:end] is the
// parameter and q[start:nameEnd] its name. prefix holds the first 8 bytes of
// the name, big-endian and zero-padded, so that most comparisons while
// sorting are one integer comparison.
type param struct {
	prefix              uint64
	start, nameEnd, end int
}

// AppendQuery appends the canonical form of the raw query q (without '?'), as
// it appears in keys, to dst: split on '&', empty and ignored parameters
// dropped, the rest stably sorted by raw name and joined with '&'. The
// package documentation gives the exact rules. A nil r drops nothing.
func (r *Rules) AppendQuery(dst, q []byte) []byte {
	return r.appendQuery(dst, q, false)
}

// appendQuery appends the canonical query, as field(query) when field is set.
func (r *Rules) appendQuery(dst, q []byte, field bool) []byte {
	amp := bytes.IndexByte(q, '&')
	if amp < 0 {
		return r.appendOneParam(dst, q, field)
	}
	// The number of '&' bounds the number of parameters (SIMD-counted).
	bound := bytes.Count(q[amp+1:], []byte{'&'}) + 2
	if bound > smallParams {
		return r.appendQueryLong(dst, q, field, bound)
	}
	var stack [smallParams]param
	return r.appendSorted(dst, q, stack[:0], field)
}

// appendOneParam is appendQuery for a query without '&' (none or one
// parameter, the common case): nothing to split or sort, so q is kept
// whole unless it is empty or ignored, as params would decide.
func (r *Rules) appendOneParam(dst, q []byte, field bool) []byte {
	keep := len(q) > 0
	if keep && r != nil && len(r.ignore) > 0 {
		name := q
		if eq := bytes.IndexByte(q, '='); eq >= 0 {
			name = q[:eq]
		}
		keep = !r.ignored(name) || bytes.IndexByte(q, ';') >= 0
	}
	if !keep {
		q = nil
	}
	if field {
		dst = binary.AppendUvarint(dst, uint64(len(q)))
	}
	return append(dst, q...)
}

// appendQueryLong is appendQuery for queries that may hold more than
// smallParams parameters; it keeps the larger array out of the common
// path's stack frame.
//
//go:noinline
func (r *Rules) appendQueryLong(dst, q []byte, field bool, bound int) []byte {
	if bound > stackParams {
		// Not presized by bound: a query of bare '&' would make it allocate
		// 32 bytes per input byte for parameters that do not exist.
		return r.appendSorted(dst, q, make([]param, 0, 2*stackParams), field)
	}
	var stack [stackParams]param
	return r.appendSorted(dst, q, stack[:0], field)
}

// appendSorted collects the kept parameters of q into ps (without allocating
// when ps has room for all of them), sorts them and appends them,
// length-prefixed when field is set.
func (r *Rules) appendSorted(dst, q []byte, ps []param, field bool) []byte {
	ps, n := r.params(ps, q)
	if field {
		dst = binary.AppendUvarint(dst, uint64(n))
	}
	return appendParams(dst, q, ps)
}

// params appends the kept parameters of q to ps, sorted, and returns them with
// the length of their canonical form. Up to stackParams parameters are sorted
// by insertion sort (stable, quick for the short lists of real URLs); longer
// lists by a merge sort, so a hostile query with thousands of parameters
// costs O(n log n), not O(n²).
func (r *Rules) params(ps []param, q []byte) ([]param, int) {
	n := 0
	for start := 0; start < len(q); {
		end := bytes.IndexByte(q[start:], '&')
		if end < 0 {
			end = len(q)
		} else {
			end += start
		}
		if end > start {
			nameEnd := bytes.IndexByte(q[start:end], '=')
			if nameEnd < 0 {
				nameEnd = end
			} else {
				nameEnd += start
			}
			// A parameter carrying ';' is never ignored: many origins
			// also split on ';', and "utm_source=x;callback=evil" must
			// not hide a parameter from the key.
			if name := q[start:nameEnd]; !r.ignored(name) || bytes.IndexByte(q[start:end], ';') >= 0 {
				ps = append(ps, param{namePrefix(name), start, nameEnd, end})
				if n > 0 {
					n++ // the '&' before it
				}
				n += end - start
			}
		}
		start = end + 1
	}
	if len(ps) <= stackParams {
		insertionSort(ps, q)
	} else {
		slices.SortStableFunc(ps, func(a, b param) int { return compareNames(q, &a, &b) })
	}
	return ps, n
}

// namePrefix packs the first 8 bytes of name big-endian, zero-padded: prefix
// order agrees with bytewise order, and equal prefixes need a full compare.
func namePrefix(name []byte) uint64 {
	if len(name) >= 8 {
		return binary.BigEndian.Uint64(name)
	}
	var p uint64
	for i, c := range name {
		p |= uint64(c) << (56 - 8*i)
	}
	return p
}

// compareNames orders parameters by name, bytewise.
func compareNames(q []byte, a, b *param) int {
	switch {
	case a.prefix < b.prefix:
		return -1
	case a.prefix > b.prefix:
		return 1
	}
	return bytes.Compare(q[a.start:a.nameEnd], q[b.start:b.nameEnd])
}

// insertionSort sorts ps by name, stably, by binary insertion: each element
// goes after every element with a name not greater than its own (an upper
// bound), so equal names keep their order; the elements after it move in
// one copy.
func insertionSort(ps []param, q []byte) {
	for i := 1; i < len(ps); i++ {
		p := ps[i]
		if compareNames(q, &ps[i-1], &p) <= 0 {
			continue // already in place: the common case for sorted queries
		}
		lo, hi := 0, i-1 // ps[i-1] > p, so the slot is in [0, i-1]
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if compareNames(q, &ps[m], &p) <= 0 {
				lo = m + 1
			} else {
				hi = m
			}
		}
		copy(ps[lo+1:i+1], ps[lo:i])
		ps[lo] = p
	}
}

// appendParams appends the parameters joined with '&'.
func appendParams(dst, q []byte, ps []param) []byte {
	for i, p := range ps {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, q[p.start:p.end]...)
	}
	return dst
}

// AppendForwardQuery appends q without the parameters the key ignores
// (the same test as the key's: raw name equal to an ignored name, no ';'
// in the parameter), the others in their order, joined with '&'. dropped
// is false, and nothing is appended, when q holds no ignored parameter:
// the caller then forwards q as it is.
//
// A cache fetch forwards this query, so an ignored parameter the origin
// would echo ("utm_source") cannot put one client's value into the
// answer everyone shares: the query the origin sees has the same key as
// the request, and nothing outside it.
func (r *Rules) AppendForwardQuery(dst, q []byte) (out []byte, dropped bool) {
	if r == nil || (len(r.ignore) == 0) {
		return dst, false
	}
	start, first := len(dst), true
	for i := 0; i <= len(q); {
		end := bytes.IndexByte(q[i:], '&')
		if end < 0 {
			end = len(q)
		} else {
			end += i
		}
		p := q[i:end]
		name := p
		if eq := bytes.IndexByte(p, '='); eq >= 0 {
			name = p[:eq]
		}
		switch {
		case len(p) > 0 && r.ignored(name) && bytes.IndexByte(p, ';') < 0:
			dropped = true
		case len(p) > 0:
			if !first {
				dst = append(dst, '&')
			}
			dst, first = append(dst, p...), false
		}
		i = end + 1
	}
	if !dropped {
		return dst[:start], false
	}
	return dst, true
}
