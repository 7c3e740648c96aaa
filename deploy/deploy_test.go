package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// scrapeConfig is a shield config in which every metric family exists:
// a route with an origin (route, origin, budget and breaker families),
// tenants with one starved class (admission, 429s) and a one-node static
// cluster (cluster, peer and Consul-reachable families).
const scrapeConfig = `listen: {{LISTEN}}
admin: { listen: {{ADMIN}} }
cache: { size: 32MiB, max_object_size: 1MiB }
origins:
  demo: { servers: [{{ORIGIN}}], timeout: 2s, max_concurrency: 16 }
routes:
  - name: demo
    hosts: ["*"]
    path_prefix: /
    origin: demo
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 1000, burst: 1000, max_concurrency: 100 }
  classes:
    starved: { rate: 0.001, burst: 1, max_concurrency: 10 }
cluster:
  node_id: n1
  listen: {{PEER}}
  secret: deploy-test-secret-0123456789
`

// fixture is the outcome of one real scrape, shared by every test.
var fixture struct {
	once   sync.Once
	scrape []byte
	err    error
}

// realScrape returns shield's /metrics text after a miss, a hit, a 429
// and a purge. The first call builds and starts shield and the demo
// origin, scrapes, and stops them; later calls return the same text.
func realScrape(t *testing.T) []byte {
	t.Helper()
	fixture.once.Do(func() { fixture.scrape, fixture.err = scrapeShield() })
	if fixture.err != nil {
		t.Fatalf("real scrape: %v", fixture.err)
	}
	return fixture.scrape
}

func scrapeShield() (_ []byte, err error) {
	dir, err := os.MkdirTemp("", "shield-deploy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, name := range []string{"shield", "demo-origin"} {
		bins[name] = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", bins[name], "./cmd/"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, out)
		}
	}
	addr := map[string]string{}
	for _, k := range []string{"LISTEN", "ADMIN", "ORIGIN", "PEER"} {
		if addr[k], err = freeAddr(); err != nil {
			return nil, err
		}
	}
	cfg := scrapeConfig
	for k, v := range addr {
		cfg = strings.ReplaceAll(cfg, "{{"+k+"}}", v)
	}
	cfgPath := filepath.Join(dir, "shield.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}

	origin, err := start(bins["demo-origin"], "-listen", addr["ORIGIN"])
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, origin.stop()) }()
	if err := origin.waitOK("http://" + addr["ORIGIN"] + "/__origin/stats"); err != nil {
		return nil, err
	}
	shield, err := start(bins["shield"], "-config", cfgPath)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, shield.stop()) }()
	if err := shield.waitOK("http://" + addr["ADMIN"] + "/readyz"); err != nil {
		return nil, err
	}

	pub, admin := "http://"+addr["LISTEN"], "http://"+addr["ADMIN"]
	steps := []struct {
		method, url, tenant string
		want                int
	}{
		{http.MethodGet, pub + "/deploy", "", http.StatusOK},                      // miss
		{http.MethodGet, pub + "/deploy", "", http.StatusOK},                      // hit
		{http.MethodGet, pub + "/starved", "starved", http.StatusOK},              // the class's one token
		{http.MethodGet, pub + "/starved", "starved", http.StatusTooManyRequests}, // 429
		{http.MethodPost, admin + "/purge?route=demo", "", http.StatusOK},         // purge
		{http.MethodGet, pub + "/deploy", "", http.StatusOK},                      // miss after the purge
		{http.MethodGet, pub + "/nostore?cc=no-store", "", http.StatusOK},         // not stored
	}
	for _, s := range steps {
		code, body, err := send(s.method, s.url, s.tenant)
		if err != nil {
			return nil, err
		}
		if code != s.want {
			return nil, fmt.Errorf("%s %s (tenant %q): status %d, want %d: %s", s.method, s.url, s.tenant, code, s.want, body)
		}
	}
	// Enough hits that the 1-in-16 sampled top-keys sketch has /deploy
	// (shield_top_key_requests): missing it has odds of (15/16)^200.
	for range 200 {
		if code, body, err := send(http.MethodGet, pub+"/deploy", ""); err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("GET /deploy: %d %v %s", code, err, body)
		}
	}
	code, body, err := send(http.MethodGet, admin+"/metrics", "")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: status %d: %s", code, body)
	}
	return body, nil
}

var client = &http.Client{Timeout: 10 * time.Second}

func send(method, url, tenant string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// proc is a started binary; its output is kept for error messages.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer // written by os/exec's copier until Wait returns
	done chan error
}

func start(bin string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(bin, args...), out: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// waitOK polls url until it answers 200, for at most 15s; it gives up
// early if the process exits.
func (p *proc) waitOK(url string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _, err := send(http.MethodGet, url, "")
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case werr := <-p.done:
			p.done <- werr
			return fmt.Errorf("%s exited (%v) before %s answered 200:\n%s", p.cmd.Path, werr, url, p.out)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not 200 after 15s (status %d, %v)", p.cmd.Path, url, code, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop kills the process by its PID and reaps it.
func (p *proc) stop() error {
	select {
	case err := <-p.done:
		return fmt.Errorf("%s exited early (%v):\n%s", p.cmd.Path, err, p.out)
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return nil
}

// freeAddr picks a free port below the kernel's ephemeral range (32768
// and up by default), where a port just released by :0 would soon be
// reused as some outgoing connection's local port.
func freeAddr() (string, error) {
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port in 20000-31999")
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// exposition is what a scrape exports: every sample name, and the
// histogram families (a family whose _bucket series carry an le label).
type exposition struct {
	samples    map[string]bool
	histograms map[string]bool
}

// parseExposition reads Prometheus text format; comments are skipped.
func parseExposition(text []byte) exposition {
	ex := exposition{samples: map[string]bool{}, histograms: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			continue
		}
		name := line[:end]
		ex.samples[name] = true
		if fam, ok := strings.CutSuffix(name, "_bucket"); ok && strings.Contains(line[end:], `le="`) {
			ex.histograms[fam] = true
		}
	}
	return ex
}

// check explains why name cannot be queried; "" when it can.
func (ex exposition) check(name string) string {
	switch {
	case ex.samples[name]:
		return ""
	case ex.histograms[name]:
		return "is a histogram family: query " + name + "_bucket, _sum or _count"
	}
	return "is not exported by shield"
}

// shieldFamilies returns the sorted family names of shield_ series, with
// histogram suffixes folded into their family.
func (ex exposition) shieldFamilies() []string {
	set := map[string]bool{}
	for name := range ex.samples {
		if !strings.HasPrefix(name, "shield_") {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if fam, ok := strings.CutSuffix(name, suffix); ok && ex.histograms[fam] {
				name = fam
				break
			}
		}
		set[name] = true
	}
	fams := make([]string, 0, len(set))
	for f := range set {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	return fams
}

func TestParseExposition(t *testing.T) {
	ex := parseExposition([]byte(`# HELP shield_x_seconds x
# TYPE shield_x_seconds histogram
shield_x_seconds_bucket{route="a",le="0.1"} 1
shield_x_seconds_bucket{route="a",le="+Inf"} 1
shield_x_seconds_sum{route="a"} 0.05
shield_x_seconds_count{route="a"} 1
shield_requests_total{route="a",cache="hit"} 2
shield_fake_bucket 3
go_goroutines 7
`))
	tests := []struct {
		name, want string
	}{
		{"shield_x_seconds_bucket", ""},
		{"shield_x_seconds_count", ""},
		{"shield_requests_total", ""},
		{"go_goroutines", ""},
		{"shield_fake_bucket", ""},
		{"shield_x_seconds", "is a histogram family: query shield_x_seconds_bucket, _sum or _count"},
		{"shield_fake", "is not exported by shield"},
		{"shield_requests", "is not exported by shield"},
	}
	for _, tt := range tests {
		if got := ex.check(tt.name); got != tt.want {
			t.Errorf("check(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	want := []string{"shield_fake_bucket", "shield_requests_total", "shield_x_seconds"}
	if got := ex.shieldFamilies(); !slices.Equal(got, want) {
		t.Errorf("shieldFamilies() = %q, want %q", got, want)
	}
}

// TestRealScrapeFamilies pins the families the dashboard and alerts are
// built on: if one disappears from a real scrape, this names it even when
// no panel uses it yet.
func TestRealScrapeFamilies(t *testing.T) {
	ex := parseExposition(realScrape(t))
	fams := ex.shieldFamilies()
	t.Logf("real scrape: %d shield_ families", len(fams))
	for _, want := range []string{
		"shield_requests_total", "shield_request_duration_seconds", "shield_origin_fetches_total",
		"shield_stale_served_total", "shield_coalesced_waiters_total", "shield_coalesced_waiters",
		"shield_admission_rejected_total", "shield_breaker_state", "shield_cluster_peers",
		"shield_cluster_generation_changes_total", "shield_consul_reachable", "shield_purge_sync_pending", "shield_cache_bytes",
		"shield_cache_max_bytes", "shield_cache_entries", "shield_origin_budget_in_flight",
		"shield_origin_budget_limit", "shield_purges_total", "shield_config_reloads_total",
		"shield_config_reload_failures_total", "shield_cache_disk_degraded", "shield_cache_disk_bytes", "shield_cache_disk_dropped_total",
	} {
		if !slices.Contains(fams, want) {
			t.Errorf("real scrape has no %s family", want)
		}
	}
	if !ex.histograms["shield_request_duration_seconds"] {
		t.Errorf("shield_request_duration_seconds is not exported as a histogram (no _bucket series with le)")
	}
}
