//go:build !race

package proxy

import "testing"

// TestCompressedHitAllocs: a hit of a coded sibling allocates nothing,
// like an identity hit (TestHitAllocs), and is served coded.
func TestCompressedHitAllocs(t *testing.T) {
	for _, ae := range []string{"identity", "gzip", "br"} {
		t.Run(ae, func(t *testing.T) {
			p, ctx, n := warmCoded(t, ae)
			run := codedHits(t, p.Handler(), ctx, []byte(ae), n)
			if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
				t.Errorf("%s hit = %v allocs/op, want 0", ae, allocs)
			}
			want := ae
			if ae == "identity" {
				want = ""
			}
			if got := string(ctx.Response.Header.Peek("Content-Encoding")); got != want {
				t.Errorf("Content-Encoding %q, want %q", got, want)
			}
		})
	}
}
