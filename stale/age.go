package stale

import (
	"bytes"
	"strconv"
	"time"
)

// maxAge is the age any calculation saturates at: MaxDeltaSeconds, the
// RFC 9111 §1.2.2 "infinity", so sums of ages never overflow.
const maxAge = MaxDeltaSeconds * time.Second

// seconds converts a delta-seconds value (0..MaxDeltaSeconds) to a Duration.
func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }

// clampAge keeps an age within [0, maxAge].
func clampAge(d time.Duration) time.Duration {
	return min(max(d, 0), maxAge)
}

// InitialAge returns the corrected_initial_age of a response (RFC 9111
// §4.2.3): the larger of the apparent age (responseTime − Date, at least 0)
// and the Age header plus the response delay (responseTime − requestTime).
// ageHeader is 0 when the response has no valid Age; date is the zero Time
// when it has no valid Date, which makes the apparent age 0 (RFC 9110 §6.6.1:
// the receipt time stands in for a missing Date). The result is within
// [0, 2^31−1 s].
func InitialAge(ageHeader time.Duration, date, requestTime, responseTime time.Time) time.Duration {
	var apparent time.Duration
	if !date.IsZero() {
		apparent = clampAge(responseTime.Sub(date))
	}
	delay := clampAge(responseTime.Sub(requestTime))
	corrected := clampAge(clampAge(ageHeader) + delay)
	return max(apparent, corrected)
}

// CurrentAge returns the age of a stored response at now (RFC 9111 §4.2.3):
// initialAge plus the time it has been resident since responseTime. A clock
// that went backwards counts as no residence; the result saturates at
// 2^31−1 s.
func CurrentAge(initialAge time.Duration, responseTime, now time.Time) time.Duration {
	return clampAge(clampAge(initialAge) + clampAge(now.Sub(responseTime)))
}

// CurrentAgeUnixNano is CurrentAge for times in Unix nanoseconds, the
// form a cache entry stores its response time in: one subtraction
// instead of two wall-clock conversions and a Time.Sub on every hit.
// The residence saturates like Time.Sub's; FuzzCurrentAgeUnixNano
// checks it equals CurrentAge.
func CurrentAgeUnixNano(initialAge time.Duration, responseTime, now int64) time.Duration {
	resident := time.Duration(now - responseTime)
	if (now >= responseTime) != (resident >= 0) {
		// The difference overflowed: it is beyond any age.
		resident = maxAge
		if now < responseTime {
			resident = 0
		}
	}
	return clampAge(clampAge(initialAge) + clampAge(resident))
}

// ParseAge parses an Age field value (RFC 9111 §5.1): a list uses its first
// member, and anything but 1*DIGIT is invalid and reports false (the field is
// then ignored). Values clamp to 2^31−1 s.
func ParseAge(b []byte) (time.Duration, bool) {
	if i := bytes.IndexByte(b, ','); i >= 0 {
		b = b[:i]
	}
	n, ok := digits(trimOWS(b))
	if !ok {
		return 0, false
	}
	return seconds(n), true
}

// AppendAge appends age as an Age field value (whole seconds, rounded down,
// within [0, 2^31−1]) to dst and returns the extended slice.
func AppendAge(dst []byte, age time.Duration) []byte {
	return strconv.AppendInt(dst, int64(clampAge(age)/time.Second), 10)
}
