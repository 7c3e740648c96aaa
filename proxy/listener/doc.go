// Package listener is the public listener's pair of servers: fasthttp for
// HTTP/1.x and, with server.http2 (TLS, by ALPN) or server.h2c (cleartext,
// by the connection preface), the standard library's HTTP/2 server beside
// it on the same port. Each HTTP/2 request is copied into a
// fasthttp.RequestCtx and served by the HTTP/1.x server's own Handler, and
// a request the HTTP/2 side cannot take in is answered by its
// ErrorHandler, so the request path (package proxy) sees one protocol and
// no feature exists on one protocol only. It knows nothing of the cache:
// it imports, of the project, config, proxy/httpx and proxy/rawio
// (internal/importrules enforces it).
//
// Files (internal/doccheck checks that the list names every non-test file
// of the directory and nothing else):
//
//	public.go  Public, New: the servers, Serve (shared or plain), graceful shutdown
//	mux.go     sorting accepted connections: TLS ALPN, or the h2c preface or an
//	           HTTP/1.x request line (else closed), replayed bytes
//	limit.go   Limit: server.max_connections, open connections counted below TLS and
//	           sorting, refused past it (503 on plain HTTP, closed over TLS)
//	deadline.go  coarse deadlines: plain connections keep the read, write and idle timeouts, armed lazily, slack late
//	sendfile.go  FileSection: a body that is a file's section, sent with sendfile at its offset
//	sendfile_linux.go  raw socket calls of a plain connection: read, write, writev and sendfile(2)
//	           naming the offset, waiting for readiness in the poller (sysmon stays asleep)
//	sendfile_other.go  elsewhere: the connection's own calls (a section is read)
//	h2.go      an HTTP/2 request served by a fasthttp handler: request copy,
//	           answer written back, 103 Early Hints, pooled per-request state
//	h2filter.go  the read filter before Go's HTTP/2 server: SETTINGS naming a
//	           setting twice rewritten, malformed request blocks reset, SETTINGS floods cut
//	h2write.go  the write side: Go's HTTP/2 server's flushes queued and written in
//	           batches by a flushing goroutine (one system call for many answers)
package listener
