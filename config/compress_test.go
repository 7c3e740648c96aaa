package config

import (
	"slices"
	"strings"
	"testing"
)

const compressBase = "listen: :80\norigins: {api: {servers: [x:1]}}\nroutes:\n  - name: r\n    hosts: ['*']\n    origin: api\n"

// TestCompressDefaults: compression is off, with the documented types
// and minimum size ready for when codings are set.
func TestCompressDefaults(t *testing.T) {
	c, err := Parse("ok.yaml", []byte(compressBase), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	rc := c.Routes[0].Compress
	if len(rc.Codings) != 0 || !slices.Equal(rc.Types, DefaultCompressTypes) || rc.MinSize != KiB {
		t.Errorf("compress = %+v; want off, default types, 1KiB", rc)
	}
	c, err = Parse("ok.yaml", []byte(compressBase+"    compress: {codings: [gzip, br], types: [text/html, '+json'], min_size: 0}\n    cache: {accept_encoding: [br, gzip]}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if rc := c.Routes[0].Compress; !slices.Equal(rc.Codings, []string{"gzip", "br"}) || len(rc.Types) != 2 || rc.MinSize != 0 {
		t.Errorf("explicit values not kept: %+v", rc)
	}
}

// TestCompressErrors: unknown or repeated codings, bad media types, a
// negative size and a non-default accept_encoding beside compress are
// errors at their line.
func TestCompressErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []want
	}{
		{"coding", "    compress:\n      codings: [gzip, zstd, gzip]\n", []want{
			{8, "routes[0].compress.codings[1]", `"zstd" is not a coding shield produces`},
			{8, "routes[0].compress.codings[2]", `"gzip" is listed twice`},
		}},
		{"types", "    compress:\n      codings: [br]\n      types: [text, '*/*', '+', 'text/*']\n", []want{
			{9, "routes[0].compress.types[0]", "is not a media type"},
			{9, "routes[0].compress.types[1]", "is not a media type"},
			{9, "routes[0].compress.types[2]", "is not a media type"},
		}},
		{"min_size", "    compress:\n      codings: [br]\n      min_size: -1\n", []want{
			{9, "routes[0].compress.min_size", "must not be negative"},
		}},
		{"two knobs", "    compress: {codings: [br]}\n    cache: {accept_encoding: [gzip]}\n", []want{
			{8, "routes[0].cache.accept_encoding", "not used with compress.codings"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(compressBase+tc.yaml), noEnv)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			got := problems(t, err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, w := range tc.want {
				if g := got[i]; g.Line != w.line || g.Field != w.field || !strings.Contains(g.Msg, w.msg) {
					t.Errorf("problem %d = %q, want line %d, field %q, message containing %q", i, g, w.line, w.field, w.msg)
				}
			}
		})
	}
}
