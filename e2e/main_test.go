package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bins are the binaries TestMain built; an entry's err is set when its
// build failed, and every test needing it fails with that output.
var bins = map[string]*binary{
	"shield":      {pkg: "./cmd/shield"},
	"demo-origin": {pkg: "./cmd/demo-origin"},
}

type binary struct {
	pkg  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "shield-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	buildAll(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildAll builds every binary into dir from the module root. A failure is
// recorded, not fatal: the report then names the tests it blocked.
func buildAll(dir string) {
	root, err := moduleRoot()
	for name, b := range bins {
		if err != nil {
			b.err = err
			continue
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("e2e: go build %s: %w\n%s", b.pkg, err, out)
		}
	}
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("e2e: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("e2e: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// binPath returns the built binary name, failing t if it did not build.
func binPath(t *testing.T, name string) string {
	t.Helper()
	b := bins[name]
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
