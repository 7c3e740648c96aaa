package config

import (
	"strings"
	"testing"
)

const http2Base = "listen: :80\norigins: {api: {servers: [x:1]}}\nroutes: [{name: r, hosts: ['*'], origin: api}]\n"

// TestHTTP2Defaults: HTTP/2 is offered by default, cleartext HTTP/2 is
// not, and the limits are the documented ones.
func TestHTTP2Defaults(t *testing.T) {
	c, err := Parse("ok.yaml", []byte(http2Base), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server
	want := HTTP2Limits{MaxConcurrentStreams: 100, MaxFrameSize: 16 * KiB, StreamWindow: 256 * KiB, ConnectionWindow: MiB}
	if !s.HTTP2 || s.H2C || s.HTTP2Limits != want {
		t.Errorf("http2 = %v, h2c = %v, limits = %+v; want true, false, %+v", s.HTTP2, s.H2C, s.HTTP2Limits, want)
	}
	c, err = Parse("ok.yaml", []byte(http2Base+"server: {http2: false, h2c: true, http2_limits: {max_concurrent_streams: 8}}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.HTTP2 || !c.Server.H2C || c.Server.HTTP2Limits.MaxConcurrentStreams != 8 {
		t.Errorf("explicit values not kept: %+v", c.Server)
	}
}

// TestHTTP2Errors: out-of-range limits and h2c with TLS are errors at
// their line, not a silent fallback to the server's own defaults.
func TestHTTP2Errors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []want
	}{
		{"zero streams", "server:\n  http2_limits:\n    max_concurrent_streams: 0\n",
			[]want{{6, "server.http2_limits.max_concurrent_streams", "must be in [1, 10000], got 0"}}},
		{"frame too small", "server:\n  http2_limits:\n    max_frame_size: 1KiB\n",
			[]want{{6, "server.http2_limits.max_frame_size", "must be in [16KiB"}}},
		{"windows", "server:\n  http2_limits:\n    stream_window: 8MiB\n    connection_window: 128KiB\n", []want{
			{6, "server.http2_limits.stream_window", "must be in [64KiB"},
			{7, "server.http2_limits.connection_window", "must be at least stream_window"},
		}},
		{"h2c with tls", "server:\n  h2c: true\n  tls: {cert_file: testdata/nope.pem, key_file: testdata/nope.key}\n", []want{
			{5, "server.h2c", "cleartext HTTP/2 needs a cleartext listener"},
			{6, "server.tls.cert_file", "cannot load"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(http2Base+tc.yaml), noEnv)
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
