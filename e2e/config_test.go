package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestBadConfig: a bad file is refused by -check-config and by a normal
// start, both exiting non-zero with FILE:LINE: and the field in stderr;
// the good file it was derived from passes -check-config.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	shield := binPath(t, "shield")
	good := shieldConfig{
		Listen:        freeAddr(t),
		Admin:         freeAddr(t),
		Origin:        freeAddr(t),
		MaxObjectSize: "1MiB",
		Hosts:         []string{"*"},
	}.render(t)

	t.Run("good", func(t *testing.T) {
		path := writeFile(t, "good.yaml", good)
		p := startProcess(t, "shield -check-config", shield, "-check-config", path)
		if code := p.wait(t); code != 0 {
			t.Errorf("shield -check-config on a good file exited %d, want 0", code)
		}
	})

	tests := []struct {
		name     string
		old, new string // replace old with new in the good file
		want     string // must appear in stderr besides FILE:LINE:
	}{
		{"unknown origin", "    origin: demo\n", "    origin: nope\n", "routes[0].origin"},
		{"relative path prefix", "    path_prefix: /\n", "    path_prefix: nope\n", "routes[0].path_prefix"},
		{"unknown key", "    path_prefix: /\n", "    path_prefix: /\n    pth_prefix: /x\n", "pth_prefix"},
		{"bad duration", "timeout: 2s", "timeout: soon", "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, tt.old) {
				t.Fatalf("template has no %q", tt.old)
			}
			bad := strings.Replace(good, tt.old, tt.new, 1)
			path := writeFile(t, "bad.yaml", bad)
			wantLoc := fmt.Sprintf("%s:%d:", path, changedLine(good, bad))
			for _, mode := range []string{"-check-config", "-config"} {
				p := startProcess(t, "shield "+mode, shield, mode, path)
				code := p.wait(t)
				out := p.stderr.String()
				if code == 0 {
					t.Errorf("shield %s on a bad file exited 0", mode)
				}
				for _, want := range []string{wantLoc, tt.want} {
					if !strings.Contains(out, want) {
						t.Errorf("shield %s: stderr lacks %q:\n%s", mode, want, out)
					}
				}
			}
		})
	}
}

// changedLine returns the 1-based number of the first line where a and b
// differ.
func changedLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
