package stale

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func FuzzParseHTTPDate(f *testing.F) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Sun Nov 16 08:49:37 1994",
		"Thu, 29 Feb 2024 23:59:59 GMT",
		"Sun, 06 Nov 1994 08:49:37.5 GMT",
		"Sun, 06 Nov 1994 8:49:37 GMT",
		"Wednesday, 31-Dec-69 23:59:59 GMT",
		"0",
	} {
		f.Add(s, int64(784111777))
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		got, ok := ParseHTTPDate([]byte(s))
		std, stdErr := http.ParseTime(s)

		// Everything accepted is a valid HTTP-date to net/http too once its
		// names are in their canonical case (ParseHTTPDate matches day,
		// month and zone names in any case, RFC 9110 §5.6.7; net/http does
		// not), and the same instant.
		if ok {
			canon, err := http.ParseTime(canonicalNames(s))
			if err != nil || !canon.Equal(got) {
				t.Fatalf("ParseHTTPDate(%q) = %v, net/http.ParseTime(%q) = %v, %v", s, got, canonicalNames(s), canon, err)
			}
		}
		// Every canonical IMF-fixdate net/http accepts is accepted.
		if stdErr == nil && string(AppendHTTPDate(nil, std)) == s && !ok {
			t.Fatalf("ParseHTTPDate(%q) rejected a canonical IMF-fixdate", s)
		}
		// Round trip: format what was parsed and parse it back.
		if ok {
			again, ok2 := ParseHTTPDate(AppendHTTPDate(nil, got))
			if !ok2 || !again.Equal(got) {
				t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, got, AppendHTTPDate(nil, got), again, ok2)
			}
		}
		// Round trip from any whole-second instant with a 4-digit year.
		tm := time.Unix(unix, 0).UTC()
		if y := tm.Year(); y < 0 || y > 9999 {
			return
		}
		b := AppendHTTPDate(nil, tm)
		back, ok := ParseHTTPDate(b)
		if !ok || !back.Equal(tm) {
			t.Fatalf("ParseHTTPDate(AppendHTTPDate(%v)) = %v, %v (%q)", tm, back, ok, b)
		}
		// The obsolete formats of the same instant parse to it too (RFC 850
		// only inside the two-digit-year window).
		layouts := []string{time.ANSIC}
		if y := tm.Year(); y >= 1969 && y <= 2068 {
			layouts = append(layouts, "Monday, 02-Jan-06 15:04:05 GMT")
		}
		for _, layout := range layouts {
			obs := tm.Format(layout)
			back, ok := ParseHTTPDate([]byte(obs))
			if !ok || !back.Equal(tm) {
				t.Fatalf("ParseHTTPDate(%q) = %v, %v; want %v", obs, back, ok, tm)
			}
		}
	})
}

// canonicalNames writes every run of ASCII letters as net/http's layouts
// do: "GMT" upper case, any other name ("thu", "FEB") capitalised.
func canonicalNames(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if !isASCIILetter(b[i]) {
			i++
			continue
		}
		j := i
		for j < len(b) && isASCIILetter(b[j]) {
			j++
		}
		word := strings.ToLower(string(b[i:j]))
		if word == "gmt" {
			word = "GMT"
		} else {
			word = strings.ToUpper(word[:1]) + word[1:]
		}
		copy(b[i:j], word)
		i = j
	}
	return string(b)
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
