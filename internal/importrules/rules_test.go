package importrules

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, two levels up from this package.
const root = "../.."

// rooms are proxy's sub-packages and the other proxy packages each may
// import (docs/architecture.md §2): the leaf helpers and the raw socket
// calls none, the cache none, the origins and the cluster the helpers
// only, and the listener, the origins and the cluster the raw socket
// calls (the cluster gets entries as bytes, never from the cache or the
// origins).
// proxy itself is
// in no list: nothing below proxy imports it. A new room must be added
// here, with its arrows, before it can exist.
var rooms = map[string][]string{
	"proxy/httpx":    nil,
	"proxy/cache":    nil,
	"proxy/upstream": {"proxy/httpx", "proxy/rawio"},
	"proxy/cluster":  {"proxy/httpx", "proxy/rawio"},
	"proxy/listener": {"proxy/httpx", "proxy/rawio"},
	"proxy/rawio":    nil,
}

// projectOnly are the project packages (outside proxy) a room may import
// at all; a room not named here may import any of them. The leaf helpers
// use the configuration's types and nothing else of the project; the raw
// socket calls (proxy/rawio) nothing at all.
var projectOnly = map[string][]string{
	"proxy/httpx":    {"config"},
	"proxy/listener": {"config"},
	"proxy/rawio":    {},
}

// unreachable are import path prefixes a package may not reach, directly
// or through the project's own packages, and why.
var unreachable = map[string]struct{ prefix, why string }{
	"proxy/cache": {"github.com/valyala/fasthttp", "the cache holds entries as bytes; fasthttp stays on the request path"},
}

// proxyImporters are the only packages whose non-test files may import
// proxy (docs/architecture.md §2): the binary and the benchmarks.
func proxyImporter(rel string) bool {
	return rel == "cmd/shield" || strings.HasPrefix(rel, "bench/")
}

// pkg is one directory of the module: its non-test imports, each with
// the first file that imports it.
type pkg struct {
	imports map[string]string // import path → file (relative to root)
}

// load reads the module path and every package's imports. Directories
// holding their own go.mod (tools/...) are other modules and skipped,
// as are testdata, build outputs and hidden directories.
func load(t *testing.T) (module string, pkgs map[string]*pkg) {
	t.Helper()
	module = modulePath(t)
	pkgs = map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name == "bin" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := pkgs[dir]
		if p == nil {
			p = &pkg{imports: map[string]string{}}
			pkgs[dir] = p
		}
		for _, is := range f.Imports {
			ip, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", rel, is.Path.Value, err)
			}
			if _, ok := p.imports[ip]; !ok {
				p.imports[ip] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The test must be reading the project: proxy exists and imports its
	// helpers, or every rule below would pass on nothing.
	if p := pkgs["proxy"]; p == nil || p.imports[module+"/proxy/httpx"] == "" || len(pkgs) < 15 {
		t.Fatalf("read %d packages from %s (module %s), proxy importing proxy/httpx not among them: is root the repository?", len(pkgs), root, module)
	}
	return module, pkgs
}

func modulePath(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatalf("go.mod names no module (%v)", sc.Err())
	return ""
}

// local returns ip relative to the module ("proxy/httpx"), or false for
// an import from outside it.
func local(module, ip string) (string, bool) {
	if ip == module {
		return ".", true
	}
	return strings.CutPrefix(ip, module+"/")
}

func underProxy(rel string) bool { return rel == "proxy" || strings.HasPrefix(rel, "proxy/") }

// violations returns every forbidden arrow in pkgs, one line each.
func violations(module string, pkgs map[string]*pkg) []string {
	var bad []string
	for _, rel := range slices.Sorted(maps.Keys(pkgs)) {
		p := pkgs[rel]
		allowed, isRoom := rooms[rel]
		if strings.HasPrefix(rel, "proxy/") && !isRoom {
			bad = append(bad, fmt.Sprintf("%s: a package under proxy/ that internal/importrules does not know: add it to rooms with the proxy packages it may import", rel))
		}
		for _, ip := range slices.Sorted(maps.Keys(p.imports)) {
			file := p.imports[ip]
			to, ok := local(module, ip)
			if !ok {
				continue
			}
			switch {
			case to == "proxy" && !proxyImporter(rel):
				bad = append(bad, fmt.Sprintf("%s: %s imports proxy: only cmd/shield and bench import it (docs/architecture.md §2)", file, rel))
			case isRoom && underProxy(to) && to != "proxy" && !slices.Contains(allowed, to):
				bad = append(bad, fmt.Sprintf("%s: %s imports %s: it may import %s", file, rel, to, orNone(allowed)))
			case isRoom && !underProxy(to) && projectOnly[rel] != nil && !slices.Contains(projectOnly[rel], to):
				bad = append(bad, fmt.Sprintf("%s: %s imports %s: of the project it may import %s", file, rel, to, orNone(projectOnly[rel])))
			}
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(unreachable)) {
		if pkgs[rel] == nil {
			continue // not created yet
		}
		u := unreachable[rel]
		if chain, file := reach(module, pkgs, rel, u.prefix); chain != nil {
			bad = append(bad, fmt.Sprintf("%s: %s reaches %s (%s): %s", file, rel, u.prefix, strings.Join(chain, " → "), u.why))
		}
	}
	if c := cycle(module, pkgs); c != nil {
		bad = append(bad, "import cycle: "+strings.Join(c, " → "))
	}
	return bad
}

// reach finds a chain of the module's packages from rel to an import
// under prefix, and the file making its last arrow; nil if none.
func reach(module string, pkgs map[string]*pkg, rel, prefix string) (chain []string, file string) {
	seen := map[string]bool{}
	var walk func(at string, path []string) ([]string, string)
	walk = func(at string, path []string) ([]string, string) {
		if seen[at] || pkgs[at] == nil {
			return nil, ""
		}
		seen[at] = true
		path = append(path, at)
		p := pkgs[at]
		for _, ip := range slices.Sorted(maps.Keys(p.imports)) {
			if ip == prefix || strings.HasPrefix(ip, prefix+"/") {
				return append(slices.Clone(path), ip), p.imports[ip]
			}
		}
		for _, ip := range slices.Sorted(maps.Keys(p.imports)) {
			if to, ok := local(module, ip); ok {
				if c, f := walk(to, path); c != nil {
					return c, f
				}
			}
		}
		return nil, ""
	}
	return walk(rel, nil)
}

// cycle returns one import cycle among the module's packages, or nil.
// The compiler refuses cycles too; this names the packages before a
// build does.
func cycle(module string, pkgs map[string]*pkg) []string {
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(rel string) []string
	visit = func(rel string) []string {
		switch state[rel] {
		case active:
			i := slices.Index(stack, rel)
			return append(slices.Clone(stack[i:]), rel)
		case done:
			return nil
		}
		state[rel] = active
		stack = append(stack, rel)
		for _, ip := range slices.Sorted(maps.Keys(pkgs[rel].imports)) {
			if to, ok := local(module, ip); ok && pkgs[to] != nil {
				if c := visit(to); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[rel] = done
		return nil
	}
	for _, rel := range slices.Sorted(maps.Keys(pkgs)) {
		if c := visit(rel); c != nil {
			return c
		}
	}
	return nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no other proxy package"
	}
	return strings.Join(s, ", ")
}

// TestImportRules: no package imports what docs/architecture.md §2
// forbids it.
func TestImportRules(t *testing.T) {
	module, pkgs := load(t)
	for _, v := range violations(module, pkgs) {
		t.Error(v)
	}
}

// TestImportRulesCatch: each rule fails on a package graph that breaks
// it, so a rule that stopped matching anything would show here.
func TestImportRulesCatch(t *testing.T) {
	const m = "example.com/shield"
	graph := func(arrows ...string) map[string]*pkg {
		pkgs := map[string]*pkg{}
		for _, a := range arrows {
			from, to, _ := strings.Cut(a, " ")
			if pkgs[from] == nil {
				pkgs[from] = &pkg{imports: map[string]string{}}
			}
			if to != "" {
				if !strings.Contains(to, ".") {
					to = m + "/" + to
				}
				pkgs[from].imports[to] = from + "/x.go"
			}
		}
		return pkgs
	}
	base := []string{"cmd/shield proxy", "proxy proxy/httpx", "proxy proxy/cluster", "proxy proxy/cache", "proxy proxy/upstream",
		"proxy/cluster proxy/httpx", "proxy/upstream proxy/httpx", "proxy/httpx config", "proxy/httpx github.com/valyala/fasthttp",
		"proxy/cache cachekey", "proxy/cache stale", "cachekey", "stale", "config", "bench/profile proxy"}
	if v := violations(m, graph(base...)); len(v) != 0 {
		t.Fatalf("the target layout breaks a rule: %q", v)
	}
	for _, tc := range []struct{ arrow, want string }{
		{"proxy/httpx proxy", "imports proxy"},
		{"proxy/httpx proxy/cluster", "may import no other proxy package"},
		{"proxy/httpx routing", "of the project it may import config"},
		{"proxy/cache github.com/valyala/fasthttp", "reaches github.com/valyala/fasthttp"},
		{"proxy/cache proxy/httpx", "may import no other proxy package"},
		{"routing github.com/valyala/fasthttp/fasthttputil", ""}, // outside the cache's reach it is no finding
		{"proxy/cluster proxy/cache", "it may import proxy/httpx"},
		{"proxy/cluster proxy/upstream", "it may import proxy/httpx"},
		{"proxy/upstream proxy/cluster", "it may import proxy/httpx"},
		{"proxy/purge proxy/httpx", "does not know"},
		{"routing proxy", "only cmd/shield and bench"},
		{"config routing", ""},
		{"routing config", ""},
	} {
		v := violations(m, graph(append(slices.Clone(base), tc.arrow)...))
		if tc.want == "" {
			if len(v) != 0 {
				t.Errorf("%s: %q, want no finding", tc.arrow, v)
			}
			continue
		}
		if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), tc.want) {
			t.Errorf("%s: %q, want a finding with %q", tc.arrow, v, tc.want)
		}
	}
	// fasthttp reached through another package of the project, and a
	// cycle, are found too.
	v := violations(m, graph(append(slices.Clone(base), "proxy/cache cachekey", "cachekey github.com/valyala/fasthttp")...))
	if len(v) != 1 || !strings.Contains(v[0], "proxy/cache → cachekey → github.com/valyala/fasthttp") {
		t.Errorf("fasthttp through cachekey: %q", v)
	}
	v = violations(m, graph(append(slices.Clone(base), "config routing", "routing config")...))
	if len(v) != 1 || !strings.Contains(v[0], "import cycle: config → routing → config") {
		t.Errorf("cycle: %q", v)
	}
}
