package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// noEnv is a lookupEnv with no variables set.
func noEnv(string) (string, bool) { return "", false }

// envOf returns a lookupEnv backed by m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// problems flattens a joined error into its *Error parts, failing the test
// if any part is not an *Error.
func problems(t *testing.T, err error) []*Error {
	t.Helper()
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	} else {
		parts = []error{err}
	}
	var out []*Error
	for _, p := range parts {
		var e *Error
		if !errors.As(p, &e) {
			t.Fatalf("error %q is a %T, want *Error", p, p)
		}
		out = append(out, e)
	}
	return out
}

// want is one expected problem: its line, field path and a piece of its
// message.
type want struct {
	line  int
	field string
	msg   string
}

func TestLoadTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range append(files, "../config.example.yaml") {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := Load(f); err != nil {
				t.Fatalf("Load(%q): %v", f, err)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "config: ") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want a config: error wrapping fs.ErrNotExist", err)
	}
}

func TestExampleConfig(t *testing.T) {
	c, err := Load("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || c.Admin.Listen != "127.0.0.1:9091" {
		t.Errorf("listeners = %q, %q", c.Listen, c.Admin.Listen)
	}
	if c.Cache.Size != 64*MiB || c.Cache.MaxObjectSize != 8*MiB {
		t.Errorf("cache = %v / %v, want 64MiB / 8MiB", c.Cache.Size, c.Cache.MaxObjectSize)
	}
	o := c.Origins["demo"]
	if o == nil || !slices.Equal(o.Servers, []string{"127.0.0.1:9000"}) {
		t.Fatalf("origin demo = %+v", o)
	}
	if len(c.Routes) != 1 {
		t.Fatalf("routes = %d, want 1", len(c.Routes))
	}
	r := c.Routes[0]
	if r.Name != "demo" || !slices.Equal(r.Hosts, []string{"*"}) || r.PathPrefix != "/" || r.Origin != "demo" {
		t.Errorf("route = %+v", r)
	}
}

func TestFullConfig(t *testing.T) {
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"admin.listen", c.Admin.Listen, "off"},
		{"log", c.Log, Log{Level: "debug", Format: "json", Access: AccessLog{Sample: 1}}},
		{"server", c.Server, Server{ReadTimeout: 5 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: 2 * time.Minute,
			MaxHeaderSize: 32 * KiB, MaxBodySize: 1 * MB, MaxConnections: 5000, DrainTimeout: 30 * time.Second, TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1"},
			HTTP2: true, HTTP2Limits: HTTP2Limits{MaxConcurrentStreams: 100, MaxFrameSize: 16 * KiB, StreamWindow: 256 * KiB, ConnectionWindow: MiB},
			HeapFloor: 64 * MiB, AdaptiveProcs: true}}, // a quarter of cache.size (1GiB), at most 64MiB
		{"cache", c.Cache, Cache{Size: GiB, MaxObjectSize: 16 * MiB, Path: "/var/lib/shield/cache", HitForMiss: 0,
			MaxWaiters: 64, WaitTimeout: 3 * time.Second}},
		{"origins.api", *c.Origins["api"], Origin{Servers: []string{"10.0.0.1:8080", "10.0.0.2:8080"}, Timeout: 2 * time.Second,
			ConnectTimeout: 250 * time.Millisecond, MaxConcurrency: 100, MaxResponseHeaderSize: 32 * KiB, SlowStart: 30 * time.Second, QueueTimeout: 50 * time.Millisecond, IdleTimeout: 4 * time.Second,
			MaxEarlyHints: 3, Breaker: Breaker{FailureStatuses: []int{502, 503, 504}}}},
		{"routes[0].hosts lower-cased", c.Routes[0].Hosts, []string{"api.example.com", "api.example.net"}},
		{"routes[0].cache", c.Routes[0].Cache, RouteCache{DefaultTTL: 30 * time.Second, IgnoreQuery: []string{"utm_source"},
			KeyHeaders: []string{"Accept-Language"}, StaleWhileRevalidate: 10 * time.Second, StaleIfError: 5 * time.Minute,
			MaxStale: 0, AllowSetCookie: true, SurrogateKeyHeader: "Surrogate-Key",
			Targeted: []string{"CDN-Cache-Control"}, AcceptEncoding: []string{"br", "gzip"}}},
		{"routes[2].cache.disabled", c.Routes[2].Cache.Disabled, true},
	}
	for _, tc := range checks {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

func TestAnchorsAndMerges(t *testing.T) {
	c, err := Load("testdata/anchors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Origins["b"]; b.Timeout != 10*time.Second || !slices.Equal(b.Servers, []string{"b.internal:80"}) {
		t.Errorf("origins.b = %+v, want merged timeout 10s and its own servers", b)
	}
	if rc := c.Routes[1].Cache; rc.DefaultTTL != 5*time.Second || rc.StaleIfError != time.Hour {
		t.Errorf("routes[1].cache = %+v, want own default_ttl 5s and merged stale_if_error 1h", rc)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, r := c.Origins["api"], c.Routes[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"admin.listen", c.Admin.Listen, "127.0.0.1:9091"},
		{"log.level", c.Log.Level, "info"},
		{"log.format", c.Log.Format, "text"},
		{"server.read_timeout", c.Server.ReadTimeout, 10 * time.Second},
		{"server.write_timeout", c.Server.WriteTimeout, 30 * time.Second},
		{"server.idle_timeout", c.Server.IdleTimeout, 60 * time.Second},
		{"server.max_header_size", c.Server.MaxHeaderSize, 16 * KiB},
		{"server.max_body_size", c.Server.MaxBodySize, 4 * MiB},
		{"server.drain_timeout", c.Server.DrainTimeout, 15 * time.Second},
		{"server.heap_floor", c.Server.HeapFloor, 64 * MiB},
		{"server.adaptive_procs", c.Server.AdaptiveProcs, true},
		{"cache.size", c.Cache.Size, 512 * MiB},
		{"cache.max_object_size", c.Cache.MaxObjectSize, 8 * MiB},
		{"cache.path", c.Cache.Path, ""},
		{"cache.hit_for_miss", c.Cache.HitForMiss, 10 * time.Second},
		{"cache.max_waiters", c.Cache.MaxWaiters, 1024},
		{"cache.wait_timeout", c.Cache.WaitTimeout, 5 * time.Second},
		{"origin.timeout", o.Timeout, 5 * time.Second},
		{"origin.connect_timeout", o.ConnectTimeout, time.Second},
		{"origin.max_concurrency", o.MaxConcurrency, 256},
		{"origin.max_response_header_size", o.MaxResponseHeaderSize, 64 * KiB},
		{"route.path_prefix", r.PathPrefix, "/"},
		{"route.cache.max_stale", r.Cache.MaxStale, time.Hour},
		{"route.cache.default_ttl", r.Cache.DefaultTTL, time.Duration(0)},
	}
	for _, tc := range checks {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestExplicitValues checks that a present value, zero included, beats the
// default, and that null means absent.
func TestExplicitValues(t *testing.T) {
	const head = "listen: :8080\n"
	const tail = "routes: [{name: r, hosts: ['*'], origin: a}]\n"
	tests := []struct {
		name string
		yaml string
		get  func(*Config) any
		want any
	}{
		{"hit_for_miss 0 disables", "cache: {hit_for_miss: 0}\norigins: {a: {servers: [x:1]}}\n",
			func(c *Config) any { return c.Cache.HitForMiss }, time.Duration(0)},
		{"hit_for_miss null is the default", "cache: {hit_for_miss: ~}\norigins: {a: {servers: [x:1]}}\n",
			func(c *Config) any { return c.Cache.HitForMiss }, 10 * time.Second},
		{"max_stale 0 kept", "origins: {a: {servers: [x:1]}}\nroutes: [{name: r, hosts: ['*'], origin: a, cache: {max_stale: 0s}}]\n",
			func(c *Config) any { return c.Routes[0].Cache.MaxStale }, time.Duration(0)},
		{"wait_timeout is the longest origin timeout", "origins: {a: {servers: [x:1], timeout: 3s}, b: {servers: [y:1], timeout: 7s}}\n",
			func(c *Config) any { return c.Cache.WaitTimeout }, 7 * time.Second},
		{"empty admin mapping", "admin:\norigins: {a: {servers: [x:1]}}\n",
			func(c *Config) any { return c.Admin.Listen }, "127.0.0.1:9091"},
		{"integer size", "cache: {size: 33554432, max_object_size: 4194304}\norigins: {a: {servers: [x:1]}}\n",
			func(c *Config) any { return c.Cache.Size }, 32 * MiB},
		{"empty lists are nil", "origins: {a: {servers: [x:1]}}\nroutes: [{name: r, hosts: ['*'], origin: a, cache: {ignore_query: []}}]\n",
			func(c *Config) any { return c.Routes[0].Cache.IgnoreQuery == nil }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := head + tc.yaml
			if !strings.Contains(src, "routes:") {
				src += tail
			}
			c, err := Parse("t.yaml", []byte(src), noEnv)
			if err != nil {
				t.Fatalf("Parse:\n%s\n%v", src, err)
			}
			if got := tc.get(c); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{"shield.yaml", 12, 13, "routes[0].origin", `unknown origin "apii"`}, `shield.yaml:12:13: routes[0].origin: unknown origin "apii"`},
		{Error{"shield.yaml", 3, 0, "", "invalid YAML: x"}, "shield.yaml:3: invalid YAML: x"},
		{Error{"shield.yaml", 0, 0, "", "the file is empty"}, "shield.yaml: the file is empty"},
	}
	for _, tc := range tests {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// TestParseTrustedProxy: CIDRs are masked, bare IPs stand for themselves,
// IPv4-mapped forms read as IPv4 (as client addresses are).
func TestParseTrustedProxy(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3/8": "10.0.0.0/8", "192.0.2.1": "192.0.2.1/32", "2001:db8::1": "2001:db8::1/128",
		"::ffff:192.0.2.1": "192.0.2.1/32", "::ffff:10.0.0.0/104": "10.0.0.0/8", "0.0.0.0/0": "0.0.0.0/0",
	} {
		p, err := ParseTrustedProxy(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseTrustedProxy(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "x", "10.0.0.0/33", "::ffff:0.0.0.0/95", "fe80::1%eth0", "10.0.0.1/8/8"} {
		if p, err := ParseTrustedProxy(in); err == nil {
			t.Errorf("ParseTrustedProxy(%q) = %v, want an error", in, p)
		}
	}
}
