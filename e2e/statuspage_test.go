package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/internal/testenv"
	"github.com/shield-proxy/shield/statuspage"
)

// chromium returns Debian's chromium. Missing, it skips locally and
// fails under CI=true (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "chromium not installed: apt-get install chromium (.ci/run does)")
	return ""
}

// headless runs chromium on url with extra flags and returns stdout.
func headless(t *testing.T, bin, url string, flags ...string) []byte {
	t.Helper()
	out, _ := headlessLog(t, bin, url, flags...)
	return out
}

// headlessLog is headless that also returns chromium's stderr (its log,
// with the page's console messages under --enable-logging=stderr).
func headlessLog(t *testing.T, bin, url string, flags ...string) ([]byte, string) {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}, flags...)
	cmd := exec.Command(bin, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.Output(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("chromium %s: no answer in 60s\n%s", url, stderr.String())
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%.2000s", url, err, stderr.String())
	}
	return out, stderr.String()
}

// artifacts is where the screenshots go: $SHIELD_ARTIFACTS, else a
// temporary directory.
func artifacts(t *testing.T) string {
	if d := os.Getenv("SHIELD_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestStatusPageCluster: three nodes under load (Consul membership, two
// tenant classes, one of them starved), then every node's status page,
// rendered by headless Chromium, shows the three peers with key shares
// that sum to about 1, the route with its request count and hit ratio,
// the origin's closed breaker, the hottest keys and both tenants; its
// /status.json says the same, and a screenshot is saved.
func TestStatusPageCluster(t *testing.T) {
	bin := chromium(t)
	ce := newClusterEnv(t, 3, func(c *clusterNodeConfig) {
		c.Edit = func(cfg *config.Config) {
			cfg.Tenants = &config.Tenants{
				Identify: config.TenantIdentify{Header: "X-Tenant"},
				Default:  config.TenantLimits{Rate: 10000, Burst: 10000, MaxConcurrency: 256},
				Classes: map[string]*config.TenantLimits{
					"starved": {Rate: 1, Burst: 1, MaxConcurrency: 4},
				},
			}
		}
	})
	// Load: a few hot keys and a cold tail through every node, plus a
	// starved tenant that gets 429s.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for _, n := range ce.nodes {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 300 {
					path := fmt.Sprintf("/hot/%d", i%3)
					if i%5 == 4 {
						path = fmt.Sprintf("/cold/%s-%d-%d", n.id(), w, i)
					}
					hdr := []string{"Host", clusterHost}
					if i%10 == 0 {
						hdr = append(hdr, "X-Tenant", "starved")
					}
					r, err := doHTTP(ce.e.client, http.MethodGet, "http://"+n.cfg.Listen+path, hdr...)
					mu.Lock()
					if err != nil {
						codes[-1]++
					} else {
						codes[r.status]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("load: 3 nodes × 4 workers × 300 requests: status counts %v", codes)
	if codes[200] < 3000 || codes[429] == 0 {
		t.Fatalf("load: want ≥3000 200s and some 429s, got %v", codes)
	}
	resp, err := http.Post("http://"+ce.nodes[0].cfg.Admin+"/purge?route=demo", "", nil)
	if err == nil {
		resp.Body.Close()
	}

	dir := artifacts(t)
	best := 0.0
	for _, n := range ce.nodes {
		t.Run(n.id(), func(t *testing.T) {
			base := "http://" + n.cfg.Admin
			js := fetchStatus(t, base+"/status.json")
			checkStatus(t, n.id(), js)
			if len(js.Routes) > 0 {
				best = max(best, js.Routes[0].HitRatio)
			}

			dom := string(headless(t, bin, base+"/", "--dump-dom"))
			checkDOM(t, n.id(), dom, js)

			shot := filepath.Join(dir, "status-"+n.id()+".png")
			headless(t, bin, base+"/", "--screenshot="+shot, "--window-size=1400,2000", "--hide-scrollbars")
			st, err := os.Stat(shot)
			if err != nil || st.Size() < 10000 {
				t.Fatalf("screenshot %s: %v (size %v)", shot, err, st)
			}
			t.Logf("screenshot of %s's status page: %s (%d bytes)", n.id(), shot, st.Size())
		})
	}
	// Three hot keys asked 240 times per node: their owners serve almost
	// all of them from cache.
	if best < 0.5 {
		t.Errorf("best hit ratio over the nodes %.2f, want ≥ 0.5", best)
	}
}

func fetchStatus(t *testing.T, url string) *statuspage.Status {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var s statuspage.Status
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("%s: %v\n%.500s", url, err, body)
	}
	return &s
}

// checkStatus asserts plausible numbers in /status.json.
func checkStatus(t *testing.T, node string, s *statuspage.Status) {
	t.Helper()
	if s.Node != node {
		t.Errorf("node = %q, want %q", s.Node, node)
	}
	if s.Cluster == nil || len(s.Cluster.Peers) != 3 || !s.Cluster.ConsulReachable || s.Cluster.Membership != "consul" {
		t.Fatalf("cluster = %+v, want 3 peers, consul reachable", s.Cluster)
	}
	share := 0.0
	for _, p := range s.Cluster.Peers {
		share += p.Share
		if !p.Up || p.Share < 0.2 || p.Share > 0.47 || p.Addr == "" {
			t.Errorf("peer %+v: want up, with an address and about a third of the keys", p)
		}
	}
	if share < 0.99 || share > 1.01 {
		t.Errorf("peer shares sum to %.3f", share)
	}
	// A node that owns none of the hot keys forwards them (cache "peer")
	// and sees only its cold misses locally, so its hit ratio may be 0;
	// the test asserts on the hottest node's ratio after the loop.
	if len(s.Routes) != 1 || s.Routes[0].Requests < 1000 || s.Routes[0].HitRatio < 0 || s.Routes[0].HitRatio >= 1 {
		t.Errorf("routes = %+v: want one route with ≥1000 requests and a hit ratio in [0, 1)", s.Routes)
	}
	if len(s.Origins) != 1 || s.Origins[0].Breaker != "closed" || s.Origins[0].Budget <= 0 || len(s.Origins[0].Servers) != 1 {
		t.Errorf("origins = %+v: want one origin, breaker closed, a budget, one server", s.Origins)
	}
	if len(s.Keys.Top) == 0 || !strings.Contains(s.Keys.Top[0].Key, "/hot/") || s.Keys.Top[0].Requests < 50 {
		t.Errorf("top keys = %+v: want a /hot/ key first with ≥50 requests", s.Keys.Top)
	}
	if s.Tenants == nil || len(s.Tenants.ByRejections) == 0 || s.Tenants.ByRejections[0].Name != "starved" || s.Tenants.ByRejections[0].Rejected == 0 ||
		len(s.Tenants.ByRequests) == 0 || s.Tenants.ByRequests[0].Name != "default" {
		t.Errorf("tenants = %+v: want default first by requests, starved first by rejections", s.Tenants)
	}
}

var (
	tagRE   = regexp.MustCompile(`<[^>]*>`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// rowText returns the text of each <tr class="class"> of the rendered DOM.
func rowText(dom, class string) []string {
	var out []string
	for _, part := range strings.Split(dom, `<tr class="`+class+`"`)[1:] {
		row := part[:strings.Index(part+"</tr>", "</tr>")]
		row = row[strings.Index(row, ">")+1:]
		txt := tagRE.ReplaceAllString(row, " ")
		out = append(out, strings.TrimSpace(spaceRE.ReplaceAllString(strings.ReplaceAll(txt, "&nbsp;", " "), " ")))
	}
	return out
}

// checkDOM asserts the rendered page shows what /status.json says.
func checkDOM(t *testing.T, node, dom string, s *statuspage.Status) {
	t.Helper()
	if !strings.Contains(dom, `<span id="node">`+node+`</span>`) {
		t.Errorf("DOM lacks the node name %s", node)
	}
	peers := rowText(dom, "peer")
	if len(peers) != 3 {
		t.Errorf("DOM peer rows = %q, want 3", peers)
	}
	for _, p := range s.Cluster.Peers {
		if !strings.Contains(strings.Join(peers, "\n"), p.ID) {
			t.Errorf("DOM lacks peer %s: %q", p.ID, peers)
		}
	}
	routes := rowText(dom, "route")
	if len(routes) != 1 || !strings.HasPrefix(routes[0], s.Routes[0].Name+" ") {
		t.Errorf("DOM route rows = %q", routes)
	} else if n, err := strconv.Atoi(strings.Fields(routes[0])[2]); err != nil || n < 1000 {
		t.Errorf("DOM route requests %q: want ≥1000", routes[0])
	}
	origins := rowText(dom, "origin")
	if len(origins) != 1 || !strings.Contains(origins[0], "breaker closed") {
		t.Errorf("DOM origin rows = %q, want the breaker closed", origins)
	}
	keys := rowText(dom, "key")
	if len(keys) == 0 || !strings.Contains(keys[0], "/hot/") {
		t.Errorf("DOM key rows = %q, want a /hot/ key first", keys)
	}
	tenants := strings.Join(rowText(dom, "tenant"), "\n")
	if !strings.Contains(tenants, "starved") || !strings.Contains(tenants, "default") {
		t.Errorf("DOM tenant rows = %q", tenants)
	}
	if !strings.Contains(dom, `http-equiv="refresh"`) || strings.Contains(dom, "<script") {
		t.Error("DOM: want a meta refresh and no script")
	}
}

// TestStatusPageDiskTier: a node with a disk tier, after large objects
// were stored and hit, shows both tiers on its status page rendered by
// headless Chromium — the disk tier's entries, hits and writes as
// /status.json and /metrics count them — and a screenshot is saved.
func TestStatusPageDiskTier(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	e := newEnv(t, func(c *shieldConfig) {
		c.CachePath = filepath.Join(dir, "cache")
		c.MaxObjectSize = "2MiB"
		c.Extra = append(c.Extra, with(func(cc *config.Config) {
			cc.Cache.Size = 64 * config.MiB
			cc.Cache.Disk = &config.CacheDisk{Path: filepath.Join(dir, "disk"), Size: 256 * config.MiB}
		}))
	})
	const objects = 8
	for range 2 {
		for i := range objects {
			if r := e.get(fmt.Sprintf("/tier/%d?size=%d", i, 1<<20)); r.status != 200 {
				t.Fatalf("GET: %v", r)
			}
		}
	}
	e.get("/tier/small") // a memory entry
	base := "http://" + e.cfg.Admin
	js := fetchStatus(t, base+"/status.json")
	d := js.Cache.Disk
	if d == nil || d.Entries != objects || d.Hits < objects || d.Writes != objects || d.MaxBytes != 256<<20 || d.Errors != 0 || d.Degraded {
		t.Fatalf("status.json disk tier %+v: want %d entries, ≥ %d hits, %d writes, 256 MiB, no errors", d, objects, objects, objects)
	}
	if js.Cache.Entries == 0 || js.Cache.MaxBytes != 64<<20 {
		t.Errorf("status.json memory tier %+v: want the small entry, 64 MiB", js.Cache)
	}
	m := promText(e.metrics())
	for name, want := range map[string]float64{"shield_cache_disk_entries": objects, "shield_cache_disk_writes_total": objects, "shield_cache_disk_hits_total": float64(d.Hits)} {
		if v, _ := m.value(name); v != want {
			t.Errorf("%s = %v, want %v (as /status.json)", name, v, want)
		}
	}

	dom := string(headless(t, bin, base+"/", "--dump-dom"))
	tiers := rowText(dom, "tier")
	if len(tiers) != 2 || !strings.HasPrefix(tiers[0], "memory ") ||
		!strings.HasPrefix(tiers[1], fmt.Sprintf("disk %d %.1f MiB 256.0 MiB %d ", objects, float64(d.Bytes)/(1<<20), d.Hits)) ||
		!strings.HasSuffix(tiers[1], " ok") {
		t.Errorf("DOM tier rows = %q, want memory, then disk with %d entries and %d hits, ok", tiers, objects, d.Hits)
	}
	shot := filepath.Join(artifacts(t), "status-disk-tier.png")
	headless(t, bin, base+"/", "--screenshot="+shot, "--window-size=1400,1200", "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
		t.Fatalf("screenshot %s: %v (size %v)", shot, err, st)
	}
	t.Logf("tiers: %q; screenshot %s", tiers, shot)
}
