package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// roundTrip marshals c and parses it again, failing unless the result is
// deep-equal: a parsed Config holds every default explicitly, so writing it
// out (e.g. for an admin "effective config" view) and reading it back is
// lossless.
func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	again, err := Parse("again.yaml", out, noEnv)
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(c, again) {
		t.Fatalf("round trip changed the config:\n%s", out)
	}
}

func TestRoundTripTestdata(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range append(files, "../config.example.yaml") {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
}

// TestRoundTripStrings pushes awkward free-form strings (cache.path and a
// query parameter name take anything) through the round trip.
func TestRoundTripStrings(t *testing.T) {
	for _, s := range []string{
		"a: b", "#x", "- x", "  lead", "trail ", "multi\nline", "crlf\r\n", "null", "~", "true", "off", "0x10", "1e3",
		"'", `"`, "é", "tab\there", "\x7f", "[x]", "{x}", "*a", "&a", "!tag", "%x", "@x", "`x`", "|", ">",
		strings.Repeat("long words ", 30),
	} {
		t.Run(fmt.Sprintf("%q", s), func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(`listen: ":80"
origins: {a: {servers: ["x:1"]}}
routes: [{name: r, hosts: ["*"], origin: a}]
`), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			c.Cache.Path = s
			c.Routes[0].Cache.IgnoreQuery = []string{s}
			roundTrip(t, c)
		})
	}
}
