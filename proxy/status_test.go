package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/statuspage"
)

func adminGet(p *Proxy, path string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI("http://admin" + path)
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, clientAddr, nil)
	p.AdminHandler()(ctx)
	return ctx
}

// TestStatusPage: after traffic, GET / and /status.json show the route's
// counts, the hottest key with its hits, the origin's breaker, and a
// purge; the top-keys metric is exported.
func TestStatusPage(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	p := newTestProxy(t, o.addr(), nil)
	for i := range 400 {
		path := "/hot"
		if i%4 == 3 {
			path = fmt.Sprintf("/cold/%d", i)
		}
		serve(p, get(t, path))
	}
	p.info.events.add("purge", "url http://x/hot")

	ctx := adminGet(p, "/status.json")
	if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(string(ctx.Response.Header.ContentType()), "application/json") {
		t.Fatalf("/status.json: %d %s", ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
	}
	var s statuspage.Status
	if err := json.Unmarshal(ctx.Response.Body(), &s); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, ctx.Response.Body())
	}
	if len(s.Routes) != 1 || s.Routes[0].Requests != 400 {
		t.Fatalf("routes = %+v, want one route with 400 requests", s.Routes)
	}
	if r := s.Routes[0].HitRatio; r < 0.6 || r > 0.8 {
		t.Errorf("hit ratio %.2f, want about 0.75 (299 of 300 /hot hits, 100 cold misses)", r)
	}
	if len(s.Keys.Top) == 0 || !strings.HasSuffix(s.Keys.Top[0].Key, "/hot") {
		t.Fatalf("top keys = %+v, want /hot first", s.Keys.Top)
	}
	// The sketch samples 1 request in 16 at random, so 300 requests are
	// about 18.75 ± 4.2 samples; [6, 31] samples (3 standard deviations)
	// is 96 to 496 estimated requests.
	if k := s.Keys.Top[0]; k.Requests < 96 || k.Requests > 496 || k.Hits == 0 || k.Hits > k.Requests {
		t.Errorf("top key %+v: want about 300 requests (96–496 with 1-in-16 sampling), mostly hits", k)
	}
	if len(s.Origins) != 1 || s.Origins[0].Breaker != "closed" || s.Origins[0].Fetches < 100 {
		t.Errorf("origins = %+v, want one closed breaker and ≥100 fetches", s.Origins)
	}
	if len(s.Events) != 1 || s.Events[0].Kind != "purge" {
		t.Errorf("events = %+v", s.Events)
	}

	ctx = adminGet(p, "/")
	html := string(ctx.Response.Body())
	for _, want := range []string{`<meta http-equiv="refresh"`, `<tr class="route"><td class="l">` + s.Routes[0].Name, `/hot</code>`, "breaker closed", "url http://x/hot"} {
		if !strings.Contains(html, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if strings.Contains(html, "<script") || strings.Contains(html, "http://") && strings.Contains(html, `src="http`) {
		t.Error("status page has scripts or external assets")
	}

	ctx = adminGet(p, "/metrics")
	if !strings.Contains(string(ctx.Response.Body()), `shield_top_key_requests{key="`+testHost+`/hot"}`) {
		t.Errorf("metrics lack the top key:\n%s", grepLines(string(ctx.Response.Body()), "shield_top_key"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestEventLogRing(t *testing.T) {
	var l eventLog
	for i := range 40 {
		l.add("reload", fmt.Sprint(i))
	}
	ev := l.recent()
	if len(ev) != 32 || ev[0].Detail != "39" || ev[31].Detail != "8" {
		t.Fatalf("recent = %d events, first %q last %q; want 32, 39..8", len(ev), ev[0].Detail, ev[len(ev)-1].Detail)
	}
}

func TestLabelValue(t *testing.T) {
	if got := labelValue("a\"b\\c\nd"); got != `a\"b\\c\nd` {
		t.Fatalf("labelValue = %q", got)
	}
}

// TestStatusPageDiskTier: with a disk tier, /status.json and the page
// show both tiers — the disk tier's entries, bytes, hits and writes as
// the cache counts them.
func TestStatusPageDiskTier(t *testing.T) {
	body := bytes.Repeat([]byte("status page "), 50<<10) // 600 KiB: a disk entry
	p, _, _ := diskProxy(t, body)
	for range 4 {
		serve(p, get(t, "/big"))
	}
	serve(p, get(t, "/small-is-big-too"))
	ctx := adminGet(p, "/status.json")
	var s statuspage.Status
	if err := json.Unmarshal(ctx.Response.Body(), &s); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, ctx.Response.Body())
	}
	st, _ := p.cache.DiskStats()
	d := s.Cache.Disk
	if d == nil || d.Entries != 2 || d.Entries != st.Objects || d.Bytes != st.Bytes || d.MaxBytes != 64<<20 ||
		d.Hits != 3 || d.Writes != 2 || d.Degraded || d.Errors != 0 {
		t.Fatalf("status disk tier %+v, want 2 entries, 3 hits, 2 writes (cache says %+v)", d, st)
	}
	if s.Cache.MaxBytes == 0 || s.Cache.Lookups == 0 {
		t.Errorf("status memory tier %+v", s.Cache)
	}
	html := string(adminGet(p, "/").Response.Body())
	want := fmt.Sprintf(`<tr class="tier"><td class="l">disk</td><td>2</td><td>%.1f MiB</td><td>64.0 MiB</td><td>3</td>`, float64(st.Bytes)/(1<<20))
	for _, w := range []string{want, `<tr class="tier"><td class="l">memory</td>`} {
		if !strings.Contains(html, w) {
			t.Errorf("status page lacks %q", w)
		}
	}
}
