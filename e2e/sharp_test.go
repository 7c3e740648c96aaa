package e2e

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/internal/testenv"
)

// curl sends one GET to shield with curl, the target exactly as given
// (--path-as-is: no dot-segment removal; curl sends %2F as it is); hdr
// holds name, value pairs.
func (e *env) curl(target string, hdr ...string) result {
	e.t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Missing(e.t, "curl: %v", err)
	}
	dir := e.t.TempDir()
	head, body := filepath.Join(dir, "head"), filepath.Join(dir, "body")
	args := []string{"-sS", "--path-as-is", "-D", head, "-o", body, "-w", "%{http_code}"}
	for i := 0; i+1 < len(hdr); i += 2 {
		args = append(args, "-H", hdr[i]+": "+hdr[i+1])
	}
	out, err := exec.Command("curl", append(args, "http://"+e.cfg.Listen+target)...).Output()
	if err != nil {
		e.t.Fatalf("curl %s: %v", target, err)
	}
	var r result
	if r.status, err = strconv.Atoi(string(out)); err != nil {
		e.t.Fatalf("curl %s: status %q", target, out)
	}
	if r.body, err = os.ReadFile(body); err != nil {
		e.t.Fatal(err)
	}
	raw, err := os.ReadFile(head)
	if err != nil {
		e.t.Fatal(err)
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
	if _, err := tp.ReadLine(); err != nil { // the status line
		e.t.Fatalf("curl %s: head %q: %v", target, raw, err)
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		e.t.Fatalf("curl %s: head %q: %v", target, raw, err)
	}
	r.header = http.Header(mh)
	return r
}

// TestEncodedSlashRouted: paths holding %2F (npm scopes, GitLab project
// ids, object keys) are served like any path — the origin sees the
// client's target in its normal percent-encoding ("%2f" as "%2F"), and
// "/a%2Fb" and "/a/b" are two cache entries — while no
// spelling moves a request into or out of a route: "/%61dmin/" is route
// admin's, and "/admin%2Fx", which an origin decoding %2F would read as
// "/admin/x", is refused. Dot segments stay refused however spelt.
func TestEncodedSlashRouted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *shieldConfig) {
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			admin := &config.Route{Name: "admin", Hosts: []string{"*"}, PathPrefix: "/admin/", Origin: "demo",
				Cache: config.RouteCache{Disabled: true}}
			cc.Routes = append([]*config.Route{admin}, cc.Routes...)
		}))
	})
	for _, c := range []struct{ path, origin string }{
		{"/@scope%2fname", "/@scope%2Fname"}, {"/api/v4/projects/group%2Fproject", "/api/v4/projects/group%2Fproject"},
		{"/a%2Fb", "/a%2Fb"}, {"/a/b", "/a/b"}, {"/a%2fb", "/a%2Fb"},
	} {
		first := e.curl(c.path)
		if first.status != http.StatusOK || decode(t, first).URI != c.origin {
			t.Fatalf("GET %s: %v; want 200 from an origin that saw %s", c.path, first, c.origin)
		}
		again := e.curl(c.path)
		wantHit(t, "GET "+c.path+" again", again)
		if decode(t, again).URI != c.origin {
			t.Errorf("GET %s again: served %s's answer", c.path, decode(t, again).URI)
		}
	}
	e.wantOriginCount("/a/b", 2) // "/a%2Fb" (also "/a%2fb", its other spelling) and "/a/b": one fetch each (its decoded path is /a/b for all)

	// "/%61dmin/x" is route admin's (cache disabled): two requests, two fetches.
	for range 2 {
		if r := e.curl("/%61dmin/x"); r.status != http.StatusOK || !strings.Contains(r.header.Get("Cache-Status"), "fwd=bypass") {
			t.Errorf("GET /%%61dmin/x: %v; want route admin's bypass", r)
		}
	}
	e.wantOriginCount("/admin/x", 2)

	before := e.stats().Total
	for _, path := range []string{"/admin%2Fx", "/admin%2fx", "/%61dmin%2Fx", "/a/%2e%2e/admin/x", "/a%2F..%2Fadmin/x", "/a/../admin/x"} {
		if r := e.curl(path); r.status != http.StatusBadRequest {
			t.Errorf("GET %s: %v, want 400", path, r)
		}
	}
	if s := e.stats(); s.Total != before {
		t.Errorf("the origin saw %d refused requests", s.Total-before)
	}
}

// TestIgnoredQueryNotSentUpstream: an ignore_query parameter is not sent
// on a cache fetch, so an origin that echoes the query (the demo origin
// does) cannot store one client's utm_source for everybody; a POST
// (never stored) is forwarded as sent.
func TestIgnoredQueryNotSentUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *shieldConfig) {
		c.Extra = append(c.Extra, with(func(cc *config.Config) { cc.Routes[0].Cache.IgnoreQuery = []string{"utm_source"} }))
	})
	poisoned := e.curl("/page?utm_source=%3Cb%3Epwned&a=1")
	if res := decode(t, poisoned); poisoned.status != http.StatusOK || res.URI != "/page?a=1" {
		t.Fatalf("first request: %v; want 200 from an origin that saw /page?a=1", poisoned)
	}
	clean := e.curl("/page?a=1&utm_source=newsletter")
	wantHit(t, "same key, other utm_source", clean)
	if strings.Contains(string(clean.body), "pwned") {
		t.Errorf("a later client got the first client's utm_source: %s", clean.body)
	}
	if r, err := e.try(http.MethodPost, "/page?utm_source=x"); err != nil || decode(t, r).URI != "/page?utm_source=x" {
		t.Errorf("POST: %v %v; want the target forwarded as sent", r, err)
	}
}

// forwardingProbe is the client's spoofing attempt: every forwarding
// field, as a client or a proxy in front of shield would send it.
var forwardingProbe = []string{
	"X-Forwarded-For", "6.6.6.6", "X-Forwarded-Port", "1", "X-Forwarded-Proto", "https",
	"X-Forwarded-Host", "evil.example", "X-Forwarded-Prefix", "/evil", "X-Forwarded-Ssl", "on",
	"Forwarded", "for=6.6.6.6",
}

// wantEchoed checks the fields an echoing origin saw ("" = absent).
func wantEchoed(t *testing.T, what string, res resource, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := res.Headers[name]; got != v {
			t.Errorf("%s: origin saw %s = %q, want %q", what, name, got, v)
		}
	}
}

// TestForwardedFieldsReplaced: a client's X-Forwarded-* and Forwarded
// fields never reach the origin (X-Forwarded-Port did); only a client in
// server.trusted_proxies has its X-Forwarded-For extended and its -Proto,
// -Host and -Port kept.
func TestForwardedFieldsReplaced(t *testing.T) {
	t.Parallel()
	for _, trusted := range []bool{false, true} {
		e := newEnv(t, func(c *shieldConfig) {
			if trusted {
				c.Extra = append(c.Extra, with(func(cc *config.Config) { cc.Server.TrustedProxies = []string{"127.0.0.0/8"} }))
			}
		})
		r := e.curl("/xf?headers=1&cc=no-store", forwardingProbe...)
		if r.status != http.StatusOK {
			t.Fatalf("trusted=%v: %v", trusted, r)
		}
		want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Port": "", "X-Forwarded-Proto": "http",
			"X-Forwarded-Host": e.cfg.Listen, "X-Forwarded-Prefix": "", "X-Forwarded-Ssl": "", "Forwarded": ""}
		if trusted {
			want["X-Forwarded-For"], want["X-Forwarded-Port"] = "6.6.6.6, 127.0.0.1", "1"
			want["X-Forwarded-Proto"], want["X-Forwarded-Host"] = "https", "evil.example"
		}
		wantEchoed(t, "trusted="+strconv.FormatBool(trusted), decode(t, r), want)
	}
}

// TestForwardedFieldsThroughOwner: in a cluster (static membership) the
// edge node sets the forwarding fields for its client and the key's
// owner sends them on as set, so the origin sees the same fields whichever
// node answers; the owner's cache fetch drops ignore_query parameters.
func TestForwardedFieldsThroughOwner(t *testing.T) {
	t.Parallel()
	nodes := startStaticPair(t, func(c *config.Config) { c.Routes[0].Cache.IgnoreQuery = []string{"utm_source"} })
	e := &env{t: t, cfg: shieldConfig{Listen: nodes[0].listen}}
	forwarded := 0
	for i := range 12 {
		target := "/own" + strconv.Itoa(i) + "?headers=1&utm_source=evil"
		r := e.curl(target, forwardingProbe...)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %v", target, r)
		}
		cs := strings.Join(r.header.Values("Cache-Status"), ", ")
		what := target + " (" + cs + ")"
		if strings.Contains(cs, "detail=peer-n2") {
			forwarded++
		}
		res := decode(t, r)
		if strings.Contains(res.URI, "utm_source") {
			t.Errorf("%s: origin saw %s", what, res.URI)
		}
		wantEchoed(t, what, res, map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Port": "",
			"X-Forwarded-Proto": "http", "X-Forwarded-Host": nodes[0].listen, "X-Forwarded-Prefix": "",
			"X-Forwarded-Ssl": "", "Forwarded": "", "Shield-Forwarded": "", "Shield-Client-Ip": ""})
	}
	if forwarded == 0 {
		t.Fatal("no key of 12 is owned by n2: nothing went through an owner")
	}
}

// staticNode is one shield of startStaticPair.
type staticNode struct{ listen, admin, peer string }

// startStaticPair starts a demo origin and two shields, n1 and n2, in
// one cluster with static membership (no Consul), each configuration
// adjusted by edit, and returns them ready.
func startStaticPair(t *testing.T, edit func(*config.Config)) []staticNode {
	t.Helper()
	originAddr := freeAddr(t)
	origin := startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", originAddr)
	origin.waitReady(t, "http://"+originAddr+"/__origin/stats")
	nodes := []staticNode{{freeAddr(t), freeAddr(t), freeAddr(t)}, {freeAddr(t), freeAddr(t), freeAddr(t)}}
	peers := []*config.ClusterPeer{{ID: "n1", Addr: nodes[0].peer}, {ID: "n2", Addr: nodes[1].peer}}
	for i, n := range nodes {
		yaml := buildConfig(t, demoNode(n.listen, n.admin, originAddr), with(func(c *config.Config) {
			c.Cluster = &config.Cluster{NodeID: peers[i].ID, Listen: n.peer, Secret: clusterSecret, Membership: "static", Peers: peers}
			if edit != nil {
				edit(c)
			}
		}))
		p := startProcess(t, "shield "+peers[i].ID, binPath(t, "shield"), "-config", writeFile(t, peers[i].ID+".yaml", yaml))
		p.waitReady(t, "http://"+n.admin+"/readyz")
	}
	return nodes
}

// TestClientCannotPurgeThroughEdge: a public request for a peer protocol
// path (/__shield/purge?route=demo) that the edge forwards to the key's
// owner — with the cluster secret — is served as a request there, never
// run as a purge (it emptied the owner's route).
func TestClientCannotPurgeThroughEdge(t *testing.T) {
	t.Parallel()
	nodes := startStaticPair(t, nil)
	n1, n2 := &env{t: t, cfg: shieldConfig{Listen: nodes[0].listen}}, &env{t: t, cfg: shieldConfig{Listen: nodes[1].listen}}
	owned := ""
	for i := 0; owned == ""; i++ { // a key n2 owns: n2 serves it itself, a hit the second time
		p := "/kept" + strconv.Itoa(i)
		n2.curl(p)
		if r := n2.curl(p); parseCacheStatus(r.header).hit && len(r.header.Values("Cache-Status")) == 1 {
			owned = p // a hit of n2's own, not relayed from n1
		}
		if i == 50 {
			t.Fatal("n2 owns none of 50 keys")
		}
	}
	forwarded := 0
	for i := range 16 {
		for _, base := range []string{"/__shield/purge?route=demo", "/__shield%2Fpurge?route=demo", "/__shield/purgelog?after=0"} {
			r := n1.curl(base + "&n=" + strconv.Itoa(i))
			if strings.Contains(strings.Join(r.header.Values("Cache-Status"), ", "), "detail=peer-n2") {
				forwarded++
			}
			if strings.Contains(string(r.body), "purged") || strings.Contains(string(r.body), `"records"`) {
				t.Errorf("GET %s via n1 answered by a peer endpoint: %v", base, r)
			}
		}
	}
	if forwarded == 0 {
		t.Fatal("n1 forwarded none of the attempts to n2")
	}
	r := n2.curl(owned)
	wantHit(t, owned+" on n2 after the attempts", r)
	if cs := r.header.Values("Cache-Status"); len(cs) != 1 {
		t.Errorf("%s on n2: Cache-Status %q, want n2's own hit", owned, cs)
	}
}

// TestPurgeReachesEverySpelling: a purge by URL reaches every spelling of
// the resource (RFC 3986 §6.2.2: encoded unreserved characters and hex
// case are the same URI). "/%61pi/x", cached, is not served after a purge
// of "/api/x", nor "/api/x?q=%2f" after a purge of "/%61pi/x?q=%2F";
// the origin sees the normal form and one fetch serves every spelling.
func TestPurgeReachesEverySpelling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		spellings []string
		purge     string
		origin    string
	}{
		{[]string{"/%61pi/x", "/api/x", "/api/%78", "/%61%70%69/%78"}, "/api/x", "/api/x"},
		{[]string{"/api/x?q=%2f", "/%61pi/%78?%71=%2F"}, "/%61pi/x?q=%2F", "/api/x?q=%2F"},
	} {
		first := e.curl(c.spellings[0])
		if first.status != http.StatusOK || decode(t, first).URI != c.origin {
			t.Fatalf("GET %s: %v; want 200 from an origin that saw %s", c.spellings[0], first, c.origin)
		}
		for _, s := range c.spellings {
			r := e.curl(s)
			wantHit(t, "GET "+s, r)
			if decode(t, r).N != decode(t, first).N {
				t.Fatalf("GET %s: n=%d, want the cached n=%d (one resource)", s, decode(t, r).N, decode(t, first).N)
			}
		}
		e.purge("url="+url.QueryEscape(e.absURL(c.purge)), http.StatusOK)
		for _, s := range c.spellings {
			if r := e.curl(s); r.status != http.StatusOK || decode(t, r).N == decode(t, first).N {
				t.Errorf("GET %s after purging %s: %v, n=%d: the purged answer", s, c.purge, r, decode(t, r).N)
			}
		}
	}
}
