package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestParseErrors feeds broken files and checks every reported problem:
// its line, its field path and a piece of its message, in order.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want []want
	}{
		// Shape of the file.
		{"empty file", "", nil, []want{{0, "", "empty"}}},
		{"only comments", "# nothing\n\n# here\n", nil, []want{{0, "", "empty"}}},
		{"null document", "---\n", nil, []want{{0, "", "empty"}}},
		{"two documents", "listen: :80\n---\nlisten: :81\n", nil, []want{{2, "", "second YAML document"}}},
		{"top-level list", "- listen: :80\n", nil, []want{{1, "", "top level must be a mapping"}}},
		{"top-level scalar", "hello\n", nil, []want{{1, "", "top level must be a mapping"}}},
		{"syntax error", "listen: :80\norigins: [a\n", nil, []want{{2, "", "invalid YAML: did not find expected ',' or ']'"}}},
		{"syntax error at end", "a: [\n", nil, []want{{2, "", "invalid YAML: did not find expected node content"}}},
		{"parser error after line 1", "- a\nb: c\n", nil, []want{{2, "", "invalid YAML: did not find expected '-' indicator"}}},
		{"scanner error on line 1", "a: b: c\n", nil, []want{{1, "", "invalid YAML: mapping values are not allowed"}}},
		{"bad indentation", "listen: :80\nlog:\n  level: info\n format: json\n", nil, []want{{4, "", "invalid YAML"}}},
		{"tab indentation", "listen: :80\nlog:\n\tlevel: info\n", nil, []want{{3, "", "invalid YAML"}}},
		{"unterminated quote", "listen: :80\nlog: {level: \"debug}\n", nil, []want{{2, "", "invalid YAML"}}},
		{"unknown anchor", "listen: *nope\n", nil, []want{{0, "", "unknown anchor"}}},
		{"unknown top-level key", `listen: :80
listn: :81
`, nil, []want{{2, "listn", `unknown setting "listn" (did you mean "listen"?)`}}},
		{"unknown nested key", `listen: :80
origins:
  api:
    servers: [a:1]
    timout: 5s
routes:
  - name: r
    hosts: ["*"]
    origin: api
    cache:
      ttl: 5s
`, nil, []want{
			{5, "origins.api.timout", `did you mean "timeout"?`},
			{11, "routes[0].cache.ttl", `unknown setting "ttl" (known: disabled,`},
		}},
		{"duplicate key", `listen: :80
admin:
  listen: :81
  listen: :82
`, nil, []want{{4, "admin.listen", "duplicate key \"listen\" (first set on line 3)"}}},
		{"duplicate origin", `origins:
  api: {servers: [a:1]}
  api: {servers: [b:1]}
`, nil, []want{{3, "origins.api", "duplicate key"}}},
		{"type errors", `listen: :80
origins:
  api:
    servers: a:1
    timeout: fast
    connect_timeout: 5
    max_concurrency: lots
    max_response_header_size: huge
routes:
  - name: [r]
    hosts: "*"
    origin: api
    cache: {disabled: yes}
  - just a string
`, nil, []want{
			{4, "origins.api.servers", "expected a list"},
			{5, "origins.api.timeout", `invalid duration "fast"`},
			{6, "origins.api.connect_timeout", `needs a unit, e.g. "5s"`},
			{7, "origins.api.max_concurrency", `expected an integer, got "lots"`},
			{8, "origins.api.max_response_header_size", `invalid size "huge"`},
			{10, "routes[0].name", "expected a string, got a list"},
			{11, "routes[0].hosts", "expected a list"},
			{13, "routes[0].cache.disabled", `expected true or false, got "yes"`},
			{14, "routes[1]", "expected a mapping"},
		}},
		{"bad sizes", `cache:
  size: -1MiB
  max_object_size: 99999999999999999999
server:
  max_header_size: 1.5KiB
  max_body_size: 9000000000GiB
`, nil, []want{
			{2, "cache.size", "must not be negative"},
			{3, "cache.max_object_size", "too large"},
			{5, "server.max_header_size", "unknown unit"},
			{6, "server.max_body_size", "too large"},
		}},
		{"integer out of range", "cache: {max_waiters: 99999999999999999999}\n", nil,
			[]want{{1, "cache.max_waiters", "out of range"}}},
		{"unset variable", `listen: ${LISTEN}
origins:
  api:
    servers: ["${API_HOST}:80"]
`, nil, []want{
			{1, "listen", "environment variable LISTEN is not set"},
			{4, "origins.api.servers[0]", "API_HOST is not set"},
		}},
		{"bad variable reference", "listen: \"${1X}\"\nlog: {level: \"${LEVEL\"}\n", nil, []want{
			{1, "listen", "invalid variable reference"},
			{2, "log.level", "unterminated"},
		}},
		{"bad merge", "log:\n  <<: [1]\n", nil, []want{{2, "log", "merge (<<) takes a mapping"}}},
		{"mapping key", "? [a]\n: 1\n", nil, []want{{1, "", "keys must be plain names"}}},

		// Values.
		{"missing everything", "log: {level: info}\n", nil, []want{
			{1, "listen", "required"},
			{1, "origins", "at least one origin"},
			{1, "routes", "at least one route"},
		}},
		{"listeners and log", `listen: localhost
admin: {listen: "http://127.0.0.1:9091"}
log:
  level: verbose
  format: xml
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, nil, []want{
			{1, "listen", "must be host:port"},
			{2, "admin.listen", "without a scheme"},
			{4, "log.level", `must be one of debug, info, warn, error, got "verbose"`},
			{5, "log.format", "must be one of text, json"},
		}},
		{"admin same as listen", `listen: :80
admin: {listen: ":80"}
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, nil, []want{{2, "admin.listen", "must differ from listen"}}},
		{"zero and negative limits", `listen: :80
server:
  read_timeout: 0s
  max_body_size: 0
  max_connections: 0
cache:
  size: 16MiB
  hit_for_miss: -1s
  max_waiters: 0
  wait_timeout: 0s
origins: {a: {servers: [x:1], max_concurrency: 0, connect_timeout: -1s, max_early_hints: 101}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, nil, []want{
			{3, "server.read_timeout", "must be positive"},
			{4, "server.max_body_size", "must be positive"},
			{5, "server.max_connections", "must be at least 1, got 0"},
			{7, "cache.size", "must be at least 32MiB"},
			{8, "cache.hit_for_miss", "must not be negative"},
			{9, "cache.max_waiters", "at least 1"},
			{10, "cache.wait_timeout", "must be positive"},
			{11, "origins.a.max_concurrency", "at least 1"},
			{11, "origins.a.connect_timeout", "must be positive"},
			{11, "origins.a.max_early_hints", "must be in [0, 100], got 101"},
		}},
		{"object size", `listen: :80
cache:
  size: 64MiB
  max_object_size: 9MiB
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, nil, []want{{4, "cache.max_object_size", "at most cache.size/8 = 8MiB, got 9MiB"}}},
		{"disk tier", `listen: :80
cache:
  size: 64MiB
  max_object_size: 20MiB
  disk: { size: 1MiB }
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, nil, []want{
			{5, "cache.disk", "requires cache.path"},
			{5, "cache.disk.path", "required with cache.disk"},
			{5, "cache.disk.size", "at least 64MiB, got 1MiB"},
		}},
		{"disk tier object size", `listen: :80
cache:
  size: 64MiB
  max_object_size: 200MiB
  path: /tmp/x
  disk: { path: /tmp/x, size: 512MiB }
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, nil, []want{
			{4, "cache.max_object_size", "at most cache.disk.size/4 = 128MiB, got 200MiB"},
			{6, "cache.disk.path", "must be outside cache.path"},
		}},
		{"origin tls and health", `listen: :80
origins:
  a:
    servers: ["https://x:443"]
    tls: { cert_file: /nonexistent/c.pem, ca_file: /nonexistent/ca.pem, server_name: "bad name" }
    idle_timeout: 0s
    health_check: { path: healthz, interval: 1s, timeout: 2s, healthy: 0, unhealthy: 101 }
routes: [{name: r, hosts: ["*"], origin: a}]
server:
  tls: { cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem, min_version: "1.1" }
cluster:
  node_id: n
  listen: 127.0.0.1:9
  secret: 0123456789abcdef0123
  tls: { cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem }
`, nil, []want{
			{5, "origins.a.tls.key_file", "required with cert_file"},
			{5, "origins.a.tls.ca_file", "no such file"},
			{5, "origins.a.tls.server_name", "invalid host name"},
			{6, "origins.a.idle_timeout", "positive"},
			{7, "origins.a.health_check.path", "starting with"},
			{7, "origins.a.health_check.timeout", "less than interval"},
			{7, "origins.a.health_check.healthy", "[1, 100]"},
			{7, "origins.a.health_check.unhealthy", "[1, 100]"},
			{10, "server.tls.cert_file", "cannot load"},
			{10, "server.tls.min_version", "must be one of"},
			{15, "cluster.tls.ca_file", "required"},
			{15, "cluster.tls.cert_file", "cannot load"},
		}},
		{"trusted proxies", `listen: :80
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
server:
  trusted_proxies:
    - 10.0.0.0/8
    - 192.0.2.1
    - ::ffff:10.1.0.0/112
    - 10.0.0.0/33
    - lb.internal
    - fe80::1%eth0
`, nil, []want{
			{9, "server.trusted_proxies[3]", "not an IP address or CIDR"},
			{10, "server.trusted_proxies[4]", "not an IP address or CIDR"},
			{11, "server.trusted_proxies[5]", "zone"},
		}},
		{"origins", `listen: :80
origins:
  API:
    servers: [x:1]
  b:
    servers: []
  c:
    servers:
      - ftp://c.internal:80
      - c.internal
      - :80
      - c.internal:0
      - c.internal:99
      - c.internal:99
routes: [{name: r, hosts: ["*"], origin: b}]
`, nil, []want{
			{4, "origins.API", `origin name "API" must match`},
			{6, "origins.b.servers", "at least one server"},
			{9, "origins.c.servers[0]", "https://host:port"},
			{10, "origins.c.servers[1]", "must be host:port"},
			{11, "origins.c.servers[2]", "host is empty"},
			{12, "origins.c.servers[3]", "from 1 to 65535"},
			{14, "origins.c.servers[5]", "duplicate of servers[4]"},
		}},
		{"unknown origin", `listen: :80
origins:
  api:
    servers: [x:1]
  web:
    servers: [y:1]
routes:
  - name: r
    hosts: ["*"]
    origin: apii
`, nil, []want{{10, "routes[0].origin", `unknown origin "apii" (defined: api, web)`}}},
		{"routes", `listen: :80
origins: {a: {servers: [x:1]}}
routes:
  - name: Bad
    hosts: ["*.example.com", "example.com:80", "https://example.com", "", "ex ample.com", "[::1]", "[1.2.3.4]"]
    path_prefix: api
    origin: a
    cache:
      default_ttl: -1s
      max_stale: -1h
      ignore_query: [""]
      key_headers: [Accept-Language, "Bad Header"]
  - hosts: []
    origin: ""
  - name: ok
    hosts: [a.example.com]
    path_prefix: /x?y
    origin: a
  - name: ok
    hosts: [b.example.com]
    origin: a
`, nil, []want{
			{4, "routes[0].name", `route name "Bad" must match`},
			{5, "routes[0].hosts[0]", "only wildcard"},
			{5, "routes[0].hosts[1]", "must not include a port"},
			{5, "routes[0].hosts[2]", "without scheme"},
			{5, "routes[0].hosts[3]", "must not be empty"},
			{5, "routes[0].hosts[4]", "invalid character"},
			{5, "routes[0].hosts[6]", "IPv6"},
			{6, "routes[0].path_prefix", `must start with "/"`},
			{9, "routes[0].cache.default_ttl", "must not be negative"},
			{10, "routes[0].cache.max_stale", "must not be negative"},
			{11, "routes[0].cache.ignore_query[0]", "must not be empty"},
			{12, "routes[0].cache.key_headers[1]", "not a valid header name"},
			{13, "routes[1].name", "required"},
			{13, "routes[1].hosts", "at least one host"},
			{14, "routes[1].origin", "required"},
			{17, "routes[2].path_prefix", "without query"},
			{19, "routes[3].name", `duplicate route name "ok" (also routes[2])`},
		}},
		{"conformance keys", `listen: :80
origins: {a: {servers: [x:1]}}
routes:
  - name: r
    hosts: ["*"]
    origin: a
    cache:
      targeted: [CDN-Cache-Control, Cache-Control, "Bad Name"]
      accept_encoding: [br, identity, "*"]
`, nil, []want{
			{8, "routes[0].cache.targeted[1]", "not a targeted field"},
			{8, "routes[0].cache.targeted[2]", "not a valid header name"},
			{9, "routes[0].cache.accept_encoding[1]", "not a content coding"},
			{9, "routes[0].cache.accept_encoding[2]", "not a content coding"},
		}},
		{"shadowed routes", `listen: :80
origins: {a: {servers: [x:1]}}
routes:
  - name: api
    hosts: [API.example.com, www.example.com]
    path_prefix: /api
    origin: a
  - name: api-v2
    hosts: [api.example.com]
    path_prefix: /api/v2
    origin: a
  - name: apiv3
    hosts: [api.example.com]
    path_prefix: /apiv3
    origin: a
  - name: all
    hosts: ["*"]
    origin: a
  - name: late
    hosts: [other.example.com]
    path_prefix: /x
    origin: a
  - name: late-star
    hosts: ["*"]
    path_prefix: /
    origin: a
`, nil, []want{
			{8, "routes[1]", `route "api-v2" can never match: every request for its hosts and path prefix "/api/v2" is taken first by routes[0] ("api")`},
			{19, "routes[4]", `taken first by routes[3] ("all")`},
			{23, "routes[5]", `routes[3] ("all")`},
		}},
		{"shadowed by two routes", `listen: ":80"
origins: {a: {servers: [x:1]}}
routes:
  - {name: x, hosts: [x.example.com], origin: a}
  - {name: y, hosts: [y.example.com], path_prefix: /v1/, origin: a}
  - {name: xy, hosts: [y.example.com, x.example.com], path_prefix: /v1/z, origin: a}
  - {name: xyz, hosts: [y.example.com, x.example.com, z.example.com], path_prefix: /v1/z, origin: a}
`, nil, []want{{6, "routes[2]", `taken first by routes[0] ("x"), routes[1] ("y")`}}},
		{"env expands into a bad value", `listen: ${LISTEN}
origins: {a: {servers: [x:1]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`, map[string]string{"LISTEN": "not an address"}, []want{{1, "listen", `got "not an address"`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml), envOf(tc.env))
			if err == nil {
				t.Fatalf("Parse succeeded, want %d problems", len(tc.want))
			}
			got := problems(t, err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.File != "bad.yaml" || g.Line != w.line || g.Field != w.field || !strings.Contains(g.Msg, w.msg) {
					t.Errorf("problem %d = %q\n want line %d, field %q, message containing %q", i, g, w.line, w.field, w.msg)
				}
				if g.Line == 0 && g.Column != 0 || g.Line > 0 && g.Column == 0 && !strings.HasPrefix(g.Msg, "invalid YAML") {
					t.Errorf("problem %d = %q: line %d with column %d", i, g, g.Line, g.Column)
				}
			}
		})
	}
}

// TestErrorColumn pins the column of the example in the package brief.
func TestErrorColumn(t *testing.T) {
	src := "listen: :80\norigins: {api: {servers: [x:1]}}\nroutes:\n  - name: r\n    hosts: ['*']\n    origin: apii\n"
	_, err := Parse("shield.yaml", []byte(src), noEnv)
	want := `shield.yaml:6:13: routes[0].origin: unknown origin "apii" (defined: api)`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse error = %v, want %q", err, want)
	}
}

// TestAliasAbuse checks that self-referencing merges and alias fan-out end
// in an error instead of running away.
func TestAliasAbuse(t *testing.T) {
	var bomb strings.Builder
	bomb.WriteString("listen: \":80\"\norigins: {a: {servers: [x:1]}}\nroutes:\n")
	bomb.WriteString("  - {name: r0, hosts: [\"*\"], origin: a, cache: &m0 {default_ttl: 1s}}\n")
	for i := 1; i <= 9; i++ {
		// Each policy merges eight copies of the previous: 8^9 if expanded.
		prev := fmt.Sprintf("*m%d", i-1)
		fmt.Fprintf(&bomb, "  - {name: r%d, hosts: [\"*\"], origin: a, cache: &m%d {<<: [%s]}}\n",
			i, i, strings.Repeat(prev+", ", 7)+prev)
	}
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"self merge", "log: &l\n  <<: *l\n  level: info\n", "merges (<<) nested too deeply"},
		{"self alias", "routes: &r\n  - *r\n", "expected a mapping"},
		{"fan-out", bomb.String(), "expands too many aliases"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml), noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
