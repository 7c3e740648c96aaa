package config

// HTTP2Limits bounds what one HTTP/2 client connection may hold on the
// public listener. The header list is bounded by server.max_header_size,
// timeouts by server.read_timeout, write_timeout and idle_timeout, as for
// HTTP/1.1. The defaults are those of a public edge: enough for a browser
// page's parallel requests, small enough that one connection cannot pin
// much memory (windows) or many handlers (streams).
type HTTP2Limits struct {
	// MaxConcurrentStreams is the number of streams a client may have
	// open on one connection (SETTINGS_MAX_CONCURRENT_STREAMS). Default
	// 100 (RFC 9113 §6.5.2 advises no less).
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// MaxFrameSize is the largest frame payload shield reads
	// (SETTINGS_MAX_FRAME_SIZE). Default 16KiB, the protocol's minimum.
	MaxFrameSize Size `yaml:"max_frame_size"`
	// StreamWindow is the flow-control window of one stream: request
	// body bytes a client may send before shield reads them. Default
	// 256KiB.
	StreamWindow Size `yaml:"stream_window"`
	// ConnectionWindow is the flow-control window of the whole
	// connection, shared by its streams. Default 1MiB.
	ConnectionWindow Size `yaml:"connection_window"`
}

const (
	defaultHTTP2Streams    = 100
	defaultHTTP2FrameSize  = 16 * KiB
	defaultHTTP2StreamWin  = 256 * KiB
	defaultHTTP2ConnWindow = 1 * MiB

	// The protocol's bounds (RFC 9113 §6.5.2) and the HTTP/2 server's:
	// windows below 4MiB, a connection window of at least 64KiB.
	minHTTP2FrameSize = 16 * KiB
	maxHTTP2FrameSize = 16*MiB - 1
	minHTTP2Window    = 64 * KiB
	maxHTTP2Window    = 4*MiB - 1
	maxHTTP2Streams   = 10000
)

func applyHTTP2Defaults(s *Server, has func(string) bool) {
	setDefault(&s.HTTP2, has("server.http2"), true)
	l := &s.HTTP2Limits
	setDefault(&l.MaxConcurrentStreams, has("server.http2_limits.max_concurrent_streams"), defaultHTTP2Streams)
	setDefault(&l.MaxFrameSize, has("server.http2_limits.max_frame_size"), defaultHTTP2FrameSize)
	setDefault(&l.StreamWindow, has("server.http2_limits.stream_window"), defaultHTTP2StreamWin)
	setDefault(&l.ConnectionWindow, has("server.http2_limits.connection_window"), defaultHTTP2ConnWindow)
}

// validateHTTP2 checks the HTTP/2 keys: limits inside what the protocol
// and the server accept (out of range, the server would silently use its
// own default instead), and h2c only on a cleartext listener.
func (d *decoder) validateHTTP2(s *Server) {
	if s.H2C && s.TLS != nil {
		d.problem("server.h2c", "cleartext HTTP/2 needs a cleartext listener; with server.tls set, HTTP/2 is offered in the handshake (server.http2)")
	}
	const p = "server.http2_limits."
	l := &s.HTTP2Limits
	if n := l.MaxConcurrentStreams; n < 1 || n > maxHTTP2Streams {
		d.problem(p+"max_concurrent_streams", "must be in [1, %d], got %d", maxHTTP2Streams, n)
	}
	sizeIn := func(key string, v, lo, hi Size) {
		if v < lo || v > hi {
			d.problem(p+key, "must be in [%v, %v], got %v", lo, hi, v)
		}
	}
	sizeIn("max_frame_size", l.MaxFrameSize, minHTTP2FrameSize, maxHTTP2FrameSize)
	sizeIn("stream_window", l.StreamWindow, minHTTP2Window, maxHTTP2Window)
	sizeIn("connection_window", l.ConnectionWindow, minHTTP2Window, maxHTTP2Window)
	if l.ConnectionWindow < l.StreamWindow {
		d.problem(p+"connection_window", "must be at least stream_window (%v), got %v", l.StreamWindow, l.ConnectionWindow)
	}
}
