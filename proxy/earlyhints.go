package proxy

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
)

// Interim answers (RFC 9110 §15.2): a proxy forwards the 1xx answers it
// did not ask for. fasthttp's client reads and drops every 1xx before the
// final answer (Response.ReadLimitBody) and offers no hook, so shield
// watches the bytes instead, on the connection wrapper every origin and
// peer connection already has (trackedConn):
//
//   - a fetch made for a client that can take interim answers (HTTP/1.1)
//     registers a sink and marks its upstream request with
//     "Shield-Hints: <token>";
//   - the wrapper finds the mark in the request's first write, takes it
//     out (neither origin nor peer ever sees it) and, until the final
//     answer's status line, reads the answer's heads as they pass: each
//     103 head's Link fields go to the sink, which sends them to the
//     client as its own 103 (RequestCtx.EarlyHints) before the final
//     answer. Other 1xx (100, 102) are shield's own business and dropped.
//
// The sink runs on the fetching goroutine (fasthttp's Do reads in the
// caller), while the handler still owns the RequestCtx. Interim answers
// are never stored: the entry is made from the final answer only, so a
// hit never replays them. Coalesced waiters get no hints (the leader's
// client does); a forwarded request's hints come back through the owner,
// which sends them on the peer connection as its own 103.
var (
	hShieldHints = []byte("Shield-Hints")
	hintsMark    = []byte("\r\nShield-Hints: ")
)

// maxInterimHead bounds the bytes of 1xx heads watched per answer; past
// it the wrapper stops watching (the hints are lost, nothing else).
const maxInterimHead = 16 << 10

// hintSinks holds, by token, the requests whose fetch is in flight and
// whose client takes interim answers. A map of pointers and a stack
// buffer for the mark: forwarding a request allocates nothing for this.
var hintSinks = struct {
	mu   sync.Mutex
	m    map[uint64]*fasthttp.RequestCtx
	next uint64
}{m: map[uint64]*fasthttp.RequestCtx{}}

// sendHints sends links to ctx's client as a 103 of its own.
func sendHints(ctx *fasthttp.RequestCtx, links [][]byte) {
	h := &ctx.Response.Header
	for _, l := range links {
		h.AddBytesKV(hLink, l)
	}
	_ = ctx.EarlyHints()
	h.DelBytes(hLink)
}

// watchHints marks req, fetched for ctx, so that its connection sends
// the 103 heads of its answer on to ctx's client; pass the token to
// endHints once the answer's head has been read. ctx nil, or a client
// that cannot take interim answers (HTTP/1.0), marks nothing.
func watchHints(req *fasthttp.Request, ctx *fasthttp.RequestCtx) (token uint64) {
	if ctx == nil || !ctx.Request.Header.IsHTTP11() {
		return 0
	}
	hintSinks.mu.Lock()
	hintSinks.next++
	token = hintSinks.next
	hintSinks.m[token] = ctx
	hintSinks.mu.Unlock()
	var buf [16]byte
	req.Header.SetBytesKV(hShieldHints, strconv.AppendUint(buf[:0], token, 16))
	return token
}

// endHints ends what watchHints began.
func endHints(req *fasthttp.Request, token uint64) {
	if token == 0 {
		return
	}
	hintSinks.mu.Lock()
	delete(hintSinks.m, token)
	hintSinks.mu.Unlock()
	req.Header.DelBytes(hShieldHints)
}

// takeHintsMark removes the mark from a request's first write and returns
// the bytes to send and the request it names (nil: none).
func takeHintsMark(b, scratch []byte) (out []byte, sink *fasthttp.RequestCtx) {
	// Only the head is searched: the same bytes in a body (which may
	// share this write) are the client's, and cutting them would make
	// the body shorter than its Content-Length — a desynchronised
	// connection. A head never holds an empty line, so it ends at the
	// first one (or runs past this write).
	head := b
	if end := bytes.Index(b, []byte("\r\n\r\n")); end >= 0 {
		head = b[:end+2]
	}
	i := bytes.Index(head, hintsMark)
	if i < 0 {
		return b, nil
	}
	start := i + len(hintsMark)
	end := bytes.Index(head[start:], crlf)
	if end < 0 {
		return b, nil // not whole in this write: leave it (cannot happen with fasthttp's writer)
	}
	if tok, ok := parseHex(b[start : start+end]); ok {
		hintSinks.mu.Lock()
		sink = hintSinks.m[tok]
		hintSinks.mu.Unlock()
	}
	out = append(append(scratch[:0], b[:i]...), b[start+end:]...)
	return out, sink
}

// parseHex parses a token (strconv.ParseUint would allocate its error).
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

var crlf = []byte("\r\n")

// interimWatch reads an answer's 1xx heads as they pass.
type interimWatch struct {
	sink *fasthttp.RequestCtx
	send func(*fasthttp.RequestCtx, [][]byte) // sendHints; tests record instead
	head []byte                               // bytes of the head being read, not yet complete
}

// feed takes the next bytes read; false once the final answer's head has
// begun (nothing more to watch).
func (w *interimWatch) feed(p []byte) bool {
	w.head = append(w.head, p...)
	for {
		if len(w.head) < len("HTTP/1.1 103") {
			return len(w.head) < maxInterimHead
		}
		if !bytes.HasPrefix(w.head, []byte("HTTP/1.")) || w.head[9] != '1' || bytes.HasPrefix(w.head[9:], []byte("101")) {
			return false // the final answer (or not HTTP): stop watching
		}
		end := bytes.Index(w.head, []byte("\r\n\r\n"))
		if end < 0 {
			return len(w.head) < maxInterimHead
		}
		block := w.head[:end+2]
		if bytes.HasPrefix(block[len("HTTP/1.1"):], []byte(" 103")) {
			if links := linkFields(block); len(links) > 0 {
				w.send(w.sink, links)
			}
		}
		w.head = append(w.head[:0], w.head[end+4:]...)
	}
}

// linkFields returns the Link field values of a head ("Name: value\r\n"
// lines after the status line).
func linkFields(block []byte) [][]byte {
	var links [][]byte
	_, rest, _ := bytes.Cut(block, crlf)
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, crlf)
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), hLink) {
			if v := bytes.TrimSpace(value); len(v) > 0 {
				links = append(links, bytes.Clone(v))
			}
		}
	}
	return links
}
