package cachekey

import "encoding/binary"

// AppendValue appends the normalised form of a header value, as it appears in
// keys, to dst: leading and trailing OWS (SP, HTAB) trimmed, OWS around commas
// removed, other runs of OWS collapsed to one SP. Case and everything else are
// kept, so values differing only in list formatting share a key.
func AppendValue(dst, v []byte) []byte {
	for len(v) > 0 && isOWS(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isOWS(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	// Copy runs of bytes that need no change in one append each; v has no
	// OWS at either end, so every OWS run is followed by a non-OWS byte.
	for len(v) > 0 {
		i := 0
		for i < len(v) && !isOWS(v[i]) {
			i++
		}
		dst = append(dst, v[:i]...)
		if i == len(v) {
			break
		}
		j := i + 1
		for isOWS(v[j]) {
			j++
		}
		// OWS run v[i:j]: dropped next to a comma, else one SP.
		if v[j] != ',' && v[i-1] != ',' {
			dst = append(dst, ' ')
		}
		v = v[j:]
	}
	return dst
}

// appendValueField appends field(normalised v).
func appendValueField(dst, v []byte) []byte {
	start := len(dst)
	dst = append(dst, 0) // length placeholder, fixed by prefixLen
	dst = AppendValue(dst, v)
	return prefixLen(dst, start)
}

// appendHeaders appends the key header section: the count, then each
// lower-case name with its normalised value (empty when absent).
func (r *Rules) appendHeaders(dst []byte, values [][]byte) []byte {
	names := r.KeyHeaders()
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	for i, name := range names {
		dst = binary.AppendUvarint(dst, uint64(len(name)))
		dst = append(dst, name...)
		var v []byte
		if i < len(values) {
			v = values[i]
		}
		dst = appendValueField(dst, v)
	}
	return dst
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }
