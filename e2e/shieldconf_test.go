package e2e

import (
	"bytes"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/shield-proxy/shield/config"
)

// One place builds every shield configuration file the e2e tests start:
// buildConfig. Tests describe a node with the config package's own types,
// so a schema change is a compile error here (or a config.Parse error
// naming the field), not a silently different YAML template per test
// area.
//
// A configuration is built in three steps:
//
//  1. sparse: options of kind with(func(*config.Config)) fill a
//     zero-valued Config; a zero field means "shield's default", exactly
//     as a key left out of a hand-written file;
//  2. yamlSection(text) merges hand-written YAML (a test's routes or
//     tenants, say) over that, keeping explicit zeros;
//  3. config.Parse fills every default, then exactly(func(*config.Config))
//     options set values on the complete configuration, where a zero is a
//     zero (slow_start: 0s, hit_for_miss: 0).
//
// The result is marshalled and parsed once more, so a test never starts a
// shield on a file shield would reject.
type confOpt struct {
	sparse func(*config.Config)
	yaml   string
	exact  func(*config.Config)
}

// with changes the sparse configuration: zero fields get shield's defaults.
func with(f func(*config.Config)) confOpt { return confOpt{sparse: f} }

// exactly changes the complete configuration, after defaults.
func exactly(f func(*config.Config)) confOpt { return confOpt{exact: f} }

// yamlSection merges text, a YAML mapping, over the sparse configuration:
// mappings merge key by key, anything else (lists, scalars) replaces.
func yamlSection(text string) confOpt { return confOpt{yaml: text} }

// demoNode is the configuration most tests start from: listeners, a 32 MiB
// cache with 1 MiB objects, origin "demo" at originAddr (2 s timeout, 64 in
// flight) and one route "demo" for every host.
func demoNode(listen, admin, originAddr string) confOpt {
	return with(func(c *config.Config) {
		c.Listen = listen
		c.Admin.Listen = admin
		c.Cache.Size = 32 * config.MiB
		c.Cache.MaxObjectSize = config.MiB
		c.Origins = map[string]*config.Origin{"demo": {
			Servers: []string{originAddr}, Timeout: 2e9, MaxConcurrency: 64,
		}}
		c.Routes = []*config.Route{{Name: "demo", Hosts: []string{"*"}, PathPrefix: "/", Origin: "demo"}}
	})
}

// buildConfig returns the text of a complete, valid configuration.
func buildConfig(t testing.TB, opts ...confOpt) string {
	t.Helper()
	sparse := &config.Config{}
	for _, o := range opts {
		if o.sparse != nil {
			o.sparse(sparse)
		}
	}
	doc := toNode(t, sparse)
	pruneZero(doc)
	for _, o := range opts {
		if o.yaml == "" {
			continue
		}
		var frag yaml.Node
		if err := yaml.Unmarshal([]byte(o.yaml), &frag); err != nil {
			t.Fatalf("e2e config: section does not parse: %v\n%s", err, o.yaml)
		}
		if len(frag.Content) == 1 {
			mergeNode(doc, frag.Content[0])
		}
	}
	c := parse(t, encode(t, doc))
	for _, o := range opts {
		if o.exact != nil {
			o.exact(c)
		}
	}
	text := encode(t, toNode(t, c))
	parse(t, text) // what the test starts shield on must be valid
	return text
}

func parse(t testing.TB, text string) *config.Config {
	t.Helper()
	c, err := config.Parse("e2e.yaml", []byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("e2e config is invalid: %v\n%s", err, text)
	}
	return c
}

func toNode(t testing.TB, v any) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		t.Fatalf("e2e config: encode: %v", err)
	}
	return &n
}

func encode(t testing.TB, n *yaml.Node) string {
	t.Helper()
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		t.Fatalf("e2e config: encode: %v", err)
	}
	_ = enc.Close()
	return b.String()
}

// yamlInto decodes text (a YAML mapping, e.g. "{open_for: 1s}") over
// *dst, a part of a complete configuration: keys it names are set, others
// keep their values, unknown keys fail the test.
func yamlInto(t testing.TB, text string, dst any) {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil {
		t.Fatalf("e2e config: %q: %v", text, err)
	}
}

// pruneZero drops, recursively, mapping entries whose value is a zero
// scalar or an empty mapping or list, so that config.Parse treats them as
// absent and applies its defaults. List elements are kept as they are.
func pruneZero(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			pruneZero(c)
		}
		return false
	case yaml.MappingNode:
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !pruneZero(n.Content[i+1]) {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
		return len(kept) == 0
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if c.Kind == yaml.MappingNode {
				pruneZero(c)
			}
		}
		return len(n.Content) == 0
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return true
		}
		// Size marshals its zero as the quoted string "0".
		switch strings.TrimSpace(n.Value) {
		case "", "0", "0s", "0B", "false":
			return true
		}
	}
	return false
}

// mergeNode merges src over dst: mappings key by key, anything else
// replaces.
func mergeNode(dst, src *yaml.Node) {
	if dst.Kind == yaml.DocumentNode {
		if len(dst.Content) == 0 {
			dst.Content = []*yaml.Node{src}
			return
		}
		dst = dst.Content[0]
	}
	if dst.Kind != yaml.MappingNode || src.Kind != yaml.MappingNode {
		*dst = *src
		return
	}
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		found := false
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value == k.Value {
				mergeNode(dst.Content[j+1], v)
				found = true
				break
			}
		}
		if !found {
			dst.Content = append(dst.Content, k, v)
		}
	}
}

// TestBuildConfig checks the builder itself: defaults fill what a test
// leaves zero, sections and exact values win, and a bad option fails.
func TestBuildConfig(t *testing.T) {
	text := buildConfig(t,
		demoNode("127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"),
		yamlSection("cache: { hit_for_miss: 0s }\norigins: { demo: { breaker: { consecutive_failures: 3 } } }"),
		exactly(func(c *config.Config) { c.Origins["demo"].SlowStart = 0 }),
	)
	c := parse(t, text)
	if c.Listen != "127.0.0.1:1001" || c.Origins["demo"].Servers[0] != "127.0.0.1:1003" {
		t.Errorf("listen/origin not kept:\n%s", text)
	}
	if c.Server.ReadTimeout == 0 || c.Cache.MaxWaiters == 0 {
		t.Errorf("defaults not applied (read_timeout %v, max_waiters %d):\n%s", c.Server.ReadTimeout, c.Cache.MaxWaiters, text)
	}
	if c.Cache.HitForMiss != 0 {
		t.Errorf("an explicit hit_for_miss: 0s from a section was replaced by %v", c.Cache.HitForMiss)
	}
	if c.Origins["demo"].Breaker.ConsecutiveFailures != 3 || c.Origins["demo"].SlowStart != 0 {
		t.Errorf("section or exact value lost:\n%s", text)
	}
}
