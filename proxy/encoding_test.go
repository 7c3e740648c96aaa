package proxy

import (
	"bytes"
	"testing"
)

// FuzzPickPlain: pickPlain, canonicalEncoding's one-pass fast path,
// picks what the general loop over accepts picks whenever it answers.
func FuzzPickPlain(f *testing.F) {
	for _, s := range []string{"", "gzip", "br", "gzip, br", "gzip, deflate, br", "BR , Gzip", "identity", "deflate",
		"gzip;q=0, br", "*", "br,", ",,gzip", " br ", "gzip, br, zstd", "xbr, gzipx", "br\t,gzip"} {
		f.Add(s)
	}
	routes := []*route{
		{codings: [][]byte{[]byte("br"), []byte("gzip")}},
		{codings: [][]byte{[]byte("gzip")}},
		{codings: [][]byte{[]byte("zstd"), []byte("br"), []byte("gzip")}},
	}
	f.Fuzz(func(t *testing.T, ae string) {
		for _, r := range routes {
			got := r.pickPlain([]byte(ae))
			if got == nil {
				continue
			}
			var want []byte
			for _, c := range r.codings {
				if accepts([]byte(ae), c) {
					want = c
					break
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("codings %q, Accept-Encoding %q: pickPlain %q, accepts loop %q", r.codings, ae, got, want)
			}
		}
	})
}
