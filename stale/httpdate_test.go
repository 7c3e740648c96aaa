package stale

import (
	"testing"
	"time"
)

func TestParseHTTPDate(t *testing.T) {
	sunday := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	tests := []struct {
		name string
		in   string
		want time.Time // zero: invalid
	}{
		{"IMF-fixdate §5.6.7", "Sun, 06 Nov 1994 08:49:37 GMT", sunday},
		{"RFC 850 §5.6.7", "Sunday, 06-Nov-94 08:49:37 GMT", sunday},
		{"asctime SP DIGIT §5.6.7", "Sun Nov  6 08:49:37 1994", sunday},
		{"asctime 2DIGIT §5.6.7", "Sun Nov 06 08:49:37 1994", sunday},
		{"names any case (as net/http)", "SUN, 06 nov 1994 08:49:37 GMT", sunday},
		{"zone any case, lenient recipient §5.6.7", "Sun, 06 Nov 1994 08:49:37 gMT", sunday},
		{"RFC 850 zone any case §5.6.7", "sunday, 06-nov-94 08:49:37 gmt", sunday},
		{"asctime §5.6.7", "Sun Nov  6 08:49:37 1994", sunday},
		{"weekday not checked (as net/http)", "Mon, 06 Nov 1994 08:49:37 GMT", sunday},
		{"RFC 850 Wednesday, the longest name", "Wednesday, 09-Nov-94 08:49:37 GMT", time.Date(1994, 11, 9, 8, 49, 37, 0, time.UTC)},
		{"RFC 850 year 68 → 2068 (Go pivot)", "Friday, 01-Jan-68 00:00:00 GMT", time.Date(2068, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"RFC 850 year 69 → 1969 (Go pivot)", "Wednesday, 01-Jan-69 00:00:00 GMT", time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"leap day", "Thu, 29 Feb 2024 23:59:59 GMT", time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC)},
		{"leap day 2000", "Tue, 29 Feb 2000 00:00:00 GMT", time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"year 0", "Sat, 01 Jan 0000 00:00:00 GMT", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"Expires: 0 is invalid §5.3 RFC9111", "0", time.Time{}},
		{"empty", "", time.Time{}},
		{"no leap day 2100", "Fri, 29 Feb 2100 00:00:00 GMT", time.Time{}},
		{"31 April", "Thu, 31 Apr 2025 00:00:00 GMT", time.Time{}},
		{"day 0", "Sun, 00 Nov 1994 08:49:37 GMT", time.Time{}},
		{"hour 24", "Sun, 06 Nov 1994 24:00:00 GMT", time.Time{}},
		{"minute 60", "Sun, 06 Nov 1994 08:60:37 GMT", time.Time{}},
		{"leap second rejected (as net/http)", "Sun, 06 Nov 1994 23:59:60 GMT", time.Time{}},
		{"other zone", "Sun, 06 Nov 1994 08:49:37 UTC", time.Time{}},
		{"bad weekday", "Xyz, 06 Nov 1994 08:49:37 GMT", time.Time{}},
		{"bad month", "Sun, 06 Noo 1994 08:49:37 GMT", time.Time{}},
		{"single-digit day in IMF", "Sun, 6 Nov 1994 08:49:37 GMT ", time.Time{}},
		{"trailing space", "Sun, 06 Nov 1994 08:49:37 GMT ", time.Time{}},
		{"leading space", " Sun, 06 Nov 1994 08:49:37 GMT", time.Time{}},
		{"fraction", "Sun, 06 Nov 1994 08:49:37.5 GMT", time.Time{}},
		{"sign in year", "Sun, 06 Nov +994 08:49:37 GMT", time.Time{}},
		{"RFC 850 short weekday", "Sun, 06-Nov-94 08:49:37 GMT", time.Time{}},
		{"RFC 850 bad separators", "Sunday, 06 Nov 94 08:49:37 GMT", time.Time{}},
		{"asctime bad clock", "Sun Nov  6 08-49-37 1994", time.Time{}},
		{"asctime day with two spaces and digits", "Sun Nov   6 08:49:37 1994", time.Time{}},
		{"ISO 8601", "1994-11-06T08:49:37Z", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseHTTPDate([]byte(tt.in))
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Fatalf("ParseHTTPDate(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, !tt.want.IsZero())
			}
			if ok && got.Location() != time.UTC {
				t.Errorf("ParseHTTPDate(%q) location %v, want UTC", tt.in, got.Location())
			}
		})
	}
}

func TestAppendHTTPDate(t *testing.T) {
	east := time.FixedZone("X", 5*3600)
	tests := []struct {
		in   time.Time
		want string
	}{
		{time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC), "Sun, 06 Nov 1994 08:49:37 GMT"},
		{time.Date(1994, 11, 6, 13, 49, 37, 999, east), "Sun, 06 Nov 1994 08:49:37 GMT"}, // converted to UTC, fraction dropped
		{time.Unix(0, 0), "Thu, 01 Jan 1970 00:00:00 GMT"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			prefix := []byte("Date: ")
			got := AppendHTTPDate(prefix, tt.in)
			if string(got) != "Date: "+tt.want {
				t.Errorf("AppendHTTPDate(%v) = %q, want %q", tt.in, got, "Date: "+tt.want)
			}
		})
	}
}

// TestHTTPDateLen: what AppendHTTPDate appends is HTTPDateLen bytes, in
// any zone and on any day (callers size buffers by it).
func TestHTTPDateLen(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 4, 23, 59, 59, 999, time.FixedZone("x", -11*3600)),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		if got := AppendHTTPDate(nil, tm); len(got) != HTTPDateLen {
			t.Errorf("AppendHTTPDate(%v) = %q, %d bytes, want %d", tm, got, len(got), HTTPDateLen)
		}
	}
}
