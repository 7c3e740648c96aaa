package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	brrr "github.com/molecule-man/go-brrr"

	"github.com/shield-proxy/shield/config"
)

// compressEnv is a shield whose route compresses with [br, gzip] in front
// of the demo origin.
func compressEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, func(c *shieldConfig) {
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Routes[0].Compress.Codings = []string{"br", "gzip"}
		}))
	})
}

// codedAnswer is one answer as curl saw it: the head of the final
// response and the body bytes curl wrote (decoded with --compressed).
type codedAnswer struct {
	status int
	header http.Header
	body   []byte
}

// curl1 runs curl over HTTP/1.1 against shield: the head is dumped to a
// file and the body written to stdout untouched (binary for a coded
// answer without --compressed).
func (e *env) curl1(t *testing.T, path string, args ...string) codedAnswer {
	t.Helper()
	headFile := t.TempDir() + "/head"
	cmd := append([]string{"-sS", "--http1.1", "--max-time", "10", "-D", headFile}, args...)
	cmd = append(cmd, "http://"+e.cfg.Listen+path)
	out, err := exec.Command("curl", cmd...).Output()
	if err != nil {
		t.Fatalf("curl %s: %v", strings.Join(cmd, " "), err)
	}
	headBytes, err := os.ReadFile(headFile)
	if err != nil {
		t.Fatal(err)
	}
	head := string(headBytes)
	a := codedAnswer{header: http.Header{}, body: out}
	lines := strings.Split(strings.TrimSpace(head), "\r\n")
	f := strings.Fields(lines[0])
	if len(f) < 2 {
		t.Fatalf("curl status line %q", lines[0])
	}
	a.status, _ = strconv.Atoi(f[1])
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		a.header.Add(k, strings.TrimSpace(v))
	}
	return a
}

// decodeCoded decodes a body by its Content-Encoding.
func decodeCoded(t *testing.T, ce string, b []byte) []byte {
	t.Helper()
	switch ce {
	case "":
		return b
	case "gzip":
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		return out
	case "br":
		out, err := brrr.Decompress(b)
		if err != nil {
			t.Fatalf("br body: %v", err)
		}
		return out
	}
	t.Fatalf("Content-Encoding %q", ce)
	return nil
}

// TestCompressCurl: curl with --compressed and with explicit
// Accept-Encoding values gets, from one origin fetch, the coding it
// accepts — Content-Encoding, Vary: Accept-Encoding and a per-coding
// ETag — and a body that decodes to the origin's bytes; If-None-Match
// with each coding's ETag is a 304 for that coding; a Range addresses the
// coded bytes; a URL purge reaches every coding.
func TestCompressCurl(t *testing.T) {
	t.Parallel()
	e := compressEnv(t)
	u := target("/c", "size", "20000", "etag", "1")
	ident := e.curl1(t, u, "-H", "Accept-Encoding: identity")
	if ident.status != 200 || len(ident.body) != 20000 || ident.header.Get("Content-Encoding") != "" {
		t.Fatalf("identity: %d, %d bytes, Content-Encoding %q", ident.status, len(ident.body), ident.header.Get("Content-Encoding"))
	}
	tests := []struct {
		name string
		args []string
		ce   string // Content-Encoding sent
	}{
		{"--compressed", []string{"--compressed"}, "br"}, // curl with brotli sends deflate, gzip, br, zstd
		{"gzip", []string{"-H", "Accept-Encoding: gzip"}, "gzip"},
		{"br", []string{"-H", "Accept-Encoding: br"}, "br"},
		{"gzip;q=0, br", []string{"-H", "Accept-Encoding: gzip;q=0, br"}, "br"},
		{"gzip;q=1, br;q=0.5", []string{"-H", "Accept-Encoding: gzip;q=1, br;q=0.5"}, "gzip"},
		{"identity", []string{"-H", "Accept-Encoding: identity"}, ""},
		{"none", []string{"-H", "Accept-Encoding:"}, ""},
		{"*", []string{"-H", "Accept-Encoding: *"}, "br"},
		{"identity;q=0", []string{"-H", "Accept-Encoding: identity;q=0"}, ""},
	}
	coded := map[string][]byte{}
	for _, tt := range tests {
		a := e.curl1(t, u, tt.args...)
		ce := a.header.Get("Content-Encoding")
		if a.status != 200 || ce != tt.ce {
			t.Errorf("%s: %d, Content-Encoding %q; want 200, %q", tt.name, a.status, ce, tt.ce)
			continue
		}
		if !strings.Contains(a.header.Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s: Vary %q lacks Accept-Encoding", tt.name, a.header.Get("Vary"))
		}
		wantETag := `"v1"`
		if ce != "" {
			wantETag = `"v1-` + ce + `"`
		}
		if got := a.header.Get("ETag"); got != wantETag {
			t.Errorf("%s: ETag %q, want %s", tt.name, got, wantETag)
		}
		body := a.body
		if tt.name != "--compressed" {
			body = decodeCoded(t, ce, a.body)
			if ce != "" {
				coded[ce] = a.body
				if got := a.header.Get("Content-Length"); got != strconv.Itoa(len(a.body)) {
					t.Errorf("%s: Content-Length %s, want the coded length %d", tt.name, got, len(a.body))
				}
			}
		}
		if !bytes.Equal(body, ident.body) {
			t.Errorf("%s: body decodes to %d bytes differing from the origin's %d", tt.name, len(body), len(ident.body))
		}
	}
	e.wantOriginCount("/c", 1)
	if len(coded["gzip"]) >= len(ident.body) || len(coded["br"]) >= len(ident.body) {
		t.Errorf("coded sizes gzip %d, br %d: not smaller than identity %d", len(coded["gzip"]), len(coded["br"]), len(ident.body))
	}

	// 304 per coding, and a validator of one coding is not another's.
	for _, ce := range []string{"identity", "gzip", "br"} {
		etag := `"v1"`
		if ce != "identity" {
			etag = `"v1-` + ce + `"`
		}
		if a := e.curl1(t, u, "-H", "Accept-Encoding: "+ce, "-H", "If-None-Match: "+etag); a.status != 304 {
			t.Errorf("%s with If-None-Match %s: %d, want 304", ce, etag, a.status)
		}
		if ce != "identity" {
			if a := e.curl1(t, u, "-H", "Accept-Encoding: "+ce, "-H", `If-None-Match: "v1"`); a.status != 200 {
				t.Errorf(`%s with the identity's If-None-Match "v1": %d, want 200`, ce, a.status)
			}
		}
	}
	// Ranges address the coded bytes.
	for _, ce := range []string{"gzip", "br"} {
		a := e.curl1(t, u, "-H", "Accept-Encoding: "+ce, "-H", "Range: bytes=0-99")
		want := "bytes 0-99/" + strconv.Itoa(len(coded[ce]))
		if a.status != 206 || a.header.Get("Content-Range") != want || !bytes.Equal(a.body, coded[ce][:100]) {
			t.Errorf("%s Range: %d, Content-Range %q, %d bytes; want 206, %q, the coded body's first 100", ce, a.status, a.header.Get("Content-Range"), len(a.body), want)
		}
		a = e.curl1(t, u, "-H", "Accept-Encoding: "+ce, "-H", "Range: bytes=0-99", "-H", `If-Range: "v1"`)
		if a.status != 200 || !bytes.Equal(a.body, coded[ce]) {
			t.Errorf("%s Range with If-Range of the identity's ETag: %d, want 200 with the whole coded body", ce, a.status)
		}
	}
	e.wantOriginCount("/c", 1)

	// A URL purge reaches every coding: each one's next answer comes
	// from the new fetch (the demo origin numbers its answers: n=2).
	e.purge("url="+url.QueryEscape(e.absURL(u)), http.StatusOK)
	for _, ce := range []string{"gzip", "br", "identity"} {
		a := e.curl1(t, u, "-H", "Accept-Encoding: "+ce)
		want := ce
		if ce == "identity" {
			want = ""
		}
		var res resource
		if err := json.Unmarshal(decodeCoded(t, want, a.body), &res); err != nil || res.N != 2 {
			t.Errorf("%s after purge: n=%d (%v), want 2: a coding outlived the purge", ce, res.N, err)
		}
	}
	e.wantOriginCount("/c", 2)
}

// TestCompressChromium: headless Chromium loads a page through shield
// whose script fetches JSON over the compressing route; the DOM shows
// the answer was coded (br or gzip, whichever this Chromium offers
// first) and decoded to the origin's 30000 bytes.
func TestCompressChromium(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	e := compressEnv(t)
	src := target("/data.json", "size", "30000")
	page := target("/page.html", "page", "fetch", "src", src)
	dom := string(headless(t, bin, "http://"+e.cfg.Listen+page, "--dump-dom", "--virtual-time-budget=10000"))
	m := regexp.MustCompile(`status=200 ce=(gzip|br) len=30000`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("DOM lacks a coded answer decoded to 30000 bytes:\n%.2000s", dom)
	}
	// The same JSON in that coding, from the cache Chromium's fetch filled.
	a := e.curl1(t, src, "-H", "Accept-Encoding: "+m[1])
	if a.header.Get("Content-Encoding") != m[1] || len(a.body) >= 30000 || len(decodeCoded(t, m[1], a.body)) != 30000 {
		t.Errorf("JSON in %s: Content-Encoding %q, %d bytes", m[1], a.header.Get("Content-Encoding"), len(a.body))
	}
	e.wantOriginCount("/data.json", 1)
}

// TestCompressHTTP2: over HTTP/2 (TLS with ALPN, as browsers use it)
// curl --compressed gets the coded answer, decoded to the origin's
// bytes, and a gzip-only client gets gzip, from one origin fetch.
func TestCompressHTTP2(t *testing.T) {
	t.Parallel()
	h := newH2Env(t, true, with(func(c *config.Config) {
		c.Routes[0].Compress.Codings = []string{"br", "gzip"}
	}))
	u := target("/h2c", "size", "20000")
	ident := h.curl(u, false, "-H", "Accept-Encoding: identity")
	for _, tt := range []struct {
		args []string
		ce   string
	}{
		{[]string{"--compressed"}, "br"},
		{[]string{"--compressed", "-H", "Accept-Encoding: gzip"}, "gzip"},
	} {
		a := h.curl(u, false, tt.args...)
		if a.heads[len(a.heads)-1] != "HTTP/2 200" || a.header.Get("Content-Encoding") != tt.ce || a.body != ident.body || len(ident.body) != 20000 {
			t.Errorf("%v: %v, Content-Encoding %q, %d bytes; want HTTP/2 200, %s, the origin's %d", tt.args, a.heads, a.header.Get("Content-Encoding"), len(a.body), tt.ce, len(ident.body))
		}
	}
	if n := originCount(t, h.env, "/h2c"); n != 1 {
		t.Errorf("origin fetches = %d, want 1", n)
	}
}
