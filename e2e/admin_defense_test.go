package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// inlineCode finds what default-src 'self' blocks in a page: inline
// style and script elements, style attributes and event handlers.
var inlineCode = regexp.MustCompile(`(?i)<style|<script|\sstyle=|\son[a-z]+=`)

// adminCSP is what every admin answer must carry.
const adminCSP = "default-src 'self'; frame-ancestors 'none'"

// curlAnswer is one curl exchange, head and body.
type curlAnswer struct {
	status int
	header http.Header
	body   string
}

// curl runs curl -i with args and parses its answer.
func curl(t *testing.T, args ...string) curlAnswer {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-sS", "-i"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	rd := bufio.NewReader(strings.NewReader(string(out)))
	line, _ := rd.ReadString('\n')
	fields := strings.Fields(line)
	if len(fields) < 2 {
		t.Fatalf("curl %v: no status line in %q", args, out)
	}
	a := curlAnswer{header: http.Header{}}
	a.status, _ = strconv.Atoi(fields[1])
	for {
		l, err := rd.ReadString('\n')
		l = strings.TrimRight(l, "\r\n")
		if l == "" || err != nil {
			break
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			a.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	rest := new(strings.Builder)
	_, _ = rd.WriteTo(rest)
	a.body = rest.String()
	return a
}

// wantAdminHeaders fails unless a carries the CSP and nosniff.
func wantAdminHeaders(t *testing.T, what string, a curlAnswer) {
	t.Helper()
	if got := a.header.Get("Content-Security-Policy"); got != adminCSP {
		t.Errorf("%s: Content-Security-Policy %q, want %q", what, got, adminCSP)
	}
	if got := a.header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q, want nosniff", what, got)
	}
}

// adminMetric reads one unlabelled metric from e's admin listener.
func (e *env) adminMetric(name string) float64 {
	e.t.Helper()
	v, ok := promText(e.adminCall(http.MethodGet, "/metrics").body).value(name)
	if !ok {
		e.t.Fatalf("/metrics has no %s", name)
	}
	return v
}

// TestAdminDefends: every admin answer (page, JSON, metrics, stylesheet,
// probes, errors, refusals) carries Content-Security-Policy and nosniff;
// the status page has no inline style or script (the CSP would block
// them) and its stylesheet is served. A POST to /purge or /reload — or
// any other non-GET — that a browser marks as cross-site (Sec-Fetch-Site
// cross-site or same-site, an Origin of another port, scheme or host,
// Origin null) is refused 403 with a message, and nothing is purged or
// reloaded; curl without those fields, and a same-origin request, work.
func TestAdminDefends(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := "http://" + e.cfg.Admin
	const key = "/admin-defends"
	e.get(key)
	wantHit(t, key+" before", e.get(key))

	for _, path := range []string{"/", "/status.json", "/metrics", "/healthz", "/readyz", "/status.css", "/nope", "/reload"} {
		a := curl(t, admin+path)
		wantAdminHeaders(t, "GET "+path, a)
		switch path {
		case "/":
			if m := inlineCode.FindString(a.body); m != "" {
				t.Errorf("status page has inline %q: the CSP blocks it", m)
			}
			if !strings.Contains(a.body, `<link rel="stylesheet" href="/status.css">`) {
				t.Errorf("status page does not link /status.css")
			}
		case "/status.css":
			if a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "text/css") || !strings.Contains(a.body, "border-collapse") {
				t.Errorf("/status.css: %d %q %.80q", a.status, a.header.Get("Content-Type"), a.body)
			}
		}
	}

	purgeURL := admin + "/purge?url=" + url.QueryEscape(e.absURL(key))
	refusedBefore := e.adminMetric("shield_admin_cross_site_refused_total")
	refused := 0
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site: cross-site"},
		{"Sec-Fetch-Site: same-site"},
		{"Origin: null"},
		{"Origin: http://127.0.0.1:1"},
		{"Origin: https://" + e.cfg.Admin},
		{"Origin: http://evil.example", "Sec-Fetch-Site: same-origin"},
	} {
		for _, req := range [][2]string{{"POST", purgeURL}, {"POST", admin + "/reload"}, {"DELETE", purgeURL}} {
			args := []string{"-X", req[0], req[1]}
			for _, h := range hdr {
				args = append(args, "-H", h)
			}
			a := curl(t, args...)
			what := fmt.Sprintf("%s %s %v", req[0], req[1], hdr)
			wantAdminHeaders(t, what, a)
			if a.status != http.StatusForbidden || !strings.Contains(a.body, "cross-site request refused") {
				t.Errorf("%s: %d %q, want 403 cross-site request refused", what, a.status, a.body)
			}
			refused++
		}
	}
	if got := e.adminMetric("shield_admin_cross_site_refused_total") - refusedBefore; got != float64(refused) {
		t.Errorf("shield_admin_cross_site_refused_total +%v, want +%d", got, refused)
	}
	if n := e.adminMetric("shield_purges_total"); n != 0 {
		t.Errorf("shield_purges_total %v after refused purges, want 0", n)
	}
	if n := e.adminMetric("shield_config_reloads_total"); n != 0 {
		t.Errorf("shield_config_reloads_total %v after refused reloads, want 0", n)
	}
	wantHit(t, key+" after refused purges", e.get(key))

	// Its own page (same origin) and curl (no browser fields) get through.
	a := curl(t, "-X", "POST", admin+"/reload", "-H", "Origin: "+admin, "-H", "Sec-Fetch-Site: same-origin")
	wantAdminHeaders(t, "same-origin POST /reload", a)
	if a.status != http.StatusOK {
		t.Errorf("same-origin POST /reload: %d %q, want 200", a.status, a.body)
	}
	a = curl(t, "-X", "POST", purgeURL)
	wantAdminHeaders(t, "curl POST /purge", a)
	if a.status != http.StatusOK || !strings.Contains(a.body, `"kind":"url"`) {
		t.Errorf("curl POST /purge: %d %q, want 200", a.status, a.body)
	}
	wantForwarded(t, key+" after curl's purge", e.get(key))
}

// TestAdminCrossSiteBrowser: a page on another 127.0.0.1 port, opened in
// headless Chromium, fires a fetch POST at /purge and /reload and submits
// a form to /purge — the requests arrive (counted as refused) and nothing
// is purged or reloaded. The status page itself renders under the CSP
// with no violation in Chromium's console, while a page with an inline
// style under the same policy does log one (the check can fail).
func TestAdminCrossSiteBrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	e := newEnv(t)
	admin := "http://" + e.cfg.Admin
	const key = "/admin-browser"
	e.get(key)
	wantHit(t, key+" before", e.get(key))
	purge := admin + "/purge?url=" + url.QueryEscape(e.absURL(key))

	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/inline" {
			w.Header().Set("Content-Security-Policy", adminCSP)
			fmt.Fprint(w, `<!DOCTYPE html><title>inline</title><style>body{color:red}</style><p>x</p>`)
			return
		}
		fmt.Fprintf(w, `<!DOCTYPE html><title>attack</title>
<iframe name="sink"></iframe>
<form id="f" method="post" target="sink" action=%q></form>
<script>
document.getElementById("f").submit();
Promise.allSettled([
  fetch(%q, {method: "POST", mode: "no-cors"}),
  fetch(%q, {method: "POST", mode: "no-cors"}),
]).then(r => { document.title = "sent " + r.map(x => x.status).join(","); });
</script>`, purge, purge, admin+"/reload")
	}))
	t.Cleanup(site.Close)

	before := e.adminMetric("shield_admin_cross_site_refused_total")
	dom, _ := headlessLog(t, bin, site.URL+"/", "--dump-dom", "--virtual-time-budget=10000")
	eventually(t, "three cross-site requests refused", func() bool {
		return e.adminMetric("shield_admin_cross_site_refused_total")-before >= 3
	})
	t.Logf("attacking page after its requests: %.200q", dom)
	if n := e.adminMetric("shield_purges_total"); n != 0 {
		t.Errorf("shield_purges_total %v after the cross-site page, want 0", n)
	}
	if n := e.adminMetric("shield_config_reloads_total"); n != 0 {
		t.Errorf("shield_config_reloads_total %v after the cross-site page, want 0", n)
	}
	wantHit(t, key+" after the cross-site page", e.get(key))

	logFlags := []string{"--dump-dom", "--enable-logging=stderr", "--v=0"}
	_, inlineLog := headlessLog(t, bin, site.URL+"/inline", logFlags...)
	if !strings.Contains(inlineLog, "Content Security Policy") {
		t.Fatalf("an inline style under %q logged no violation: the check below would prove nothing\n%.3000s", adminCSP, inlineLog)
	}
	page, pageLog := headlessLog(t, bin, admin+"/", logFlags...)
	if !strings.Contains(string(page), `id="routes"`) {
		t.Errorf("status page under the CSP: no routes table in %.300q", page)
	}
	if strings.Contains(pageLog, "Content Security Policy") {
		t.Errorf("status page violates its own CSP:\n%.3000s", pageLog)
	}
}
