package httpx

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// fasthttp's messages go to debug level, truncated (they quote raw
// requests); nothing is formatted when debug is off.
func TestSlogPrinter(t *testing.T) {
	var buf bytes.Buffer
	SlogPrinter{L: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}.Printf("bad request %s", strings.Repeat("x", 500))
	if out := buf.String(); !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "…") || strings.Contains(out, strings.Repeat("x", 201)) {
		t.Fatalf("debug log line = %q", out)
	}
	buf.Reset()
	SlogPrinter{L: slog.New(slog.NewTextHandler(&buf, nil))}.Printf("quiet")
	SlogPrinter{}.Printf("no logger")
	if buf.Len() != 0 {
		t.Fatalf("logged at info level: %q", buf.String())
	}
}
