package doccheck

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, two levels up from this package.
const root = "../.."

var (
	archRef     = regexp.MustCompile(`architecture(?:\.md)? §(\d+(?:\.\d+)*)`)
	archHeading = regexp.MustCompile(`^#{2,3} §(\d+(?:\.\d+)*) `)
	// A numbered item inside a section: "§12.5" is item 5 of "## §12".
	archItem = regexp.MustCompile(`^(\d+)\. `)
	rfcRef   = regexp.MustCompile(`RFC ?\d+`)
	mdLink   = regexp.MustCompile(`\]\(([^)#]+)(?:#[^)]*)?\)`)
	// Documents a clone of the repository does not have.
	outside = regexp.MustCompile(`DESIGN\.md|DESIGN §|STYLE\.md|STYLE §|\.\./shared|/work/shared`)
)

// skipDir names directories whose files are not checked: VCS data, build
// outputs, fuzz corpora, and dated benchmark results (a record of their
// day, quoted as they were).
func skipDir(rel string) bool {
	switch rel {
	case ".git", "bin", "bench/results", ".cache":
		return true
	}
	return strings.HasSuffix(rel, "testdata")
}

func checked(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".md", ".sh", ".yaml", ".yml", ".lua", ".in":
		return true
	}
	return name == "Makefile" || name == "run"
}

// sections reads the section numbers docs/architecture.md defines:
// headings "## §N title" and "### §N.M title", and numbered list items
// inside a section ("5. ..." under "## §12" is §12.5).
func sections(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	defer f.Close()
	have := map[string]bool{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := archHeading.FindStringSubmatch(line); m != nil {
			cur = m[1]
			have[cur] = true
			continue
		}
		if m := archItem.FindStringSubmatch(line); m != nil && cur != "" {
			have[cur+"."+m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(have) < 10 {
		t.Fatalf("docs/architecture.md defines only %d sections; the heading pattern is %s", len(have), archHeading)
	}
	return have
}

func TestReferencesResolve(t *testing.T) {
	have := sections(t)
	files := 0
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
		if !checked(d.Name()) || strings.HasPrefix(rel, "internal/doccheck/") {
			return nil
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			where := rel + ":" + strconv.Itoa(i+1)
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s: refers to %q, which a clone of the repository does not have: %s", where, m, strings.TrimSpace(line))
			}
			for _, m := range archRef.FindAllStringSubmatch(line, -1) {
				if !have[m[1]] {
					t.Errorf("%s: docs/architecture.md has no §%s: %s", where, m[1], strings.TrimSpace(line))
				}
			}
			if strings.Contains(line, "§") && !archRef.MatchString(line) && !rfcRef.MatchString(line) &&
				!(i > 0 && rfcRef.MatchString(lines[i-1])) && !strings.HasPrefix(rel, "stale/") &&
				rel != "docs/architecture.md" {
				t.Errorf("%s: a § reference that names neither an RFC nor docs/architecture.md: %s", where, strings.TrimSpace(line))
			}
			if filepath.Ext(rel) == ".md" {
				for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
					target := m[1]
					if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
						continue
					}
					if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
						t.Errorf("%s: link to %s, which does not exist", where, target)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked only %d files: is root (%s) the repository?", files, root)
	}
}
