package stale

import (
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	s := time.Second
	tests := []struct {
		name                    string
		age, lifetime, swr, sie time.Duration
		req                     *Directives
		want                    State
	}{
		{"fresh §4.2", 10 * s, 60 * s, 0, 0, nil, Fresh},
		{"age == lifetime is stale §4.2", 60 * s, 60 * s, 0, 0, nil, Expired},
		{"lifetime 0 is never fresh §4.2", 0, 0, 0, 0, nil, Expired},
		{"inside swr RFC5861§3", 70 * s, 60 * s, 30 * s, 0, nil, StaleRevalidate},
		{"swr measured from end of freshness RFC5861§3", 90 * s, 60 * s, 30 * s, 0, nil, Expired},
		{"swr before sie", 70 * s, 60 * s, 30 * s, time.Hour, nil, StaleRevalidate},
		{"past swr, inside sie RFC5861§4", 100 * s, 60 * s, 30 * s, time.Hour, nil, StaleIfErrorOnly},
		{"past sie RFC5861§4", 60*s + time.Hour, 60 * s, 30 * s, time.Hour, nil, Expired},
		{"request no-cache on fresh copy §5.2.1.4", 10 * s, 60 * s, 0, 0, cc("no-cache"), StaleIfErrorOnly},
		{"request max-age=0 on fresh copy §5.2.1.1", 0, 60 * s, 0, 0, cc("max-age=0"), StaleIfErrorOnly},
		{"request max-age satisfied §5.2.1.1", 10 * s, 60 * s, 0, 0, cc("max-age=10"), Fresh},
		{"request max-age exceeded §5.2.1.1", 11 * s, 60 * s, 0, 0, cc("max-age=10"), StaleIfErrorOnly},
		{"request min-fresh satisfied §5.2.1.3", 10 * s, 60 * s, 0, 0, cc("min-fresh=50"), Fresh},
		{"request min-fresh not satisfied §5.2.1.3", 11 * s, 60 * s, 0, 0, cc("min-fresh=50"), StaleIfErrorOnly},
		{"request no-cache forbids swr §5.2.1.4", 70 * s, 60 * s, 30 * s, 0, cc("no-cache"), Expired},
		{"request no-cache, inside sie", 70 * s, 60 * s, 30 * s, time.Hour, cc("no-cache"), StaleIfErrorOnly},
		{"request max-age=0 forbids swr", 70 * s, 60 * s, 30 * s, 0, cc("max-age=0"), Expired},
		{"request max-age allows swr when age fits", 70 * s, 60 * s, 30 * s, 0, cc("max-age=80"), StaleRevalidate},
		{"request max-age forbids swr when age exceeds", 70 * s, 60 * s, 30 * s, 0, cc("max-age=65"), Expired},
		{"request min-fresh forbids swr §5.2.1.3", 70 * s, 60 * s, 30 * s, 0, cc("min-fresh=0"), Expired},
		{"request max-stale ignored (shared cache)", 70 * s, 60 * s, 0, 0, cc("max-stale=3600"), Expired},
		{"request max-stale any ignored", 70 * s, 60 * s, 0, 0, cc("max-stale"), Expired},
		{"request no-store does not stop serving §5.2.1.5", 10 * s, 60 * s, 0, 0, cc("no-store"), Fresh},
		{"request only-if-cached is the caller's §5.2.1.7", 70 * s, 60 * s, 0, 0, cc("only-if-cached"), Expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.age, tt.lifetime, tt.swr, tt.sie, tt.req); got != tt.want {
				t.Errorf("Classify(age %v, lifetime %v, swr %v, sie %v) = %v, want %v", tt.age, tt.lifetime, tt.swr, tt.sie, got, tt.want)
			}
		})
	}
}

func TestStateString(t *testing.T) {
	tests := []struct {
		s    State
		want string
	}{
		{Expired, "expired"},
		{Fresh, "fresh"},
		{StaleRevalidate, "stale-while-revalidate"},
		{StaleIfErrorOnly, "stale-if-error"},
		{State(200), "invalid"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("State(%d).String() = %q, want %q", tt.s, got, tt.want)
		}
	}
	var zero State
	if zero != Expired {
		t.Errorf("zero State = %v, want expired (a forgotten case must be a miss)", zero)
	}
}

func TestTTL(t *testing.T) {
	tests := []struct {
		age, lifetime time.Duration
		want          int64
	}{
		{10 * time.Second, 60 * time.Second, 50},
		{60 * time.Second, 60 * time.Second, 0},
		{90 * time.Second, 60 * time.Second, -30},        // RFC 9211 §2.5: negative when stale
		{59500 * time.Millisecond, 60 * time.Second, 0},  // 0.5 s left rounds down
		{60500 * time.Millisecond, 60 * time.Second, -1}, // 0.5 s stale is already negative
	}
	for _, tt := range tests {
		if got := TTL(tt.age, tt.lifetime); got != tt.want {
			t.Errorf("TTL(%v, %v) = %d, want %d", tt.age, tt.lifetime, got, tt.want)
		}
	}
}
