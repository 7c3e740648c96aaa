package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestLargeBody: a body over max_object_size (1MiB) streams through
// intact, with or without Content-Length, and is not cached.
func TestLargeBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const size = 2_000_000
	tests := []struct {
		name, path string
		query      []string
	}{
		{"content-length", "/big", []string{"size", strconv.Itoa(size)}},
		{"chunked", "/big-chunked", []string{"size", strconv.Itoa(size), "chunked", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			u := target(tt.path, tt.query...)
			// The reference: the same URL straight from the origin.
			direct, err := doHTTP(e.client, http.MethodGet, "http://"+e.originAddr+u)
			if err != nil || len(direct.body) != size {
				t.Fatalf("direct GET %s: %v %v", u, direct, err)
			}
			want := decode(t, direct)
			e.originPost("/__origin/reset")

			for i := range 2 {
				r := e.get(u)
				wantForwarded(t, "GET "+u, r)
				if len(r.body) != size {
					t.Fatalf("GET %s #%d: %d bytes, want %d", u, i+1, len(r.body), size)
				}
				if got := decode(t, r); got.Path != tt.path || !samePad(got.Pad, want.Pad) {
					t.Fatalf("GET %s #%d: content differs from the origin's (path %q, pad %d bytes vs %d)",
						u, i+1, got.Path, len(got.Pad), len(want.Pad))
				}
			}
			e.wantOriginCount(tt.path, 2)
		})
	}
}

// samePad reports whether two pads of one URL match: the pad fills the
// body up to size= after an envelope whose length varies a little (the
// digits of n), so the shorter one must be a prefix of the longer one.
func samePad(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return len(b)-len(a) <= 20 && strings.HasPrefix(b, a)
}
