//go:build !race

package cache

import (
	"bytes"
	"fmt"
	"testing"
)

// TestAppendEntryAllocs: encoding a stored miss allocates its buffer
// once, body and meta together (the meta appended after a body-sized
// buffer used to move the body again), tags and a head section included.
func TestAppendEntryAllocs(t *testing.T) {
	e := Entry{
		Kind: KindResponse, Status: 200, StoredAt: 1, Lifetime: 3600e9, ETag: []byte(`"v1"`),
		LastModified: []byte("Mon, 01 Jan 2024 00:00:00 GMT"), Body: bytes.Repeat([]byte("b"), 100<<10),
		Tags: bytes.Repeat([]byte("12345678"), 4),
	}
	vary := [][]byte{[]byte("accept-encoding")}
	var hs []Header
	for i := range 12 {
		hs = append(hs, Header{Name: fmt.Appendf(nil, "X-Field-%d", i), Value: bytes.Repeat([]byte("v"), 40*i)})
	}
	enc := AppendEntry(nil, &e, vary, hs)
	if meta, max := len(enc)-len(e.Body), EntryMetaMax(&e, vary, hs); meta > max {
		t.Fatalf("meta %d bytes, above EntryMetaMax %d", meta, max)
	}
	if allocs := testing.AllocsPerRun(20, func() { _ = AppendEntry(nil, &e, vary, hs) }); allocs != 1 {
		t.Fatalf("AppendEntry(nil, …) made %v allocations, want 1", allocs)
	}
}
