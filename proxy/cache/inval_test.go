package cache

import (
	"bytes"
	"testing"
)

// TestInvalidationTableRoundTrip: what is saved is what is loaded.
func TestInvalidationTableRoundTrip(t *testing.T) {
	iv := newInvalidations()
	iv.InvalidateURL(7, false)
	iv.InvalidateURL(99, true)
	iv.InvalidateTag([]byte("news"), false)
	iv.InvalidateAll()
	b := iv.encode()
	got := newInvalidations()
	if err := got.decode(b); err != nil {
		t.Fatal(err)
	}
	// The clock is max(now, saved), so only the slots must match.
	if !bytes.Equal(got.encode()[12:], b[12:]) {
		t.Fatal("decoded table encodes differently")
	}
	if got.clock.Load() < iv.clock.Load() {
		t.Fatal("the loaded clock went back")
	}
	if dead, _ := got.Verdict(got.Global.Load()-1, 12345, nil); !dead {
		t.Fatal("an entry fetched before the saved global watermark is alive")
	}
}

// FuzzInvalidationDecode: a damaged table file is an error, never a
// panic, and never lowers what a table already holds.
func FuzzInvalidationDecode(f *testing.F) {
	iv := newInvalidations()
	iv.InvalidateURL(1, false)
	iv.InvalidateTag([]byte("t"), true)
	f.Add(iv.encode())
	f.Add([]byte("SHI1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		x := newInvalidations()
		x.InvalidateURL(5, false)
		before := x.url[5].hard.Load()
		_ = x.decode(b)
		if x.url[5].hard.Load() < before {
			t.Fatal("decode lowered a slot")
		}
	})
}
