package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// shieldConfig is what a test may vary in the generated config file;
// render builds it with buildConfig (shieldconf_test.go), the one place
// configs are made.
type shieldConfig struct {
	Listen, Admin, Origin string
	MaxObjectSize         string    // e.g. "1MiB"; "" = 1MiB
	CachePath             string    // "" = no persistence
	Hosts                 []string  // route hosts; default ["*"]
	Extra                 []confOpt // anything else, on top of the above
}

func (c shieldConfig) render(t *testing.T) string {
	t.Helper()
	return buildConfig(t, c.opts(t)...)
}

// opts are c as buildConfig options: demoNode, then c's fields, then Extra.
func (c shieldConfig) opts(t *testing.T) []confOpt {
	t.Helper()
	maxObj := config.MiB
	if c.MaxObjectSize != "" {
		v, err := config.ParseSize(c.MaxObjectSize)
		if err != nil {
			t.Fatalf("MaxObjectSize %q: %v", c.MaxObjectSize, err)
		}
		maxObj = v
	}
	hosts := c.Hosts
	if len(hosts) == 0 {
		hosts = []string{"*"}
	}
	return append([]confOpt{demoNode(c.Listen, c.Admin, c.Origin), with(func(cc *config.Config) {
		cc.Cache.MaxObjectSize = maxObj
		cc.Cache.Path = c.CachePath
		cc.Routes[0].Hosts = hosts
	})}, c.Extra...)
}

// writeFile writes content to a new file in t's temp dir and returns its
// path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// env is one test's world: a demo origin and a shield in front of it.
type env struct {
	t          *testing.T
	cfg        shieldConfig
	cfgPath    string
	origin     *process
	originAddr string
	shield     *process
	client     *http.Client
}

// newEnv starts an origin and a shield routed to it, both ready. Options
// adjust the config before it is written.
func newEnv(t *testing.T, opts ...func(*shieldConfig)) *env {
	t.Helper()
	e := &env{t: t, originAddr: freeAddr(t), client: newClient()}
	t.Cleanup(e.client.CloseIdleConnections)
	e.origin = startProcess(t, "demo-origin", binPath(t, "demo-origin"), "-listen", e.originAddr)
	e.origin.waitReady(t, "http://"+e.originAddr+"/__origin/stats")

	e.cfg = shieldConfig{
		Listen:        freeAddr(t),
		Admin:         freeAddr(t),
		Origin:        e.originAddr,
		MaxObjectSize: "1MiB",
		Hosts:         []string{"*"},
	}
	for _, o := range opts {
		o(&e.cfg)
	}
	e.cfgPath = writeFile(t, "shield.yaml", e.cfg.render(t))
	e.startShield()
	return e
}

// startShield starts shield on e's config file and waits for /readyz.
func (e *env) startShield() {
	e.t.Helper()
	e.shield = startProcess(e.t, "shield", binPath(e.t, "shield"), "-config", e.cfgPath)
	e.shield.waitReady(e.t, "http://"+e.cfg.Admin+"/readyz")
}

func newClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			DisableCompression:  true, // no implicit Accept-Encoding: Vary tests control headers
			MaxIdleConnsPerHost: 512,
		},
		Timeout:       20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// result is one complete HTTP answer.
type result struct {
	status int
	header http.Header
	body   []byte
	// closing: the answer said Connection: close (net/http takes the
	// field out of header into Response.Close); set where a raw
	// connection's answer is read (keepAliveConn.get).
	closing bool
}

func (r result) String() string {
	return fmt.Sprintf("%d Cache-Status=%q Age=%q body=%.120q", r.status,
		r.header.Get("Cache-Status"), r.header.Get("Age"), r.body)
}

// try sends one request to shield; hdr holds name, value pairs ("Host"
// sets the request's Host). It is safe for concurrent use.
func (e *env) try(method, target string, hdr ...string) (result, error) {
	return doHTTP(e.client, method, "http://"+e.cfg.Listen+target, hdr...)
}

func doHTTP(c *http.Client, method, url string, hdr ...string) (result, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return result{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return result{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// do is try that fails the test on a transport error.
func (e *env) do(method, target string, hdr ...string) result {
	e.t.Helper()
	r, err := e.try(method, target, hdr...)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) get(target string, hdr ...string) result {
	e.t.Helper()
	return e.do(http.MethodGet, target, hdr...)
}

// concurrent sends n identical requests released together and returns
// the answers; transport errors fail the test.
func (e *env) concurrent(n int, method, target string, hdr ...string) []result {
	e.t.Helper()
	results := make([]result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.try(method, target, hdr...)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return results
}

// originStats is the demo origin's GET /__origin/stats answer.
type originStats struct {
	Total       int64            `json:"total"`
	ByPath      map[string]int64 `json:"by_path"`
	NotModified int64            `json:"not_modified"`
	InFlight    int64            `json:"in_flight"`
	MaxInFlight int64            `json:"max_in_flight"`
}

// stats reads the origin's counters directly, not through shield.
func (e *env) stats() originStats {
	e.t.Helper()
	r, err := doHTTP(e.client, http.MethodGet, "http://"+e.originAddr+"/__origin/stats")
	if err != nil || r.status != http.StatusOK {
		e.t.Fatalf("origin stats: %v %v", r, err)
	}
	var s originStats
	if err := json.Unmarshal(r.body, &s); err != nil {
		e.t.Fatalf("origin stats %q: %v", r.body, err)
	}
	return s
}

// originPost calls a control endpoint of the origin directly.
func (e *env) originPost(target string) {
	e.t.Helper()
	r, err := doHTTP(e.client, http.MethodPost, "http://"+e.originAddr+target)
	if err != nil || r.status != http.StatusOK {
		e.t.Fatalf("origin POST %s: %v %v", target, r, err)
	}
}

// wantOriginCount fails unless the origin saw exactly want requests for
// path.
func (e *env) wantOriginCount(path string, want int64) {
	e.t.Helper()
	if got := e.stats().ByPath[path]; got != want {
		e.t.Errorf("origin requests for %s = %d, want %d", path, got, want)
	}
}

// target builds path?query from name, value pairs, encoded as a client
// would send them.
func target(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Add(kv[i], kv[i+1])
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// resource is the demo origin's JSON body.
type resource struct {
	Path    string            `json:"path"`
	URI     string            `json:"uri"`     // the request target as the origin received it
	Headers map[string]string `json:"headers"` // with headers=1
	Query   string            `json:"query"`
	N       int64             `json:"n"`
	Vary    map[string]string `json:"vary"`
	Pad     string            `json:"pad"`
}

func decode(t *testing.T, r result) resource {
	t.Helper()
	var res resource
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatalf("body of %v is not the origin's JSON: %v", r, err)
	}
	return res
}

// on returns a view of e that reports to t, for use inside a subtest:
// FailNow must be called from the goroutine running the failing test.
func (e *env) on(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}
