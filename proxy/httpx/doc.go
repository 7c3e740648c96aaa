// Package httpx holds proxy's leaf helpers for HTTP/1.1 on fasthttp: they
// depend on no state of the request path, so the packages proxy is being
// split into (docs/architecture.md §2) can share them. It imports no
// proxy package and, of the project, only config (internal/importrules
// enforces both).
//
// Files (internal/doccheck checks that the list names every non-test file
// of the directory and nothing else):
//
//	headers.go     header names as canonical byte slices; hop-by-hop,
//	               forwarding and never-stored fields
//	date.go        writing Date into a fasthttp response (NoDefaultDate), 0 allocations
//	trackconn.go   origin and peer connection wrapper: reused-connection
//	               detection, interim heads taken off the wire
//	earlyhints.go  1xx interim answers: bounds, Shield-Hints mark, 103s relayed
//	               to the client (RequestCtx.EarlyHints)
//	logger.go      fasthttp's Logger on slog: debug level, truncated
//	certs.go       reloadable certificates, public and peer (mutual) TLS,
//	               TLS dialing for peers and origins
package httpx
