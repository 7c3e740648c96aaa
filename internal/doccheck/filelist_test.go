package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// listed is a line of a package doc's file list: an indented block line
// ("//\t") that starts with one or more file names ("a.go, b.go  what").
var listed = regexp.MustCompile(`^//\t((?:[\w.-]+\.go, )*[\w.-]+\.go)(?:\s|$)`)

// mustList are the packages whose doc.go must carry a file list; any
// other doc.go that has one is checked too.
var mustList = []string{"proxy", "proxy/httpx", "proxy/cache", "proxy/upstream", "proxy/listener", "proxy/cluster", "proxy/rawio"}

// docFiles returns the files a doc.go's comment lists, nil if it lists none.
func docFiles(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		if m := listed.FindStringSubmatch(line); m != nil {
			names = append(names, strings.Split(m[1], ", ")...)
		}
	}
	return names
}

// goFiles returns dir's non-test .go files but doc.go.
func goFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") && n != "doc.go" {
			names = append(names, n)
		}
	}
	return names
}

// TestDocFileLists: a package doc's file list names every non-test file
// of its directory, once, and no file it does not have — so the map a
// reader starts from is the directory as it is.
func TestDocFileLists(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "doc.go" {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(rel)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkedDirs := 0
	for _, dir := range dirs {
		docs := docFiles(t, filepath.Join(root, dir, "doc.go"))
		if docs == nil {
			if slices.Contains(mustList, dir) {
				t.Errorf("%s/doc.go lists no files (a tab-indented block of \"name.go  what it holds\" lines)", dir)
			}
			continue
		}
		checkedDirs++
		for _, d := range fileListDiff(docs, goFiles(t, filepath.Join(root, dir))) {
			t.Errorf("%s/doc.go: %s", dir, d)
		}
	}
	for _, dir := range mustList {
		if !slices.Contains(dirs, dir) {
			t.Errorf("%s has no doc.go", dir)
		}
	}
	if checkedDirs < len(mustList) {
		t.Fatalf("checked the file lists of %d packages, want at least %d: is root (%s) the repository?", checkedDirs, len(mustList), root)
	}
}

// fileListDiff says how a doc's list differs from the directory's files.
func fileListDiff(docs, files []string) []string {
	var diff []string
	seen := map[string]bool{}
	for _, n := range docs {
		switch {
		case seen[n]:
			diff = append(diff, "lists "+n+" twice")
		case !slices.Contains(files, n):
			diff = append(diff, "lists "+n+", which the directory does not have")
		}
		seen[n] = true
	}
	for _, n := range files {
		if !seen[n] {
			diff = append(diff, "does not list "+n)
		}
	}
	return diff
}

// TestFileListDiff: the comparison finds a missing, an extra and a
// repeated file, and parses a doc line with several names.
func TestFileListDiff(t *testing.T) {
	got := fileListDiff([]string{"a.go", "b.go", "b.go", "gone.go"}, []string{"a.go", "b.go", "new.go"})
	want := []string{"lists b.go twice", "lists gone.go, which the directory does not have", "does not list new.go"}
	if !slices.Equal(got, want) {
		t.Errorf("fileListDiff = %q, want %q", got, want)
	}
	if m := listed.FindStringSubmatch("//\tmetrics.go, metrics_help.go, admin.go   Prometheus"); m == nil || m[1] != "metrics.go, metrics_help.go, admin.go" {
		t.Errorf("several names on a line: %q", m)
	}
	for _, line := range []string{"//\t               continued text about x.go", "// prose that names serve.go", "//\tsee serve.go"} {
		if m := listed.FindStringSubmatch(line); m != nil {
			t.Errorf("%q read as a file list line: %q", line, m)
		}
	}
}
