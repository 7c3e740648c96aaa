//go:build !race

package cache

import (
	"io"
	"testing"
)

// (The race detector makes sync.Pool drop items, hence the build tag.)

// TestStreamAllocs: reading an entry's meta and streaming its body
// allocates nothing once the reader pool is warm.
func TestStreamAllocs(t *testing.T) {
	s := newTestStore(t)
	enc, _ := streamEntry(300<<10, 100)
	s.set([]byte("k"), enc)
	dst := make([]byte, 0, 64<<10)
	allocs := testing.AllocsPerRun(100, func() {
		var r *PieceReader
		dst, _, r, _ = s.getStream(dst, []byte("k"), 1)
		if r == nil {
			t.Fatal("not streamed")
		}
		_, _ = r.WriteTo(io.Discard)
		r.Close()
	})
	if allocs > 0 {
		t.Errorf("%v allocs per streamed read, want 0", allocs)
	}
}
