package config

import (
	"strings"
	"testing"
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
