package stale

import "time"

// imfFixdate is the preferred HTTP-date layout (RFC 9110 §5.6.7), the same as
// net/http.TimeFormat.
const imfFixdate = "Mon, 02 Jan 2006 15:04:05 GMT"

// HTTPDateLen is the length of what AppendHTTPDate appends (for years
// 0..9999), for callers that size a buffer before it.
const HTTPDateLen = len(imfFixdate)

var (
	shortDays  = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
	longDays   = [7]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}
	shortMonth = [12]string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
)

// ParseHTTPDate parses an HTTP-date in any of the three formats of RFC 9110
// §5.6.7 and returns it in UTC:
//
//	IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT
//	RFC 850      Sunday, 06-Nov-94 08:49:37 GMT
//	asctime      Sun Nov  6 08:49:37 1994
//
// Names, including the zone "GMT", match in any ASCII case: RFC 9110 §5.6.7
// makes them case-sensitive but asks recipients to be lenient with dates, and
// "gMT" from a broken origin is still unambiguous. It allocates nothing. Leading or trailing whitespace, other zones than GMT,
// fractional seconds and out-of-range fields are rejected; see the package
// doc for names, weekdays and two-digit years. An invalid date reports false;
// RFC 9111 §5.3 says to treat such an Expires as a time in the past.
func ParseHTTPDate(b []byte) (time.Time, bool) {
	switch {
	case len(b) == len(imfFixdate) && b[3] == ',':
		return parseIMFFixdate(b)
	case len(b) == len("Sun Nov  6 08:49:37 1994") && b[3] == ' ':
		return parseASCTime(b)
	default:
		return parseRFC850(b)
	}
}

// parseIMFFixdate parses "Sun, 06 Nov 1994 08:49:37 GMT".
func parseIMFFixdate(b []byte) (time.Time, bool) {
	if !isShortDay(b[0:3]) || b[4] != ' ' || b[7] != ' ' || b[11] != ' ' || b[16] != ' ' ||
		b[25] != ' ' || !equalFoldASCII(b[26:29], "gmt") {
		return time.Time{}, false
	}
	day, ok1 := num(b[5:7])
	month, ok2 := monthOf(b[8:11])
	year, ok3 := num(b[12:16])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, false
	}
	return build(year, month, day, b[17:25])
}

// parseRFC850 parses "Sunday, 06-Nov-94 08:49:37 GMT".
func parseRFC850(b []byte) (time.Time, bool) {
	const rest = len(", 06-Nov-94 08:49:37 GMT")
	if len(b) < rest+len("monday") || len(b) > rest+len("wednesday") {
		return time.Time{}, false
	}
	n := len(b) - rest
	b, tail := b[:n], b[n:]
	if !isLongDay(b) || tail[0] != ',' || tail[1] != ' ' || tail[4] != '-' || tail[8] != '-' ||
		tail[11] != ' ' || tail[20] != ' ' || !equalFoldASCII(tail[21:24], "gmt") {
		return time.Time{}, false
	}
	day, ok1 := num(tail[2:4])
	month, ok2 := monthOf(tail[5:8])
	yy, ok3 := num(tail[9:11])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, false
	}
	// The pivot of Go's time package ("06" layout), so results agree with
	// net/http.ParseTime; see the package doc.
	if yy >= 69 {
		yy += 1900
	} else {
		yy += 2000
	}
	return build(yy, month, day, tail[12:20])
}

// parseASCTime parses "Sun Nov  6 08:49:37 1994" (day as SP DIGIT or 2DIGIT).
func parseASCTime(b []byte) (time.Time, bool) {
	if !isShortDay(b[0:3]) || b[7] != ' ' || b[10] != ' ' || b[19] != ' ' {
		return time.Time{}, false
	}
	dd := b[8:10]
	if dd[0] == ' ' {
		dd = dd[1:]
	}
	day, ok1 := num(dd)
	month, ok2 := monthOf(b[4:7])
	year, ok3 := num(b[20:24])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, false
	}
	return build(year, month, day, b[11:19])
}

// build validates the fields and the "hh:mm:ss" clock and makes the time.
func build(year, month, day int, clock []byte) (time.Time, bool) {
	if clock[2] != ':' || clock[5] != ':' {
		return time.Time{}, false
	}
	hh, ok1 := num(clock[0:2])
	mm, ok2 := num(clock[3:5])
	ss, ok3 := num(clock[6:8])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 59 ||
		day < 1 || day > daysIn(month, year) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hh, mm, ss, 0, time.UTC), true
}

// num parses a short run of ASCII digits.
func num(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// key3 packs three bytes, ASCII letters lower-cased, for name lookups.
func key3(b []byte) uint32 {
	return uint32(b[0]|0x20)<<16 | uint32(b[1]|0x20)<<8 | uint32(b[2]|0x20)
}

// monthOf maps a three-letter month name, any ASCII case, to 1..12.
func monthOf(b []byte) (int, bool) {
	if len(b) == 3 {
		k := key3(b)
		for i, m := range shortMonth {
			if k == key3([]byte(m)) && equalFoldASCII(b, m) {
				return i + 1, true
			}
		}
	}
	return 0, false
}

// dayIndex returns the index of a weekday name (three-letter or long) in
// shortDays/longDays, any ASCII case, or −1.
func dayIndex(b []byte, names *[7]string) int {
	if len(b) < 3 {
		return -1
	}
	k := key3(b)
	for i, d := range shortDays {
		if k == key3([]byte(d)) {
			if equalFoldASCII(b, names[i]) {
				return i
			}
			return -1
		}
	}
	return -1
}

func isShortDay(b []byte) bool { return dayIndex(b, &shortDays) >= 0 }

func isLongDay(b []byte) bool { return dayIndex(b, &longDays) >= 0 }

// daysIn returns the number of days of month (1..12) in the proleptic
// Gregorian year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// AppendHTTPDate appends t as an IMF-fixdate (RFC 9110 §5.6.7), converted to
// UTC, to dst and returns the extended slice. t's year must be within
// 0..9999 for the result to be a valid HTTP-date.
func AppendHTTPDate(dst []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(dst, imfFixdate)
}
