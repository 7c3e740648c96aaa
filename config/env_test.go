package config

import (
	"strings"
	"testing"
)

func TestExpandEnv(t *testing.T) {
	env := envOf(map[string]string{"HOST": "db.internal", "PORT": "5432", "EMPTY": "", "SECRET": "a:b #c ${NOPE}"})
	tests := []struct {
		in, want, err string
	}{
		{in: "plain", want: "plain"},
		{in: "${HOST}:${PORT}", want: "db.internal:5432"},
		{in: "x${HOST}y", want: "xdb.internaly"},
		{in: "${SECRET}", want: "a:b #c ${NOPE}"}, // values are not expanded again
		{in: "$${HOST}", want: "${HOST}"},
		{in: "$$${HOST}", want: "$${HOST}"},
		{in: "cost $5 and $HOST", want: "cost $5 and $HOST"},
		{in: "$", want: "$"},
		{in: "${MISSING:-fallback}", want: "fallback"},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${HOST:-fallback}", want: "db.internal"},
		{in: "${MISSING:-}", want: ""},
		{in: "${MISSING:-a:-b}", want: "a:-b"},
		{in: "${EMPTY}", want: ""},
		{in: "${MISSING}", err: "environment variable MISSING is not set"},
		{in: "${HOST", err: "unterminated"},
		{in: "${}", err: "invalid variable reference"},
		{in: "${1A}", err: "invalid variable reference"},
		{in: "${A-b}", err: "invalid variable reference"},
		{in: "${A:?b}", err: "invalid variable reference"},
		{in: "${A:-${B}}", err: "nested"},
	}
	for _, tc := range tests {
		got, err := expandEnv(tc.in, env)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("expandEnv(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestParseEnv checks expansion inside a real file: values containing YAML
// syntax stay values, line numbers stay those of the file, only string
// values are expanded, and typed settings accept expanded plain scalars.
func TestParseEnv(t *testing.T) {
	src := `# ${NOT_EXPANDED} in a comment
listen: ${LISTEN}
origins:
  api:
    servers: ["${API_HOST}:${API_PORT:-8080}"]
    max_concurrency: ${CONC}
    timeout: ${TIMEOUT:-3s}
cache:
  path: "$${literal}/${DIR}"
  size: ${CACHE_SIZE}
routes:
  - name: api
    hosts: ["*"]
    origin: api
    cache:
      ignore_query: ["${IGNORED}"]
      disabled: ${DISABLED}
`
	env := map[string]string{
		"LISTEN": "127.0.0.1:8080", "API_HOST": "10.0.0.7", "CONC": "32", "DIR": "/var/cache",
		"CACHE_SIZE": "64MiB", "IGNORED": "key: value # not a comment", "DISABLED": "true",
	}
	c, err := Parse("env.yaml", []byte(src), envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", c.Listen, "127.0.0.1:8080"},
		{"servers[0]", c.Origins["api"].Servers[0], "10.0.0.7:8080"},
		{"max_concurrency", c.Origins["api"].MaxConcurrency, 32},
		{"timeout", c.Origins["api"].Timeout.String(), "3s"},
		{"cache.path", c.Cache.Path, "${literal}//var/cache"},
		{"cache.size", c.Cache.Size, 64 * MiB},
		{"ignore_query", c.Routes[0].Cache.IgnoreQuery[0], "key: value # not a comment"},
		{"disabled", c.Routes[0].Cache.Disabled, true},
	}
	for _, tc := range checks {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	// The same file with one variable missing: the error names its line
	// and field, and nothing else is reported.
	delete(env, "CONC")
	_, err = Parse("env.yaml", []byte(src), envOf(env))
	got := problems(t, err)
	if len(got) != 1 || got[0].Line != 6 || got[0].Column != 22 || got[0].Field != "origins.api.max_concurrency" {
		t.Fatalf("Parse without CONC = %v, want one problem at 6:22 origins.api.max_concurrency", err)
	}
}

// TestParseEnvNotInKeys checks that keys are never expanded: a key is
// schema, and expanding it would let the environment add settings.
func TestParseEnvNotInKeys(t *testing.T) {
	src := "listen: :80\n${KEY}: x\n"
	_, err := Parse("k.yaml", []byte(src), envOf(map[string]string{"KEY": "admin"}))
	got := problems(t, err)
	if len(got) != 1 || got[0].Line != 2 || got[0].Field != "${KEY}" || !strings.Contains(got[0].Msg, "unknown setting") {
		t.Fatalf("Parse = %v, want unknown setting \"${KEY}\" on line 2", err)
	}
}
