package config

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestSlowCorpus(t *testing.T) {
	files, _ := filepath.Glob(os.Getenv("HOME") + "/.cache/go-build/fuzz/github.com/shield-proxy/shield/config/FuzzParse/*")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		lines := string(b)
		_ = lines
		// format: go test fuzz v1\n[]byte("...")
		s := lines[len("go test fuzz v1\n[]byte(") : len(lines)-2]
		data, err := strconv.Unquote(s)
		if err != nil {
			t.Log(f, err)
			continue
		}
		start := time.Now()
		Parse("x", []byte(data), noEnv)
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Logf("%s: %v\n%q", f, d, data)
		}
	}
}
