package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// sanitizeReference is sanitize as it was before its fast paths (one
// PeekBytes for Connection, AppendHost on every request, cleanPath's
// full scan): the fast paths must change nothing it does.
func sanitizeReference(ctx *fasthttp.RequestCtx) (msg string) {
	h := &ctx.Request.Header
	for k := range h.All() {
		if !cachekey.IsToken(k) {
			return "invalid header field name"
		}
	}
	if conn := h.PeekBytes(httpx.HConnection); len(conn) > 0 && nominatesFields(conn) {
		var names [][]byte
		for item := range bytes.SplitSeq(conn, []byte(",")) {
			item = bytes.TrimSpace(item)
			if len(item) > 0 && !isConnectionOption(item) {
				names = append(names, bytes.Clone(item))
			}
		}
		for _, n := range names {
			h.DelBytes(n)
		}
	}
	var buf [256]byte
	scheme := schemeHTTP
	if ctx.IsTLS() {
		scheme = schemeHTTPS
	}
	host := h.Host()
	if canon := cachekey.AppendHost(buf[:0], scheme, host); !bytes.Equal(canon, host) && len(canon) > 0 {
		h.SetHostBytes(canon)
	}
	if !cleanPathFull(ctx.Request.URI().PathOriginal()) {
		return "path with dot segments or backslashes"
	}
	if t := string(h.RequestURI()); strings.Contains(t, "%") {
		ctx.Request.SetRequestURI(referenceNormal(t))
	}
	return ""
}

// referenceNormal is the normal percent-encoding of RFC 3986 §6.2.2.1-2,
// written plainly: unreserved characters decoded, other escapes upper
// case, a '%' that starts no escape written %25.
func referenceNormal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		v, err := strconv.ParseUint(s[i+1:min(i+3, len(s))], 16, 8)
		if i+3 > len(s) || err != nil || strings.ContainsAny(s[i+1:i+3], "+-") {
			b.WriteString("%25")
			continue
		}
		if c := byte(v); 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
		i += 2
	}
	return b.String()
}

// sanitizeBoth parses raw twice and sanitizes one copy with sanitize,
// the other with sanitizeReference; ok is false when the parser refuses
// raw. disableNormalizing parses as a server with
// DisableHeaderNamesNormalizing would.
func sanitizeBoth(t *testing.T, raw string, disableNormalizing bool) (got, want *fasthttp.RequestCtx, gotMsg, wantMsg string, ok bool) {
	t.Helper()
	parse := func() *fasthttp.RequestCtx {
		var req fasthttp.Request
		if disableNormalizing {
			req.Header.DisableNormalizing()
		}
		if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return nil
		}
		ctx := new(fasthttp.RequestCtx)
		ctx.Init(&req, clientAddr, nil)
		return ctx
	}
	if got = parse(); got == nil {
		return nil, nil, "", "", false
	}
	want = parse()
	// As serveRequest calls it: the one-pass host check first.
	gotMsg, present := sanitizeHost(got, plainValidHost(got.Request.Header.Host()))
	wantMsg = sanitizeReference(want)
	if gotMsg == "" {
		// A tracked field the request still has is marked present: a
		// hit only skips looking up fields that are absent.
		for _, f := range []struct {
			bit  reqFields
			name []byte
		}{{fieldCacheControl, httpx.HCacheControl}, {fieldPragma, httpx.HPragma}, {fieldIfNoneMatch, httpx.HIfNoneMatch}, {fieldIfModSince, httpx.HIfModSince}, {fieldRange, hRange},
			{fieldIfMatch, httpx.HIfMatch}, {fieldIfUnmodSince, httpx.HIfUnmodSince}} {
			if len(got.Request.Header.PeekCanonical(f.name)) > 0 && present&f.bit == 0 {
				t.Fatalf("%q: %s is in the request, sanitize did not mark it", raw, f.name)
			}
		}
	}
	return got, want, gotMsg, wantMsg, true
}

// TestSanitizeFastPathsAgree: on requests that take each fast path and
// each fallback — plain paths, dot segments, encodings, hosts with
// ports, upper case and trailing dots, Connection fields in every
// position — sanitize refuses what the reference refuses and leaves the
// same request otherwise.
func TestSanitizeFastPathsAgree(t *testing.T) {
	for _, raw := range sanitizeSeeds {
		sanitizeAgree(t, raw)
	}
}

// FuzzSanitizeFastPaths is TestSanitizeFastPathsAgree on any request the
// parser accepts.
func FuzzSanitizeFastPaths(f *testing.F) {
	for _, raw := range sanitizeSeeds {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { sanitizeAgree(t, raw) })
}

var sanitizeSeeds = []string{
	"GET /hit?id=42 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n",
	"GET /a/.well-known/x HTTP/1.1\r\nHost: Example.COM.\r\n\r\n",
	"GET /a/b HTTP/1.1\r\nHost: Example.com\r\n\r\n",
	"GET /a/../b HTTP/1.1\r\nHost: example.com:80\r\n\r\n",
	"GET /a/. HTTP/1.1\r\nHost: example.com:\r\n\r\n",
	"GET /a%2F..%2Fb HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	"GET /a%2e%2E/b HTTP/1.1\r\nHost: a.:8080\r\n\r\n",
	"GET /a\\b HTTP/1.1\r\nHost: .\r\n\r\n",
	"GET /..a/b.. HTTP/1.1\r\nHost: a..\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: X-Secret, close\r\nX-Secret: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nConnection:\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\nConnection: X-A\r\nX-A: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nconnection: keep-alive, X-A\r\nX-A: 1\r\nCookie: a=b\r\nCookie: c=d\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nX\x01Y: 1\r\nConnection: X-A\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nContent Length: 5\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nCache-Control: no-cache\r\nPragma: no-cache\r\nRange: bytes=0-1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nif-none-match: \"a\"\r\nIF-MODIFIED-SINCE: Tue, 15 Nov 1994 12:45:26 GMT\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Range\r\nRange: bytes=0-1\r\ncache-control: max-age=0\r\n\r\n",
	"GET /%61pi/%7e%2f%2F%3a?%61=%2f&b=%%41 HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /a%2Fb?c=%3D%20 HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /%%361/%4 HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nif-match: \"a\"\r\nIf-Unmodified-Since: Tue, 15 Nov 1994 12:45:26 GMT\r\n\r\n",
}

// sanitizeAgree is the check of TestSanitizeFastPathsAgree, with header
// names normalised (the server's default) and as received.
func sanitizeAgree(t *testing.T, raw string) {
	t.Helper()
	for _, disable := range []bool{false, true} {
		got, want, gotMsg, wantMsg, ok := sanitizeBoth(t, raw, disable)
		if !ok {
			continue
		}
		if gotMsg != wantMsg {
			t.Fatalf("%q (names as received: %v): sanitize says %q, the reference %q", raw, disable, gotMsg, wantMsg)
		}
		if gotMsg != "" {
			continue
		}
		if g, w := got.Request.Header.String(), want.Request.Header.String(); g != w {
			t.Fatalf("%q (names as received: %v): sanitize left\n%q\nthe reference\n%q", raw, disable, g, w)
		}
		if g, w := got.Request.URI().String(), want.Request.URI().String(); g != w {
			t.Fatalf("%q: URI %q, reference %q", raw, g, w)
		}
	}
}

// FuzzCleanPathFast: plainPath never accepts a path cleanPathFull
// refuses, so cleanPath (plainPath, else cleanPathFull) is cleanPathFull.
func FuzzCleanPathFast(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/a/../b", "/%2e%2e/", "/a%2fb", "/..", "/.a/..b", "/%", "/a\\b", ".", "..", "a/..", "/a/.", "/a.b/c.", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if plainPath([]byte(p)) && !cleanPathFull([]byte(p)) {
			t.Fatalf("plainPath(%q) accepts a path cleanPathFull refuses", p)
		}
		if cleanPath([]byte(p)) != cleanPathFull([]byte(p)) {
			t.Fatalf("cleanPath(%q) != cleanPathFull", p)
		}
	})
}

// FuzzPlainHost: a host cachekey.PlainHost accepts is its own
// canonical form under both schemes, so sanitize skips nothing the
// reference would rewrite.
func FuzzPlainHost(f *testing.F) {
	for _, s := range []string{"", ".", "a.", "a..", "example.com", "Example.com", "a:80", "[::1]", "[::1]:443", "[ab]", "a:b:c", "a.:", "xn--bcher-kva.example",
		"a:8080", "a:080", "a.:8080", "A:8080", "a:", ":8080", "a:443", "a:1:2", "127.0.0.1:19601"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !cachekey.PlainHost([]byte(host)) {
			return
		}
		for _, scheme := range [][]byte{schemeHTTP, schemeHTTPS} {
			if canon := cachekey.AppendHost(nil, scheme, []byte(host)); string(canon) != host {
				t.Fatalf("PlainHost(%q) accepted; canonical form (%s) is %q", host, scheme, canon)
			}
		}
	})
}

// FuzzPlainValidHost: a host plainValidHost accepts is one validHost
// accepts and cachekey.PlainHost calls canonical, so serveRequest may
// skip both for it.
func FuzzPlainValidHost(f *testing.F) {
	for _, s := range []string{"", ".", "a.", "a..", "example.com", "Example.com", "a:80", "[::1]", "[::1]:443", "a_b-c.d", "a/b", "a b", "a@b", "\xff",
		"a:8080", "a:123456", "a.:8080", "A:8080", "a:", ":8080", "a:443", "a:1:2", "127.0.0.1:19601"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !plainValidHost([]byte(host)) {
			return
		}
		if !validHost([]byte(host)) || !cachekey.PlainHost([]byte(host)) {
			t.Fatalf("plainValidHost(%q) accepted; validHost %v, PlainHost %v", host, validHost([]byte(host)), cachekey.PlainHost([]byte(host)))
		}
	})
}

// BenchmarkSanitize is sanitize on BenchmarkHit's request (the fast
// paths); BenchmarkSanitizeReference is the previous sanitize on it.
func BenchmarkSanitize(b *testing.B)          { benchmarkSanitize(b, sanitize) }
func BenchmarkSanitizeReference(b *testing.B) { benchmarkSanitize(b, sanitizeReference) }

func benchmarkSanitize(b *testing.B, f func(*fasthttp.RequestCtx) string) {
	ctx := hitCtx(b)
	b.ReportAllocs()
	for b.Loop() {
		if msg := f(ctx); msg != "" {
			b.Fatal(msg)
		}
	}
}
