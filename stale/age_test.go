package stale

import (
	"math"
	"testing"
	"time"
)

func TestInitialAge(t *testing.T) {
	req := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	resp := req.Add(2 * time.Second)
	inf := MaxDeltaSeconds * time.Second
	tests := []struct {
		name      string
		ageHeader time.Duration
		date      time.Time
		req, resp time.Time
		want      time.Duration
	}{
		{"apparent age wins §4.2.3", 0, resp.Add(-10 * time.Second), req, resp, 10 * time.Second},
		{"Age + response delay wins §4.2.3", 30 * time.Second, resp.Add(-10 * time.Second), req, resp, 32 * time.Second},
		{"Date in the future: apparent age 0 §4.2.3", 0, resp.Add(time.Minute), req, resp, 2 * time.Second},
		{"no Date: receipt time is the date RFC9110§6.6.1", 5 * time.Second, time.Time{}, req, resp, 7 * time.Second},
		{"clock went backwards: no negative delay", 5 * time.Second, time.Time{}, resp, req, 5 * time.Second},
		{"negative Age header treated as 0", -time.Hour, time.Time{}, req, resp, 2 * time.Second},
		{"ancient Date saturates §1.2.2", 0, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), req, resp, inf},
		{"huge Age saturates §1.2.2", inf, time.Time{}, req, resp, inf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InitialAge(tt.ageHeader, tt.date, tt.req, tt.resp); got != tt.want {
				t.Errorf("InitialAge = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCurrentAge(t *testing.T) {
	resp := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	inf := MaxDeltaSeconds * time.Second
	tests := []struct {
		name    string
		initial time.Duration
		now     time.Time
		want    time.Duration
	}{
		{"resident time added §4.2.3", 10 * time.Second, resp.Add(5 * time.Second), 15 * time.Second},
		{"just received", 10 * time.Second, resp, 10 * time.Second},
		{"clock went backwards: no residence", 10 * time.Second, resp.Add(-time.Hour), 10 * time.Second},
		{"saturates §1.2.2", inf, resp.Add(time.Hour), inf},
		{"far future saturates", 0, resp.Add(1 << 62), inf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CurrentAge(tt.initial, resp, tt.now); got != tt.want {
				t.Errorf("CurrentAge(%v, resp, %v) = %v, want %v", tt.initial, tt.now, got, tt.want)
			}
		})
	}
}

func TestParseAge(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"60", time.Minute, true},
		{" 60 ", time.Minute, true},
		{"60, 70", time.Minute, true},                        // §5.1: first member of a list
		{"99999999999", MaxDeltaSeconds * time.Second, true}, // §1.2.2
		{"", 0, false},
		{"-5", 0, false}, // §5.1: invalid is ignored
		{"1.5", 0, false},
		{"x, 60", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseAge([]byte(tt.in))
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseAge(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAppendAge(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0"},
		{1999 * time.Millisecond, "1"}, // rounded down
		{-time.Second, "0"},            // never negative
		{1 << 62, "2147483647"},        // §1.2.2
		{time.Hour, "3600"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := AppendAge(nil, tt.in); string(got) != tt.want {
				t.Errorf("AppendAge(%v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzCurrentAgeUnixNano: the Unix-nanosecond form agrees with
// CurrentAge on the same instants, overflowing differences included.
func FuzzCurrentAgeUnixNano(f *testing.F) {
	f.Add(int64(time.Second), int64(1_700_000_000_000_000_000), int64(1_700_000_060_000_000_000))
	f.Add(int64(0), int64(1_700_000_060_000_000_000), int64(1_700_000_000_000_000_000))
	f.Add(int64(-5), int64(math.MinInt64), int64(math.MaxInt64))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MinInt64))
	f.Add(int64(3), int64(0), int64(-1))
	f.Fuzz(func(t *testing.T, initial, resp, now int64) {
		want := CurrentAge(time.Duration(initial), time.Unix(0, resp), time.Unix(0, now))
		if got := CurrentAgeUnixNano(time.Duration(initial), resp, now); got != want {
			t.Fatalf("CurrentAgeUnixNano(%d, %d, %d) = %v, CurrentAge says %v", initial, resp, now, got, want)
		}
	})
}
