//go:build !race

package stale

import (
	"testing"
	"time"
)

// TestHotPathAllocs pins the functions a cache hit uses at zero allocations.
func TestHotPathAllocs(t *testing.T) {
	var d Directives
	stored := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	buf := make([]byte, 0, 64)
	tests := []struct {
		name string
		fn   func()
	}{
		{"Parse", func() { d.Reset(); d.Parse(benchCC) }},
		{"Parse quoted", func() { d.Reset(); d.Parse([]byte(`no-cache="Set-Cookie", max-age="5", MUST-REVALIDATE`)) }},
		{"ParseHTTPDate IMF-fixdate", func() { _, sinkBool = ParseHTTPDate(benchDate) }},
		{"ParseHTTPDate RFC850", func() { _, sinkBool = ParseHTTPDate(benchRFC850) }},
		{"ParseHTTPDate asctime", func() { _, sinkBool = ParseHTTPDate([]byte("Sun Nov  6 08:49:37 1994")) }},
		{"Classify", func() { sinkState = Classify(70*time.Second, 60*time.Second, 30*time.Second, 0, &d) }},
		{"ETagMatch", func() { sinkBool = ETagMatch(benchINM, benchETag) }},
		{"NotModifiedSince", func() { sinkBool = NotModifiedSince(benchDate, benchDate) }},
		{"ETagMatchStrong", func() { sinkBool = ETagMatchStrong(benchINM, benchETag) }},
		{"ModifiedSince", func() { sinkBool = ModifiedSince(benchDate, benchDate) }},
		{"CurrentAge", func() { sinkDuration = CurrentAge(time.Second, stored, stored.Add(time.Minute)) }},
		{"ParseAge", func() { sinkDuration, sinkBool = ParseAge([]byte("60")) }},
		{"AppendAge", func() { buf = AppendAge(buf[:0], time.Minute) }},
		{"AppendHTTPDate", func() { buf = AppendHTTPDate(buf[:0], stored) }},
		{"State.String", func() { sinkBool = Fresh.String() == "" }},
		{"PragmaNoCache", func() { sinkBool = PragmaNoCache([]byte("x, no-cache")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tt.fn); n != 0 {
				t.Errorf("%s: %v allocs/op, want 0", tt.name, n)
			}
		})
	}
}

// TestMissPathAllocs keeps the store-time decisions allocation-free too.
func TestMissPathAllocs(t *testing.T) {
	f := Facts{
		Method: []byte("GET"), Status: 200, CC: cc("public, max-age=60"),
		Date: benchDate, LastModified: benchDate, ETag: true, ResponseTime: time.Now(),
	}
	p := Policy{StaleIfError: time.Hour, MaxStale: time.Hour}
	n := testing.AllocsPerRun(100, func() {
		sinkBool, _ = Storable(&f, p)
		sinkDuration = Lifetime(&f, p)
		sinkDuration, _ = Windows(f.CC, p)
	})
	if n != 0 {
		t.Errorf("Storable+Lifetime+Windows: %v allocs/op, want 0", n)
	}
}
