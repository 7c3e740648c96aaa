package cachekey

import (
	"encoding/binary"
	"regexp"
	"sort"
	"strings"
)

// This file holds a slow, obviously-correct reference implementation of the
// layout in doc.go, written with strings, sort and regexp instead of the
// hand-rolled single pass of the package. Tests and fuzzing check that the
// two agree.

type refVary struct {
	name  string
	value *string // nil: header absent
}

func refLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

func refHost(scheme, host string) string {
	scheme = refLower(scheme)
	name, port, hasPort := host, "", false
	if strings.HasPrefix(host, "[") {
		if before, after, ok := strings.Cut(host, "]"); ok && strings.HasPrefix(after, ":") {
			name, port, hasPort = before+"]", after[1:], true
		}
	} else if strings.Count(host, ":") == 1 {
		name, port, _ = strings.Cut(host, ":")
		hasPort = true
	}
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		hasPort = false
	}
	if strings.HasSuffix(name, ".") && !strings.HasSuffix(name, "..") {
		name = strings.TrimSuffix(name, ".")
	}
	if hasPort {
		name += ":" + port
	}
	return refLower(name)
}

func refQuery(ignore []string, q string) string {
	var kept []string
	for _, p := range strings.Split(q, "&") {
		name, _, _ := strings.Cut(p, "=")
		if p == "" || (containsString(ignore, name) && !strings.Contains(p, ";")) {
			continue
		}
		kept = append(kept, p)
	}
	sort.SliceStable(kept, func(i, j int) bool {
		a, _, _ := strings.Cut(kept[i], "=")
		b, _, _ := strings.Cut(kept[j], "=")
		return a < b
	})
	return strings.Join(kept, "&")
}

var (
	refCommaOWS = regexp.MustCompile(`[ \t]*,[ \t]*`)
	refRunOWS   = regexp.MustCompile(`[ \t]+`)
)

func refValue(v string) string {
	v = strings.Trim(v, " \t")
	v = refCommaOWS.ReplaceAllString(v, ",")
	return refRunOWS.ReplaceAllString(v, " ")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func refField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// refKey builds a key (and variant key when vary is non-empty) from the layout
// description in doc.go.
func refKey(ignore, keyHeaders []string, p *Parts, vary []refVary) []byte {
	names := make([]string, len(keyHeaders))
	for i, h := range keyHeaders {
		names[i] = refLower(h)
	}
	sort.Strings(names)

	b := []byte{Version}
	b = binary.BigEndian.AppendUint32(b, p.Namespace)
	b = refField(b, p.Route)
	b = refField(b, refLower(string(p.Scheme)))
	b = refField(b, refHost(string(p.Scheme), string(p.Host)))
	b = refField(b, string(p.Path))
	b = refField(b, refQuery(ignore, string(p.Query)))
	b = refField(b, string(p.Tenant))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for i, n := range names {
		b = refField(b, n)
		v := ""
		if i < len(p.Headers) {
			v = refValue(string(p.Headers[i]))
		}
		b = refField(b, v)
	}
	for _, d := range vary {
		b = append(b, 'V')
		b = refField(b, refLower(d.name))
		if d.value == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		if n := refLower(d.name); n == "accept-encoding" || n == "accept-language" {
			b = refField(b, refList(*d.value))
			continue
		}
		b = refField(b, refValue(*d.value))
	}
	return b
}

// refList is the list-field normalisation of AppendVary: refValue,
// lower-cased, no spaces next to ";" or "=".
func refList(v string) string {
	s := refLower(refValue(v))
	for _, sep := range []string{";", "="} {
		s = strings.ReplaceAll(s, " "+sep, sep)
		s = strings.ReplaceAll(s, sep+" ", sep)
	}
	return s
}
