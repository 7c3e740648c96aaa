package codeshape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, from its func line to
// its closing brace, comments included.
const maxFuncLines = 80

// checked are the directories held to the limit, relative to the
// repository root.
var checked = []string{"proxy", "proxy/cluster"}

func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	funcs := 0
	for _, dir := range checked {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				funcs++
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				if n > maxFuncLines {
					t.Errorf("%s: %s is %d lines (at most %d): split it into named steps", filepath.ToSlash(strings.TrimPrefix(f, "../../")), fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
	// The walk must have found the code: a moved directory would
	// otherwise pass with nothing checked.
	if funcs < 200 {
		t.Fatalf("checked %d functions in %v: are the directories right?", funcs, checked)
	}
}
