package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"
)

// yamlBreakRE splits lines as the YAML scanner does; it is the slow
// reference for the positions Parse reports.
var yamlBreakRE = regexp.MustCompile("\r\n|\r|\n|\u0085|\u2028|\u2029")

// FuzzParse checks three properties of Parse on arbitrary input:
//   - it never panics;
//   - every error is a non-empty *Error whose line, when known, lies within
//     the input;
//   - a config it accepts, marshalled by yaml.Marshal and parsed again,
//     comes back deep-equal (defaults, normalisation and the Size and
//     duration forms are all stable).
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range seeds {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"listen: ${A}\norigins: {a: {servers: [\"${B:-x}:1\"]}}\nroutes: [{name: r, hosts: ['*'], origin: a}]\n",
		"listen: :80\n---\nlisten: :81\n",
		"a: &a {<<: *a}\n",
		"- [",
	} {
		f.Add([]byte(s))
	}
	env := envOf(map[string]string{"A": "127.0.0.1:1", "B": "h:o#s t", "E": ""})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, env)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a config and an error %v", err)
			}
			checkErrors(t, data, err)
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if bytes.Contains(out, []byte("${")) {
			// A value holding "${" (from $${ or the environment) would be
			// expanded again; yaml.Marshal knows nothing of our escape.
			return
		}
		again, err := Parse("again.yaml", out, env)
		if err != nil {
			t.Fatalf("re-parse of accepted config failed: %v\ninput:\n%s\nmarshalled:\n%s", err, data, out)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip changed the config\ninput:\n%s\nmarshalled:\n%s", data, out)
		}
	})
}

// checkErrors asserts that err is made of well-formed *Error values
// pointing inside data.
func checkErrors(t *testing.T, data []byte, err error) {
	t.Helper()
	if err.Error() == "" {
		t.Fatal("empty error")
	}
	lines := len(yamlBreakRE.Split(string(data), -1))
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	for _, p := range parts {
		var e *Error
		if !errors.As(p, &e) {
			t.Fatalf("error %q is a %T, want *Error", p, p)
		}
		if e.Msg == "" || e.File != "fuzz.yaml" {
			t.Fatalf("malformed error %#v", e)
		}
		if e.Line < 0 || e.Line > lines || e.Column < 0 || (e.Line == 0 && e.Column != 0) {
			t.Fatalf("error %q points outside the %d-line input", e, lines)
		}
	}
}
