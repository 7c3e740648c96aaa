package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree against the Config types by their yaml
// tags. Walking the tree ourselves (rather than yaml.Decoder.KnownFields)
// gives every problem a dotted field path and a column, lets ${VAR}
// expansion see only string values, and records which keys were present so
// defaults can tell "absent" from an explicit zero.
type decoder struct {
	file   string
	lookup func(string) (string, bool)
	errs   []*Error
	// nodes holds the value node of every non-null setting present in the
	// file, by field path ("" is the root mapping).
	nodes map[string]*yaml.Node
	// budget bounds the nodes visited, so aliases and merges that fan out
	// (a "billion laughs" file) cannot make decoding take forever.
	budget int
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	sizeType     = reflect.TypeFor[Size]()
)

// maxMergeDepth bounds nested and self-referencing "<<" merge keys.
const maxMergeDepth = 16

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// spend takes cost from the budget and reports whether any was left; the
// first time it runs out it records an error.
func (d *decoder) spend(n *yaml.Node, path string, cost int) bool {
	if d.budget < 0 {
		return false
	}
	if d.budget -= cost; d.budget < 0 {
		d.errorf(n, path, "document is too large or expands too many aliases")
		return false
	}
	return true
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decode stores n into v. A null node means "not set": v keeps its zero
// value and path is not recorded as present.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if n == nil || isNull(n) {
		return
	}
	if !d.spend(n, path, 1) {
		return
	}
	d.nodes[path] = n
	switch {
	case v.Type() == durationType:
		d.duration(n, v, path)
		return
	case v.Type() == sizeType:
		if s, ok := d.scalar(n, path, "a size"); ok {
			size, err := ParseSize(s)
			if err != nil {
				d.errorf(n, path, "%v", err)
				return
			}
			v.SetInt(int64(size))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		// An optional section (e.g. tenants): present means allocated.
		p := reflect.New(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		if s, ok := d.scalar(n, path, "true or false"); ok {
			switch s {
			case "true":
				v.SetBool(true)
			case "false":
				v.SetBool(false)
			default:
				d.errorf(n, path, "expected true or false, got %q", s)
			}
		}
	case reflect.Int, reflect.Int64:
		if s, ok := d.scalar(n, path, "an integer"); ok {
			i, err := strconv.ParseInt(s, 10, v.Type().Bits())
			switch {
			case errors.Is(err, strconv.ErrRange):
				d.errorf(n, path, "integer %q is out of range", s)
			case err != nil:
				d.errorf(n, path, "expected an integer, got %q", s)
			default:
				v.SetInt(i)
			}
		}
	case reflect.Float64:
		if s, ok := d.scalar(n, path, "a number"); ok {
			f, err := strconv.ParseFloat(s, 64)
			switch {
			case err != nil, math.IsNaN(f), math.IsInf(f, 0):
				d.errorf(n, path, "expected a number, got %q", s)
			default:
				v.SetFloat(f)
			}
		}
	default:
		// Only reachable if config.go gains a field of a new kind.
		panic(fmt.Sprintf("config: BUG: no decoder for %s at %s", v.Type(), path))
	}
}

// scalar returns n's value with ${VAR} references expanded. Only string
// scalars are expanded: keys, numbers and booleans never contain "${".
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "expected %s, got %s", want, kindName(n))
		return "", false
	}
	if n.ShortTag() != "!!str" {
		return n.Value, true
	}
	s, err := expandEnv(n.Value, d.lookup)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return "", false
	}
	return s, true
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, "a duration")
	if !ok {
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			d.errorf(n, path, "duration %q needs a unit, e.g. \"%ss\" or \"%sms\"", s, s, s)
			return
		}
		d.errorf(n, path, "invalid duration %q: want a number with a unit (ms, s, m, h), e.g. \"500ms\" or \"1m30s\"", s)
		return
	}
	v.SetInt(int64(dur))
}

// field finds the struct field whose yaml tag is name.
func field(t reflect.Type, name string) (int, bool) {
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == name {
			return i, true
		}
	}
	return 0, false
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping of settings, got %s", kindName(n))
		return
	}
	t := v.Type()
	for _, p := range d.pairs(n, path, 0) {
		sub := join(path, p.key.Value)
		i, ok := field(t, p.key.Value)
		if !ok {
			d.errorf(p.key, sub, "unknown setting %q%s", p.key.Value, suggest(t, p.key.Value))
			continue
		}
		d.decode(p.value, v.Field(i), sub)
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping of names to settings, got %s", kindName(n))
		return
	}
	pairs := d.pairs(n, path, 0)
	if len(pairs) == 0 {
		return // an empty mapping is the same as none (nil)
	}
	m := reflect.MakeMapWithSize(v.Type(), len(pairs))
	for _, p := range pairs {
		elem := d.element(p.value, v.Type().Elem(), join(path, p.key.Value))
		m.SetMapIndex(reflect.ValueOf(p.key.Value), elem)
	}
	v.Set(m)
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list, got %s", kindName(n))
		return
	}
	if len(n.Content) == 0 {
		return // an empty list is the same as none (nil)
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		s.Index(i).Set(d.element(e, v.Type().Elem(), fmt.Sprintf("%s[%d]", path, i)))
	}
	v.Set(s)
}

// element decodes one map or list element of type t, allocating it when t
// is a pointer (a null element becomes a pointer to the zero value, which
// validation then reports field by field).
func (d *decoder) element(n *yaml.Node, t reflect.Type, path string) reflect.Value {
	if t.Kind() == reflect.Pointer {
		p := reflect.New(t.Elem())
		d.decode(n, p.Elem(), path)
		return p
	}
	e := reflect.New(t).Elem()
	d.decode(n, e, path)
	return e
}

type pair struct{ key, value *yaml.Node }

// pairs lists a mapping's entries in order, reporting non-scalar and
// duplicate keys, and applies YAML merge keys ("<<: *defaults"): merged
// entries come after the explicit ones and never override them.
func (d *decoder) pairs(n *yaml.Node, path string, depth int) []pair {
	if !d.spend(n, path, 1+len(n.Content)/2) {
		return nil
	}
	var out []pair
	var merges []*yaml.Node
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		switch {
		case k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge":
			merges = append(merges, n.Content[i+1])
		case k.Kind != yaml.ScalarNode:
			d.errorf(k, path, "keys must be plain names, got %s", kindName(k))
		case seen[k.Value] != nil:
			d.errorf(k, join(path, k.Value), "duplicate key %q (first set on line %d)", k.Value, seen[k.Value].Line)
		default:
			seen[k.Value] = k
			out = append(out, pair{k, n.Content[i+1]})
		}
	}
	for _, m := range merges {
		m = resolve(m)
		var sources []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			sources = []*yaml.Node{m}
		case yaml.SequenceNode:
			for _, s := range m.Content {
				sources = append(sources, resolve(s))
			}
		}
		for _, s := range sources {
			if s.Kind != yaml.MappingNode {
				d.errorf(s, path, "a merge (<<) takes a mapping or a list of mappings, got %s", kindName(s))
				continue
			}
			if depth >= maxMergeDepth {
				d.errorf(s, path, "merges (<<) nested too deeply")
				continue
			}
			for _, p := range d.pairs(s, path, depth+1) {
				if seen[p.key.Value] == nil {
					seen[p.key.Value] = p.key
					out = append(out, p)
				}
			}
		}
		if len(sources) == 0 {
			d.errorf(m, path, "a merge (<<) takes a mapping or a list of mappings, got %s", kindName(m))
		}
	}
	return out
}

// join appends a key to a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest names the closest known setting of t, or lists them all.
func suggest(t reflect.Type, name string) string {
	var names []string
	best, bestDist := "", 3 // suggest only within two edits
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		names = append(names, tag)
		if dist := editDistance(strings.ToLower(name), tag); dist < bestDist {
			best, bestDist = tag, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return " (known: " + strings.Join(names, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 {
		return len(a) // not a typo of a short setting name; skip the work
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
