package stale

import (
	"testing"
	"time"
)

func TestLifetime(t *testing.T) {
	received := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	httpDate := func(t time.Time) []byte { return AppendHTTPDate(nil, t) }
	date := received.Add(-2 * time.Second) // origin clock a little behind
	tests := []struct {
		name string
		f    Facts
		p    Policy
		want time.Duration
	}{
		{"s-maxage over max-age §4.2.1", Facts{Status: 200, CC: cc("max-age=10, s-maxage=20")}, Policy{}, 20 * time.Second},
		{"max-age over Expires §4.2.1", Facts{Status: 200, CC: cc("max-age=10"), Date: httpDate(date), Expires: httpDate(date.Add(time.Hour))}, Policy{}, 10 * time.Second},
		{"Expires − Date §4.2.1", Facts{Status: 200, Date: httpDate(date), Expires: httpDate(date.Add(time.Hour))}, Policy{}, time.Hour},
		{"Expires − response time without Date §4.2.1", Facts{Status: 200, Expires: httpDate(received.Add(time.Hour))}, Policy{}, time.Hour},
		{"Expires − response time with invalid Date §4.2.1", Facts{Status: 200, Date: []byte("yesterday"), Expires: httpDate(received.Add(time.Hour))}, Policy{}, time.Hour},
		{"Expires before Date is 0 §4.2.1", Facts{Status: 200, Date: httpDate(date), Expires: httpDate(date.Add(-time.Hour))}, Policy{}, 0},
		{"invalid Expires is expired §5.3", Facts{Status: 200, Date: httpDate(date), Expires: []byte("0")}, Policy{DefaultTTL: time.Hour}, 0},
		{"max-age=0 §5.2.2.1", Facts{Status: 200, CC: cc("max-age=0")}, Policy{DefaultTTL: time.Hour}, 0},
		{"invalid max-age is stale §4.2.1", Facts{Status: 200, CC: cc("max-age=soon")}, Policy{DefaultTTL: time.Hour}, 0},
		{"no-cache is lifetime 0 §5.2.2.4", Facts{Status: 200, CC: cc("no-cache, max-age=600")}, Policy{}, 0},
		{"clamped max-age §1.2.2", Facts{Status: 200, CC: cc("max-age=999999999999")}, Policy{}, MaxDeltaSeconds * time.Second},
		{"DefaultTTL before heuristic", Facts{Status: 200, Date: httpDate(date), LastModified: httpDate(date.Add(-100 * time.Hour))}, Policy{DefaultTTL: time.Minute}, time.Minute},
		{"heuristic 10% §4.2.2", Facts{Status: 200, Date: httpDate(date), LastModified: httpDate(date.Add(-10 * time.Hour))}, Policy{}, time.Hour},
		{"heuristic capped at 24h §4.2.2", Facts{Status: 200, Date: httpDate(date), LastModified: httpDate(date.Add(-1000 * time.Hour))}, Policy{}, MaxHeuristic},
		{"heuristic from response time without Date §4.2.2", Facts{Status: 404, LastModified: httpDate(received.Add(-10 * time.Hour))}, Policy{}, time.Hour},
		{"heuristic with Last-Modified in the future is 0", Facts{Status: 200, Date: httpDate(date), LastModified: httpDate(date.Add(time.Hour))}, Policy{}, 0},
		{"heuristic with invalid Last-Modified is 0", Facts{Status: 200, LastModified: []byte("nope")}, Policy{}, 0},
		{"public makes 302 heuristic §5.2.2.9", Facts{Status: 302, CC: cc("public"), Date: httpDate(date), LastModified: httpDate(date.Add(-10 * time.Hour))}, Policy{}, time.Hour},
		{"no heuristic for 302 RFC9110§15.1", Facts{Status: 302, Date: httpDate(date), LastModified: httpDate(date.Add(-10 * time.Hour))}, Policy{}, 0},
		{"no DefaultTTL for 500", Facts{Status: 500}, Policy{DefaultTTL: time.Hour}, 0},
		{"nothing at all", Facts{Status: 200}, Policy{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.ResponseTime = received
			if got := Lifetime(&tt.f, tt.p); got != tt.want {
				t.Errorf("Lifetime = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWindows(t *testing.T) {
	routeDefaults := Policy{StaleWhileRevalidate: 30 * time.Second, StaleIfError: time.Hour, MaxStale: 2 * time.Hour}
	tests := []struct {
		name     string
		cc       *Directives
		p        Policy
		swr, sie time.Duration
	}{
		{"from the response RFC5861§3 §4", cc("max-age=60, stale-while-revalidate=10, stale-if-error=20"), routeDefaults, 10 * time.Second, 20 * time.Second},
		{"route defaults when absent (docs/architecture.md §5)", cc("max-age=60"), routeDefaults, 30 * time.Second, time.Hour},
		{"route defaults without Cache-Control", nil, routeDefaults, 30 * time.Second, time.Hour},
		{"explicit zero beats the default RFC5861", cc("stale-while-revalidate=0"), routeDefaults, 0, time.Hour},
		{"invalid value falls back to the default", cc("stale-if-error=x"), routeDefaults, 30 * time.Second, time.Hour},
		{"capped at MaxStale (docs/architecture.md §5)", cc("stale-while-revalidate=86400, stale-if-error=2147483648"), routeDefaults, 2 * time.Hour, 2 * time.Hour},
		{"MaxStale 0 means never stale", cc("stale-while-revalidate=10, stale-if-error=10"), Policy{StaleIfError: time.Hour}, 0, 0},
		{"must-revalidate §4.2.4 §5.2.2.2", cc("must-revalidate, stale-while-revalidate=10, stale-if-error=10"), routeDefaults, 0, 0},
		{"proxy-revalidate §5.2.2.8", cc("proxy-revalidate, stale-if-error=10"), routeDefaults, 0, 0},
		{"no-cache §4.2.4 §5.2.2.4", cc("no-cache, stale-if-error=10"), routeDefaults, 0, 0},
		{"s-maxage with explicit RFC 5861 windows keeps them", cc("s-maxage=60, stale-while-revalidate=10, stale-if-error=10"), routeDefaults, 10 * time.Second, 10 * time.Second},
		{"s-maxage implies proxy-revalidate §5.2.2.10: no route defaults", cc("s-maxage=60"), routeDefaults, 0, 0},
		{"s-maxage with only stale-if-error", cc("s-maxage=60, stale-if-error=7"), routeDefaults, 0, 7 * time.Second},
		{"negative route defaults are none", nil, Policy{StaleWhileRevalidate: -time.Second, StaleIfError: -time.Second, MaxStale: time.Hour}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			swr, sie := Windows(tt.cc, tt.p)
			if swr != tt.swr || sie != tt.sie {
				t.Errorf("Windows = %v, %v; want %v, %v", swr, sie, tt.swr, tt.sie)
			}
		})
	}
}
