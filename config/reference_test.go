package config

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The configuration reference (docs/configuration.md) is written by hand,
// because what a key means, its default and whether a reload applies it
// are decisions, not facts reflection can read. These tests keep it
// complete and honest: every key of the schema has exactly one row, no row
// names a key that does not exist, the type column matches the Go type,
// and a default written as `code` is the value Parse really fills in.

// schemaKey is one key of the YAML schema, with its dotted path
// ("origins.<name>.breaker.open_for", "routes[].cache.max_stale").
type schemaKey struct {
	path string
	typ  reflect.Type
}

// schemaKeys walks t (a struct type) over its yaml tags.
func schemaKeys(t reflect.Type, prefix string, out *[]schemaKey) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		*out = append(*out, schemaKey{p, f.Type})
		descend(f.Type, p, out)
	}
}

func descend(t reflect.Type, p string, out *[]schemaKey) {
	switch t.Kind() {
	case reflect.Pointer:
		descend(t.Elem(), p, out)
	case reflect.Struct:
		schemaKeys(t, p, out)
	case reflect.Map:
		if elemStruct(t.Elem()) {
			schemaKeys(deref(t.Elem()), p+".<name>", out)
		}
	case reflect.Slice:
		if elemStruct(t.Elem()) {
			schemaKeys(deref(t.Elem()), p+"[]", out)
		}
	}
}

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

func elemStruct(t reflect.Type) bool { return deref(t).Kind() == reflect.Struct }

// typeName is the reference's word for a Go type.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == sizeType:
		return "size"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Struct:
		return "mapping"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64:
		return "int"
	case reflect.Float64:
		return "float"
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "map of " + typeName(t.Elem())
	}
	return t.String()
}

// refRow is one row of a reference table.
type refRow struct {
	line                            int
	key, typ, def, unit, reloadable string
}

var keyCell = regexp.MustCompile("^`([a-z0-9_.<>\\[\\]]+)`$")

// readReference parses the tables of docs/configuration.md whose first
// column is a key in backticks.
func readReference(t *testing.T) []refRow {
	t.Helper()
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatalf("the configuration reference: %v", err)
	}
	var rows []refRow
	for i, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) < 6 {
			t.Errorf("docs/configuration.md:%d: want | key | type | default | unit | reload | meaning |, got %d cells", i+1, len(cells))
			continue
		}
		m := keyCell.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("docs/configuration.md:%d: first cell %q is not a `key`", i+1, cells[0])
			continue
		}
		for j, c := range cells[:6] {
			if c == "" {
				t.Errorf("docs/configuration.md:%d: %s: cell %d is empty", i+1, m[1], j+1)
			}
		}
		rows = append(rows, refRow{i + 1, m[1], cells[1], cells[2], cells[3], cells[4]})
	}
	return rows
}

func TestReferenceComplete(t *testing.T) {
	var keys []schemaKey
	schemaKeys(reflect.TypeOf(Config{}), "", &keys)
	rows := readReference(t)
	byKey := map[string]refRow{}
	for _, r := range rows {
		if prev, dup := byKey[r.key]; dup {
			t.Errorf("docs/configuration.md:%d: %s is already documented at line %d", r.line, r.key, prev.line)
		}
		byKey[r.key] = r
	}
	schema := map[string]bool{}
	var missing []string
	for _, k := range keys {
		schema[k.path] = true
		r, ok := byKey[k.path]
		if !ok {
			missing = append(missing, k.path+" ("+typeName(k.typ)+")")
			continue
		}
		if want := typeName(k.typ); r.typ != want {
			t.Errorf("docs/configuration.md:%d: %s: type %q, the schema says %q", r.line, k.path, r.typ, want)
		}
		if r.reloadable != "yes" && r.reloadable != "restart" {
			t.Errorf("docs/configuration.md:%d: %s: reload column is %q, want yes or restart", r.line, k.path, r.reloadable)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md lacks %d schema keys (add a row for each, in its section):\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	var extra []string
	for _, r := range rows {
		if !schema[r.key] {
			extra = append(extra, r.key)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("docs/configuration.md documents keys the schema does not have: %s", strings.Join(extra, ", "))
	}
}

// referenceSample has every optional section present once, so every key
// has a value to compare documented defaults with.
const referenceSample = `
listen: 127.0.0.1:8080
origins:
  o:
    servers: ["127.0.0.1:9000"]
    health_check: {path: /healthz}
routes:
  - name: r
    hosts: ["*"]
    origin: o
tenants:
  identify: {header: X-Tenant}
  default: {rate: 10, max_concurrency: 4}
  classes:
    c: {rate: 10, max_concurrency: 4}
cluster:
  node_id: a
  listen: 127.0.0.1:7946
  secret: 0123456789abcdef
  peers:
    - {id: a, addr: "127.0.0.1:7946"}
`

// TestReferenceDefaults checks every default written as `code` against
// what Parse fills in for a file that leaves the key out.
func TestReferenceDefaults(t *testing.T) {
	c, err := Parse("sample.yaml", []byte(referenceSample), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range readReference(t) {
		lit, ok := strings.CutPrefix(r.def, "`")
		if !ok {
			continue // prose: "required", "the host name", ...
		}
		lit = strings.TrimSuffix(lit, "`")
		v, ok := lookupPath(reflect.ValueOf(c).Elem(), r.key)
		if !ok {
			continue // inside a section the sample leaves out (TLS files)
		}
		if got := valueString(v); !sameValue(v, lit) {
			t.Errorf("docs/configuration.md:%d: %s: documented default %s, Parse fills in %s", r.line, r.key, lit, got)
		}
		checked++
	}
	if checked < 40 {
		t.Errorf("only %d defaults checked; the sample or the reference lost its literals", checked)
	}
}

// lookupPath follows a reference path into v: <name> takes the only map
// entry, [] the first element.
func lookupPath(v reflect.Value, path string) (reflect.Value, bool) {
	for _, part := range strings.Split(strings.ReplaceAll(path, "[]", ".[]"), ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		switch {
		case part == "<name>" && v.Kind() == reflect.Map:
			keys := v.MapKeys()
			if len(keys) == 0 {
				return v, false
			}
			v = v.MapIndex(keys[0])
		case part == "[]" && v.Kind() == reflect.Slice:
			if v.Len() == 0 {
				return v, false
			}
			v = v.Index(0)
		case v.Kind() == reflect.Struct:
			i, ok := fieldByTag(v.Type(), part)
			if !ok {
				return v, false
			}
			v = v.Field(i)
		default:
			return v, false
		}
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, true
}

func fieldByTag(t reflect.Type, name string) (int, bool) {
	for i := 0; i < t.NumField(); i++ {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); n == name {
			return i, true
		}
	}
	return 0, false
}

func valueString(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Type() == sizeType:
		return Size(v.Int()).String()
	}
	return fmtAny(v)
}

func fmtAny(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.String:
		return strconv.Quote(v.String())
	}
	return v.Type().String()
}

// sameValue reports whether the literal lit, read as v's type, equals v.
func sameValue(v reflect.Value, lit string) bool {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(lit)
		return err == nil && int64(d) == v.Int()
	case v.Type() == sizeType:
		s, err := ParseSize(lit)
		return err == nil && int64(s) == v.Int()
	}
	switch v.Kind() {
	case reflect.String:
		return strings.Trim(lit, `"`) == v.String()
	case reflect.Bool:
		b, err := strconv.ParseBool(lit)
		return err == nil && b == v.Bool()
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(lit, 10, 64)
		return err == nil && n == v.Int()
	case reflect.Float64:
		f, err := strconv.ParseFloat(lit, 64)
		return err == nil && f == v.Float()
	case reflect.Slice, reflect.Map:
		if (lit == "[]" || lit == "{}") && v.Len() == 0 {
			return true
		}
		if k := v.Type().Elem().Kind(); v.Kind() == reflect.Slice && (k == reflect.String || k == reflect.Int) &&
			strings.HasPrefix(lit, "[") && strings.HasSuffix(lit, "]") {
			items := strings.Split(lit[1:len(lit)-1], ",")
			if len(items) != v.Len() {
				return false
			}
			for i, it := range items {
				if !sameValue(v.Index(i), strings.TrimSpace(it)) {
					return false
				}
			}
			return true
		}
	}
	return false
}
