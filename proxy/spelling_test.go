package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestEquivalentSpellingsOneResource: spellings of one target that
// differ only in percent-encoded unreserved characters or in the case of
// an escape's hex digits (RFC 3986 §6.2.2) are one resource: one fetch,
// one entry, and a purge by any spelling reaches every spelling — a
// client cannot keep a purged object alive by asking for it as
// "/%61pi/x". The origin sees the normalised target.
func TestEquivalentSpellingsOneResource(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "uri=%s n=%d", r.RequestURI, n)
	})
	p := newTestProxy(t, o.addr(), nil)
	for _, c := range []struct {
		spellings []string
		purge     string
		origin    string
	}{
		{[]string{"/%61pi/x", "/api/x", "/api/%78", "/%61%70%69/%78"}, "/api/x", "/api/x"},
		{[]string{"/api/x", "/%61pi/x"}, "/%61pi/x", "/api/x"},
		{[]string{"/f/a%2fb", "/f/a%2Fb", "/f/%61%2fb"}, "/f/a%2fb", "/f/a%2Fb"},
		{[]string{"/q?%61=%7e&b=%2f", "/q?a=~&b=%2F"}, "/q?a=~&b=%2f", "/q?a=~&b=%2F"},
		{[]string{"/t/%7E%2D%2E%5F", "/t/~-._"}, "/t/~-._", "/t/~-._"},
	} {
		first := summary(serve(p, get(t, c.spellings[0])))
		if first.code != 200 || !strings.HasPrefix(first.body, "uri="+c.origin+" ") {
			t.Fatalf("GET %s = %+v, want the origin to see %s", c.spellings[0], first, c.origin)
		}
		for _, s := range c.spellings {
			if got := summary(serve(p, get(t, s))); got.body != first.body || !strings.Contains(got.cacheStatus, "hit") {
				t.Fatalf("GET %s = %+v, want a hit of %q (one resource)", s, got, first.body)
			}
		}
		if _, err := p.Purge(url.Values{"url": {"http://" + testHost + c.purge}}); err != nil {
			t.Fatal(err)
		}
		for _, s := range c.spellings {
			if got := summary(serve(p, get(t, s))); got.body == first.body {
				t.Fatalf("GET %s after purging %s = %+v: the purged answer", s, c.purge, got)
			}
		}
	}
}

// TestPurgeReachesEverySpelling: the purge evasion, in its simplest form —
// "/%61pi/x" cached, "/api/x" purged, "/%61pi/x" must not be the purged
// answer.
func TestPurgeReachesEverySpelling(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "v%d", n)
	})
	p := newTestProxy(t, o.addr(), nil)
	for _, evasive := range []string{"/%61pi/x", "/api/%78", "/%61pi/x?%6b=1", "/b/%2f", "/q?a=%2f"} {
		target := "/api/x"
		switch {
		case strings.HasPrefix(evasive, "/%61pi/x?"):
			target = "/api/x?k=1"
		case evasive == "/b/%2f":
			target = "/b/%2F"
		case evasive == "/q?a=%2f":
			target = "/q?a=%2F"
		}
		old := summary(serve(p, get(t, evasive)))
		if again := summary(serve(p, get(t, evasive))); again.body != old.body {
			t.Fatalf("GET %s again = %+v, want a hit of %q", evasive, again, old.body)
		}
		if _, err := p.Purge(url.Values{"url": {"http://" + testHost + target}}); err != nil {
			t.Fatal(err)
		}
		if after := summary(serve(p, get(t, evasive))); after.body == old.body {
			t.Errorf("GET %s after purging %s = %+v: the purged answer is still served", evasive, target, after)
		}
	}
}

// FuzzEquivalentSpellings: two spellings of a target that normalise
// equal — here one and a respelling of it with unreserved characters
// encoded and escapes' hex digits in either case — get the same verdict
// from sanitize and, when accepted, the same request target and the same
// cache key; the normal form is idempotent and is what appendNormalEscapes
// and the plain reference (referenceNormal) both write.
func FuzzEquivalentSpellings(f *testing.F) {
	for _, s := range []string{"/api/x", "/%61pi/x?%6b=1", "/a%2fb/%7E", "/%%361", "/q?a=%2f&b=%zz", "/a.b/%2e%2e", "/%", "/x%4"} {
		f.Add(s, uint64(0x5a5a5a5a5a5a5a5a))
	}
	p := newTestProxy(f, "127.0.0.1:1", nil)
	rte := p.rt.Load().routes[0]
	f.Fuzz(func(t *testing.T, target string, seed uint64) {
		n := normalTarget(target)
		if again := normalTarget(n); again != n {
			t.Fatalf("normal form of %q is %q, of that %q: not idempotent", target, n, again)
		}
		if ref := referenceNormal(target); ref != n {
			t.Fatalf("normal form of %q is %q, the reference says %q", target, n, ref)
		}
		if path, _, _ := strings.Cut(target, "?"); cleanPath([]byte(path)) != cleanPath([]byte(normalTarget(path))) {
			t.Fatalf("cleanPath(%q) and of its normal form disagree", path)
		}
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \t\r\n#") {
			return
		}
		other := respell(n, seed)
		if normalTarget(other) != n {
			t.Fatalf("respelling %q of %q normalises to %q", other, n, normalTarget(other))
		}
		keyOf := func(s string) (string, string, bool) {
			ctx, ok := rawCtx(t, "GET "+s+" HTTP/1.1\r\nHost: "+testHost+"\r\n\r\n")
			if !ok {
				return "", "", false
			}
			if msg, _ := sanitizeHost(ctx, false); msg != "" {
				return msg, "", true
			}
			var sc scratch
			return string(ctx.Request.Header.RequestURI()), string(rte.appendKey(nil, ctx, &sc, 0)), true
		}
		t1, k1, ok1 := keyOf(target)
		t2, k2, ok2 := keyOf(other)
		if !ok1 || !ok2 {
			return
		}
		if t1 != t2 || k1 != k2 {
			t.Fatalf("%q and %q: targets %q and %q, keys %q and %q", target, other, t1, t2, k1, k2)
		}
	})
}

// respell writes the normal-form target n another way: each unreserved
// character percent-encoded when the next bit of seed says so, each hex
// digit of an escape in lower case when the next bit says so.
func respell(n string, seed uint64) string {
	var b strings.Builder
	bit := func() bool { seed = seed>>1 | seed<<63; return seed&1 == 1 }
	for i := 0; i < len(n); i++ {
		switch c := n[i]; {
		case c == '%' && i+2 < len(n):
			b.WriteByte('%')
			for _, h := range []byte{n[i+1], n[i+2]} {
				if bit() && h >= 'A' {
					h |= 0x20
				}
				b.WriteByte(h)
			}
			i += 2
		case unreserved[c] && bit():
			fmt.Fprintf(&b, "%%%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
