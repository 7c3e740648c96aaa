package stale

import (
	"testing"
	"time"
)

var (
	benchCC      = []byte("public, max-age=60, stale-while-revalidate=30")
	benchDate    = []byte("Sun, 06 Nov 1994 08:49:37 GMT")
	benchRFC850  = []byte("Sunday, 06-Nov-94 08:49:37 GMT")
	benchINM     = []byte(`"v1-aaaa", W/"v2-bbbb", "v3-cccc"`)
	benchETag    = []byte(`"v3-cccc"`)
	benchReqCC   = []byte("max-age=0")
	sinkState    State
	sinkBool     bool
	sinkDuration time.Duration
)

func BenchmarkParseCacheControl(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchCC)))
	var d Directives
	for b.Loop() {
		d.Reset()
		d.Parse(benchCC)
	}
	sinkBool = d.Public
}

func BenchmarkParseHTTPDate(b *testing.B) {
	for _, bc := range []struct {
		name string
		in   []byte
	}{{"IMF-fixdate", benchDate}, {"RFC850", benchRFC850}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var t time.Time
			for b.Loop() {
				t, sinkBool = ParseHTTPDate(bc.in)
			}
			sinkDuration = time.Duration(t.Unix())
		})
	}
}

func BenchmarkClassify(b *testing.B) {
	b.ReportAllocs()
	var req Directives
	req.Reset()
	req.Parse(benchReqCC)
	for b.Loop() {
		sinkState = Classify(70*time.Second, 60*time.Second, 30*time.Second, time.Hour, &req)
	}
}

func BenchmarkETagMatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkBool = ETagMatch(benchINM, benchETag)
	}
}

// BenchmarkHit is the whole per-hit sequence the proxy runs on a stored entry.
func BenchmarkHit(b *testing.B) {
	b.ReportAllocs()
	stored := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	now := stored.Add(70 * time.Second)
	var req Directives
	buf := make([]byte, 0, 16)
	for b.Loop() {
		req.Reset()
		req.Parse(benchReqCC)
		age := CurrentAge(5*time.Second, stored, now)
		sinkState = Classify(age, 60*time.Second, 30*time.Second, time.Hour, &req)
		sinkBool = NotModified(benchINM, nil, benchETag, benchDate)
		buf = AppendAge(buf[:0], age)
	}
}
