//go:build !race

package cachekey

import "testing"

// TestAppendAllocs asserts the hit path allocates nothing: Append, AppendVary
// and Digest into a reused buffer, for typical requests and for queries up to
// the stack limit of parameters. (The race detector adds allocations, hence
// the build tag.)
func TestAppendAllocs(t *testing.T) {
	r, p := benchCase(t)
	tests := []struct {
		name  string
		query []byte
	}{
		{"typical", p.Query},
		{"no query", nil},
		{"30 params", manyParamsQuery(30)},
		{"32 params", manyParamsQuery(32)},
		{"stack limit", manyParamsQuery(stackParams)},
	}
	name, value := []byte("accept-encoding"), []byte(" gzip ,  br ")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := *p
			q.Query = tt.query
			buf := make([]byte, 0, 4096)
			var sink uint64
			allocs := testing.AllocsPerRun(100, func() {
				buf = Append(buf[:0], r, &q)
				buf = AppendVary(buf, name, value)
				buf = AppendVary(buf, name, nil)
				sink += Digest(buf)
			})
			if allocs != 0 {
				t.Errorf("Append+AppendVary+Digest = %v allocs/op, want 0", allocs)
			}
			_ = sink
		})
	}
}
