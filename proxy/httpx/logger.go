package httpx

import (
	"context"
	"fmt"
	"log/slog"
)

// SlogPrinter adapts fasthttp's Logger to slog. fasthttp's messages about
// malformed requests quote the raw request (cookies, credentials), so
// they go to debug level, truncated.
type SlogPrinter struct{ L *slog.Logger }

// Printf logs one fasthttp message at debug level, at most 200 bytes of it.
func (s SlogPrinter) Printf(format string, args ...any) {
	if s.L == nil || !s.L.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	s.L.Debug(msg, "component", "http")
}
