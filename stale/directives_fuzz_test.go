package stale

import (
	"strconv"
	"strings"
	"testing"
)

// refSplit splits a Cache-Control value into list members: split on every
// comma, then glue pieces back together while a quoted-string is open.
func refSplit(s string) []string {
	var out []string
	cur, open := "", false
	for i, p := range strings.Split(s, ",") {
		if i > 0 && open {
			cur += "," + p
		} else {
			cur = p
		}
		open = refQuoteOpen(cur)
		if !open {
			out = append(out, cur)
		}
	}
	if open {
		out = append(out, cur)
	}
	return out
}

// refQuoteOpen reports whether s ends inside a quoted-string.
func refQuoteOpen(s string) bool {
	open := false
	for i := 0; i < len(s); i++ {
		switch {
		case open && s[i] == '\\':
			i++
		case s[i] == '"':
			open = !open
		}
	}
	return open
}

// refUnquote decodes a whole quoted-string, or reports false.
func refUnquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			return b.String(), i == len(s)-1
		case '\\':
			if i+1 == len(s) {
				return "", false
			}
			i++
		}
		b.WriteByte(s[i])
	}
	return "", false
}

// refDelta interprets a delta-seconds argument; ok is false when invalid.
func refDelta(val string, hasVal bool) (int64, bool) {
	if !hasVal {
		return 0, false
	}
	if strings.HasPrefix(val, `"`) {
		var ok bool
		if val, ok = refUnquote(val); !ok {
			return 0, false
		}
	}
	if val == "" || strings.Trim(val, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(val, 10, 64)
	if err != nil || n > MaxDeltaSeconds { // only ErrRange is possible here
		return MaxDeltaSeconds, true
	}
	return n, true
}

// refLower lower-cases ASCII letters only (strings.ToLower would fold
// non-ASCII look-alikes such as U+017F into ASCII names).
func refLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// refParse is the slow, obviously correct Cache-Control parser the fast one
// must agree with.
func refParse(lines ...string) Directives {
	d := Directives{MaxAge: -1, SMaxAge: -1, StaleWhileRevalidate: -1, StaleIfError: -1, MaxStale: -1, MinFresh: -1}
	seen := map[string]bool{}
	for _, line := range lines {
		for _, member := range refSplit(line) {
			name, val, hasVal := strings.Cut(strings.Trim(member, " \t"), "=")
			name, val = refLower(strings.Trim(name, " \t")), strings.Trim(val, " \t")
			if seen[name] {
				continue
			}
			seen[name] = true
			delta := func(invalid int64) int64 {
				if n, ok := refDelta(val, hasVal); ok {
					return n
				}
				return invalid
			}
			switch name {
			case "max-age":
				d.MaxAge = delta(0)
			case "s-maxage":
				d.SMaxAge = delta(0)
			case "stale-while-revalidate":
				d.StaleWhileRevalidate = delta(-1)
			case "stale-if-error":
				d.StaleIfError = delta(-1)
			case "min-fresh":
				d.MinFresh = delta(-1)
			case "max-stale":
				if hasVal {
					d.MaxStale = delta(-1)
				} else {
					d.MaxStaleAny = true
				}
			case "no-store":
				d.NoStore = true
			case "no-cache":
				if refQualified(val, hasVal) {
					d.NoCacheQualified = true
				} else {
					d.NoCache = true
				}
			case "private":
				if refQualified(val, hasVal) {
					d.PrivateQualified = true
				} else {
					d.Private = true
				}
			case "public":
				d.Public = true
			case "must-revalidate":
				d.MustRevalidate = true
			case "proxy-revalidate":
				d.ProxyRevalidate = true
			case "must-understand":
				d.MustUnderstand = true
			case "no-transform":
				d.NoTransform = true
			case "only-if-cached":
				d.OnlyIfCached = true
			case "immutable":
				d.Immutable = true
			}
		}
	}
	return d
}

// refQualified: a quoted field-name list without escapes naming something.
func refQualified(val string, hasVal bool) bool {
	if !hasVal || len(val) < 3 || val[0] != '"' || val[len(val)-1] != '"' {
		return false
	}
	in := val[1 : len(val)-1]
	return !strings.ContainsAny(in, "\"\\") && strings.Trim(in, ", \t") != ""
}

func FuzzParseCacheControl(f *testing.F) {
	for _, s := range []string{
		"public, max-age=60, stale-while-revalidate=30",
		"private, no-store",
		`no-cache="Set-Cookie, X", s-maxage="10"`,
		"max-age=1, max-age=2",
		"MAX-AGE = 5 , must-revalidate",
		"max-stale, min-fresh=3, only-if-cached",
		"max-age=99999999999999999999",
		`max-age="6\0"`,
		`a="\`,
		"\u017f-maxage=5, \u212aeep",
		"stale-if-error=86400, proxy-revalidate, must-understand, immutable",
	} {
		f.Add(s, "max-age=7")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var fresh Directives
		fresh.Reset()
		fresh.Parse([]byte(a))
		fresh.Parse([]byte(b))

		if got, ref := exported(fresh), refParse(a, b); got != ref {
			t.Fatalf("Parse(%q, %q) =\n%+v\nreference\n%+v", a, b, got, ref)
		}

		// A Directives reused after Reset must equal a fresh one, including
		// the duplicate bookkeeping.
		reused := fresh
		reused.Parse([]byte(b + "," + a))
		reused.Reset()
		reused.Parse([]byte(a))
		reused.Parse([]byte(b))
		if reused != fresh {
			t.Fatalf("reused %+v != fresh %+v for %q, %q", reused, fresh, a, b)
		}
	})
}
