package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"gopkg.in/yaml.v3"
)

// Load reads the file at path and returns its configuration: ${VAR}
// references expanded from the process environment, defaults applied and
// every setting validated. Problems in the file come back joined, each an
// *Error naming path, line and field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// Parse does what Load does for a file already read. name is used in error
// messages only. lookupEnv resolves ${VAR} references; it is os.LookupEnv
// in production, and nil means the same.
//
// Problems are reported in two phases, each complete: first the file's
// shape (YAML syntax, unknown or duplicate keys, wrong types, unset
// variables), then, if the shape is right, the values. Reporting values of
// a misshapen file would add noise about settings that are merely unread.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if name == "" {
		name = "<config>"
	}
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	root, perr := parseDocument(name, data)
	if perr != nil {
		return nil, perr
	}
	d := &decoder{
		file:   name,
		lookup: lookupEnv,
		nodes:  make(map[string]*yaml.Node),
		budget: 16*len(data) + 4096,
	}
	c := new(Config)
	d.decode(root, reflect.ValueOf(c).Elem(), "")
	if err := joinErrors(d.errs); err != nil {
		return nil, err
	}
	applyDefaults(c, d.has)
	applyProtectionDefaults(c, d.has)
	applyClusterDefaults(c, d.has)
	normalize(c)
	d.validate(c)
	if err := joinErrors(d.errs); err != nil {
		return nil, err
	}
	return c, nil
}

// normalize puts values in the one form consumers compare: route hosts are
// matched case-insensitively, so they are stored lower-case.
func normalize(c *Config) {
	for _, r := range c.Routes {
		for i, h := range r.Hosts {
			r.Hosts[i] = asciiLower(h)
		}
	}
}

// asciiLower lower-cases ASCII letters only; host names are ASCII (IDNs
// are written in punycode) and anything else is left for validation to
// report as written.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// parseDocument parses data as exactly one YAML document whose top level is
// a mapping, and returns that mapping.
func parseDocument(name string, data []byte) (root *yaml.Node, err error) {
	// yaml.v3 is archived; should it panic on some input, that input is a
	// bad file, not a reason to crash a reload.
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, &Error{File: name, Msg: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "the file is empty (or only comments): listen, origins and routes are required"}
		}
		return nil, syntaxError(name, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(name, data, err)
	default:
		return nil, &Error{File: name, Line: max(extra.Line, 1), Column: max(extra.Column, 1),
			Msg: "a second YAML document starts here; the configuration must be a single document"}
	}
	if len(doc.Content) == 0 || isNull(resolve(doc.Content[0])) {
		return nil, &Error{File: name, Msg: "the file is empty (or only comments): listen, origins and routes are required"}
	}
	root = resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Column: root.Column,
			Msg: fmt.Sprintf("the top level must be a mapping of settings (listen, origins, routes, ...), got %s", kindName(root))}
	}
	return root, nil
}
