package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// rawCtx parses a raw request as the server would, or reports that the
// server's parser refuses it (which is a 400 too).
func rawCtx(t *testing.T, raw string) (*fasthttp.RequestCtx, bool) {
	t.Helper()
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		return nil, false
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, clientAddr, nil)
	return ctx, true
}

// TestRefusedRequests: requests an origin could read differently from
// the key are 400, before any origin sees them.
func TestRefusedRequests(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	p := newTestProxy(t, o.addr(), nil)
	for name, raw := range map[string]string{
		"space in field name": "GET / HTTP/1.1\r\nHost: example.com\r\nContent Length: 5\r\n\r\n",
		"colon-less garbage":  "GET / HTTP/1.1\r\nHost: example.com\r\nX\x01Y: 1\r\n\r\n",
		"dot-dot":             "GET /public/../private/me HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"dot":                 "GET /public/./x HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"encoded dot-dot":     "GET /public/%2e%2E/private/me HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"encoded slash dots":  "GET /public%2F..%2Fprivate HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"encoded dot segment": "GET /public/%2E/x HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"backslash":           "GET /public\\..\\private HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"encoded backslash":   "GET /public%5c..%5cprivate HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"trailing dot-dot":    "GET /public/.. HTTP/1.1\r\nHost: example.com\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			ctx, ok := rawCtx(t, raw)
			if !ok {
				t.Logf("refused by the request parser itself (a 400)")
				return
			}
			before := o.hits.Load()
			if s := summary(serve(p, ctx)); s.code != 400 || !strings.Contains(s.cacheStatus, "detail=generated") {
				t.Fatalf("%q = %+v, want shield's own 400", raw, s)
			}
			if o.hits.Load() != before {
				t.Fatal("the origin saw a refused request")
			}
		})
	}
}

// TestEncodedSlashIsAPathCharacter: %2F is routed, keyed and forwarded
// as an encoded slash (npm's "/@scope%2fname", GitLab's
// "group%2Fproject"): the origin sees the client's target in its normal
// form ("%2f" as "%2F", "%2e" as "."), "/a%2Fb" and "/a/b" are two entries,
// and a path whose route an encoded slash would change is refused.
func TestEncodedSlashIsAPathCharacter(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "uri=%s n=%d", r.RequestURI, n)
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) {
		admin := *c.Routes[0]
		admin.Name, admin.PathPrefix = "admin", "/admin/"
		c.Routes = append([]*config.Route{&admin}, c.Routes...)
	})
	for _, path := range []string{"/@scope%2fname", "/api/v4/projects/group%2Fproject", "/a%2Fb", "/a/b", "/a.%2e"} {
		s := summary(serve(p, get(t, path)))
		if want := normalTarget(path); s.code != 200 || !strings.HasPrefix(s.body, "uri="+want+" ") {
			t.Fatalf("GET %s = %+v, want the origin to see %s", path, s, want)
		}
		if again := summary(serve(p, get(t, path))); again.body != s.body || !strings.Contains(again.cacheStatus, "hit") {
			t.Fatalf("GET %s again = %+v, want a hit of %q", path, again, s.body)
		}
	}
	before := o.hits.Load()
	for _, path := range []string{"/admin%2Fx", "/%61dmin%2Fx"} {
		if s := summary(serve(p, get(t, path))); s.code != 400 || !strings.Contains(s.body, "encoded slash") {
			t.Errorf("GET %s = %+v, want 400: read with '/', it belongs to route admin", path, s)
		}
	}
	if o.hits.Load() != before {
		t.Fatal("the origin saw a refused request")
	}
}

// TestConnectionNominatedHeadersDoNotKey: a key header (or Vary header)
// nominated by Connection never reaches the origin, so it must not
// choose the variant the answer is stored under either.
func TestConnectionNominatedHeadersDoNotKey(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "api=%q", r.Header.Get("X-Api-Version"))
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.KeyHeaders = []string{"X-Api-Version"} })
	serve(p, get(t, "/v", "X-Api-Version: 2", "Connection: keep-alive, X-Api-Version"))
	honest := summary(serve(p, get(t, "/v", "X-Api-Version: 2")))
	if honest.body != `api="2"` {
		t.Fatalf("honest request = %+v: poisoned by a Connection-nominated header", honest)
	}
}

// TestHostCanonicalForOrigin: the origin sees the Host the key uses.
func TestHostCanonicalForOrigin(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "host=%s", r.Host)
	})
	p := newTestProxy(t, o.addr(), nil)
	for _, host := range []string{"EXAMPLE.com.", "example.com:80", "Example.Com"} {
		ctx, ok := rawCtx(t, "GET /h HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		if !ok {
			t.Fatalf("Host %q refused by the parser", host)
		}
		if s := summary(serve(p, ctx)); s.code != 200 || s.body != "host=example.com" {
			t.Fatalf("Host %q: answer %+v, want the origin to see example.com", host, s)
		}
	}
}

// TestIgnoredQueryCannotHideParameters: an ignored parameter carrying ';'
// stays in the key.
func TestIgnoredQueryCannotHideParameters(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "q=%s", r.URL.RawQuery)
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Routes[0].Cache.IgnoreQuery = []string{"utm_source"} })
	serve(p, get(t, "/q?utm_source=x;callback=evil"))
	if s := summary(serve(p, get(t, "/q?utm_source=y"))); strings.Contains(s.body, "evil") {
		t.Fatalf("plain request got the poisoned answer: %+v", s)
	}
}

// TestCleanPath: encoded slashes and dots are path characters; dot
// segments and backslashes, however spelt, are not.
func TestCleanPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/a/b": true, "/a%2Fb": true, "/a%2fb/": true, "/@scope%2fname": true, "/a%2Eb": true,
		"/...": true, "/.a": true, "/a..": true, "/%2e%2e%2e": true, "/%2F": true, "/%": true, "/%2": true,
		"/a/../b": false, "/a/./b": false, "/..": false, "/.": false, "/%2e%2E/": false, "/.%2e": false,
		"/a%2F..%2Fb": false, "/a%2f.": false, "%2e%2e%2Fx": false, "/a\\b": false, "/a%5cb": false, "/a%5C": false,
	} {
		if got := cleanPath([]byte(p)); got != want {
			t.Errorf("cleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// FuzzCleanPath: no accepted path has a dot segment once percent-decoded.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/a/../b", "/%2e%2e/", "/a%2fb", "/..", "/.a/..b", "/%", "/%2", "/a%2F..%2Fb", "/%2E%2e%2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !cleanPath([]byte(p)) {
			return
		}
		dec, err := url.PathUnescape(p)
		if err != nil {
			return
		}
		for _, seg := range strings.Split(dec, "/") {
			if seg == "." || seg == ".." || strings.Contains(seg, "\\") {
				t.Fatalf("cleanPath(%q) accepted; decoded %q has segment %q", p, dec, seg)
			}
		}
	})
}

// TestIgnoredQueryNotForwarded: a cache fetch — a fill or a background
// refresh — sends no parameter the key ignores, so an origin that echoes
// utm_source cannot store one client's value for everybody; a
// pass-through request (never stored) is forwarded as sent, and
// forward_ignored_query restores the old behaviour.
func TestIgnoredQueryNotForwarded(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "uri=%s", r.RequestURI)
	})
	ignore := func(c *config.Config) { c.Routes[0].Cache.IgnoreQuery = []string{"utm_source", "fbclid"} }
	p := newTestProxy(t, o.addr(), ignore)
	for _, tt := range []struct{ target, want string }{
		{"/e?utm_source=%3Cscript%3E&a=1", "uri=/e?a=1"},
		{"/e?a=1&utm_source=other", "uri=/e?a=1"}, // a hit of the same answer
		{"/f?utm_source=x&fbclid=y", "uri=/f"},
		{"/g%2Fh?b=2&utm_source=x&a=1", "uri=/g%2Fh?b=2&a=1"},
		{"/k?b=1", "uri=/k?b=1"},
	} {
		if s := summary(serve(p, get(t, tt.target))); s.body != tt.want {
			t.Errorf("GET %s = %+v, want the origin to have seen %q", tt.target, s, tt.want)
		}
	}
	if s := summary(serve(p, newCtx(t, request("POST", "/e?utm_source=x")))); s.body != "uri=/e?utm_source=x" {
		t.Errorf("POST = %+v, want the target forwarded as sent", s)
	}

	plant(t, p, "/r?a=1", time.Hour+time.Minute, time.Hour, time.Hour, 0, "")
	before := o.hits.Load()
	serve(p, get(t, "/r?a=1&utm_source=evil"))
	waitUntil(t, "the background refresh reaches the origin", func() bool { return o.hits.Load() > before })
	if uri := o.last(t).uri; uri != "/r?a=1" {
		t.Errorf("background refresh sent %q, want /r?a=1", uri)
	}

	fwd := newTestProxy(t, o.addr(), func(c *config.Config) { ignore(c); c.Routes[0].Cache.ForwardIgnoredQuery = true })
	if s := summary(serve(fwd, get(t, "/e?utm_source=x&a=1"))); s.body != "uri=/e?utm_source=x&a=1" {
		t.Errorf("forward_ignored_query: %+v, want the target as sent", s)
	}
}
