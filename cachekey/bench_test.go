package cachekey

import (
	"strconv"
	"strings"
	"testing"
)

// benchCase returns rules and parts for a typical request: a host with a
// port, a 20-byte path, 3 query parameters (one ignored), a tenant and one key
// header.
func benchCase(tb testing.TB) (*Rules, *Parts) {
	tb.Helper()
	r, err := NewRules([]string{"utm_source", "utm_medium"}, []string{"X-Device"})
	if err != nil {
		tb.Fatal(err)
	}
	return r, &Parts{
		Namespace: 1,
		Route:     "api",
		Scheme:    []byte("https"),
		Host:      []byte("API.example.com:443"),
		Path:      []byte("/v1/items/1234567890"), // 20 bytes
		Query:     []byte("page=2&utm_source=news&lang=en"),
		Tenant:    []byte("acme"),
		Headers:   [][]byte{[]byte("mobile")},
	}
}

// manyParamsQuery returns a query of n parameters in reverse name order, the
// worst case for insertion sort.
func manyParamsQuery(n int) []byte {
	var b strings.Builder
	for i := n; i > 0; i-- {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString("param")
		b.WriteString(strconv.Itoa(i + 100))
		b.WriteString("=value")
	}
	return []byte(b.String())
}

func BenchmarkAppend(b *testing.B) {
	r, p := benchCase(b)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], r, p)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendManyParams(b *testing.B) {
	r, p := benchCase(b)
	p.Query = manyParamsQuery(30)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], r, p)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendVary(b *testing.B) {
	r, p := benchCase(b)
	buf := make([]byte, 0, 256)
	name, value := []byte("accept-encoding"), []byte("gzip, deflate, br")
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendVary(Append(buf[:0], r, p), name, value)
	}
}

func BenchmarkDigest(b *testing.B) {
	r, p := benchCase(b)
	key := Append(nil, r, p)
	var sink uint64
	b.SetBytes(int64(len(key)))
	b.ReportAllocs()
	for b.Loop() {
		sink += Digest(key)
	}
	_ = sink
}

// BenchmarkAppendHit is the key of the proxy's BenchmarkHit: a plain
// lower-case host (the proxy's canonical Host), a short path and one
// query parameter, no key rules.
func BenchmarkAppendHit(b *testing.B) {
	p := &Parts{Namespace: 1, Route: "test", Scheme: []byte("http"), Host: []byte("example.com"), Path: []byte("/hit"), Query: []byte("id=42")}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], nil, p)
	}
}
