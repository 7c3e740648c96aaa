package config

import (
	"strings"
	"testing"
	"time"
)

// TestOverloadKeys: the overload controls' settings (routes[].cost, …)
// default as documented and are rejected out of range with file:line.
func TestOverloadKeys(t *testing.T) {
	const head = "listen: :80\norigins: {a: {servers: [x:1]}}\nroutes:\n"
	c, err := Parse("ok.yaml", []byte(head+"  - {name: r, hosts: [a.example], origin: a}\n  - {name: s, hosts: [b.example], origin: a, cost: 5}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Routes[0].Cost; got != 1 {
		t.Errorf("routes[0].cost default = %d, want 1", got)
	}
	if got := c.Routes[1].Cost; got != 5 {
		t.Errorf("routes[1].cost = %d, want 5", got)
	}
	if got := c.Routes[0].Priority; got != "normal" {
		t.Errorf("routes[0].priority default = %q, want normal", got)
	}
	if got := c.Origins["a"].QueueTimeout; got != 50*time.Millisecond {
		t.Errorf("origins.a.queue_timeout default = %v, want 50ms", got)
	}

	tests := []struct {
		name, yaml string
		want       []want
	}{
		{"cost", head + `  - name: r
    hosts: [a.example]
    origin: a
    cost: 0
  - name: s
    hosts: [b.example]
    path_prefix: /s
    origin: a
    cost: 1000001
`, []want{
			{7, "routes[0].cost", "must be in [1, 1000000] tokens, got 0"},
			{12, "routes[1].cost", "got 1000001"},
		}},
		{"priority and queue_timeout", `listen: :80
origins:
  a: {servers: [x:1], queue_timeout: -1ms}
  b: {servers: [x:1], queue_timeout: 11s}
routes:
  - {name: r, hosts: [a.example], origin: a, priority: urgent}
  - {name: s, hosts: [b.example], origin: b, priority: High}
`, []want{
			{3, "origins.a.queue_timeout", "must be in [0, 10s] (0: no waiting), got -1ms"},
			{4, "origins.b.queue_timeout", "got 11s"},
			{6, "routes[0].priority", `must be one of low, normal, high, got "urgent"`},
			{7, "routes[1].priority", `got "High"`},
		}},
		{"ttl_jitter", head + `  - {name: r, hosts: [a.example], origin: a, cache: {ttl_jitter: 0.6}}
  - {name: s, hosts: [b.example], origin: a, cache: {ttl_jitter: -0.1}}
`, []want{
			{4, "routes[0].cache.ttl_jitter", "must be a fraction in [0, 0.5], got 0.6"},
			{5, "routes[1].cache.ttl_jitter", "got -0.1"},
		}},
		{"shuffle_shard", `listen: :80
origins:
  a: {servers: [x:1, y:1], shuffle_shard: 3}
  b: {servers: [x:1], shuffle_shard: -1}
routes:
  - {name: r, hosts: [a.example], origin: a}
  - {name: s, hosts: [b.example], origin: b}
`, []want{
			{3, "origins.a.shuffle_shard", "must be in [0, 2] (0: all servers; at most the number of servers), got 3"},
			{4, "origins.b.shuffle_shard", "must be in [0, 1]"},
		}},
		{"eager_refresh", head + `  - {name: r, hosts: [a.example], origin: a, cache: {eager_refresh: 1}}
  - {name: s, hosts: [b.example], origin: a, cache: {eager_refresh: -0.5}}
`, []want{
			{4, "routes[0].cache.eager_refresh", "must be a fraction of the lifetime in (0, 1), or 0 (off), got 1"},
			{5, "routes[1].cache.eager_refresh", "got -0.5"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml), noEnv)
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
			}
		})
	}
}
