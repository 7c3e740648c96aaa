package httpx

import (
	"bytes"
	"errors"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
)

// Interim answers (RFC 9110 §15.2): a proxy forwards the 1xx answers it
// did not ask for. fasthttp's client reads and drops every 1xx before the
// final answer (Response.ReadLimitBody), fails the request after 100 of
// them and offers no hook, so shield takes them off the wire itself, in
// the connection wrapper every origin and peer connection already has
// (trackedConn):
//
//   - until an answer's final status line, the wrapper reads its 1xx heads
//     and hands fasthttp only the final answer: any number of interim
//     heads, 100, 102, 103, 104 alike, can never break it. Their bytes
//     are bounded (MaxInterimHead each, maxInterimBytes together): an
//     origin that streams interim heads past that fails the fetch (502),
//     as a garbled answer does.
//   - a fetch made for a client that can take interim answers (HTTP/1.1)
//     registers a sink and marks its upstream request with
//     "Shield-Hints: <token>"; the wrapper finds the mark in the
//     request's first write and takes it out (neither origin nor peer
//     ever sees it). The Link fields of the first max_early_hints 103
//     heads go to the sink, which sends them to the client as its own 103
//     (RequestCtx.EarlyHints) before the final answer; later 103s and
//     every other 1xx are consumed and dropped — a client needs one set
//     of hints, and each one relayed is a write to it.
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

// Bounds on the interim heads before one final answer. A 103 with a few
// Link fields is a few hundred bytes: 300 of them pass; megabytes do not.
const (
	MaxInterimHead  = 64 << 10 // one head (the default max_response_header_size)
	maxInterimBytes = 1 << 20  // all of them
)

// errInterimTooLarge fails a fetch whose interim heads pass the bounds.
var errInterimTooLarge = errors.New("proxy: origin sent more than 1 MiB of 1xx interim heads, or one above 64 KiB")

// hintSink is a client waiting for hints, and how many it may get.
type hintSink struct {
	ctx *fasthttp.RequestCtx
	max int
}

// hintSinks holds, by token, the requests whose fetch is in flight and
// whose client takes interim answers. A map of values and a stack
// buffer for the mark: forwarding a request allocates nothing for this.
var hintSinks = struct {
	mu   sync.Mutex
	m    map[uint64]hintSink
	next uint64
}{m: map[uint64]hintSink{}}

// sendHints sends links to ctx's client as a 103 of its own.
func sendHints(ctx *fasthttp.RequestCtx, links [][]byte) {
	h := &ctx.Response.Header
	for _, l := range links {
		h.AddBytesKV(HLink, l)
	}
	_ = ctx.EarlyHints()
	h.DelBytes(HLink)
}

// WatchHints marks req, fetched for ctx, so that its connection sends
// the first max 103 heads of its answer on to ctx's client; pass the
// token to EndHints once the answer's head has been read. ctx nil, max
// 0, or a client that cannot take interim answers (HTTP/1.0), marks
// nothing.
func WatchHints(req *fasthttp.Request, ctx *fasthttp.RequestCtx, max int) (token uint64) {
	if ctx == nil || max <= 0 || !ctx.Request.Header.IsHTTP11() {
		return 0
	}
	hintSinks.mu.Lock()
	hintSinks.next++
	token = hintSinks.next
	hintSinks.m[token] = hintSink{ctx: ctx, max: max}
	hintSinks.mu.Unlock()
	var buf [16]byte
	req.Header.SetBytesKV(hShieldHints, strconv.AppendUint(buf[:0], token, 16))
	return token
}

// EndHints ends what WatchHints began.
func EndHints(req *fasthttp.Request, token uint64) {
	if token == 0 {
		return
	}
	hintSinks.mu.Lock()
	delete(hintSinks.m, token)
	hintSinks.mu.Unlock()
	req.Header.DelBytes(hShieldHints)
}

// takeHintsMark removes the mark from a request's first write and returns
// the bytes to send and the sink it names (zero: none).
func takeHintsMark(b, scratch []byte) (out []byte, sink hintSink) {
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
		return b, hintSink{}
	}
	start := i + len(hintsMark)
	end := bytes.Index(head[start:], crlf)
	if end < 0 {
		return b, hintSink{} // not whole in this write: leave it (cannot happen with fasthttp's writer)
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

// interimWatch takes an answer's 1xx heads off the bytes read, up to its
// final status line.
type interimWatch struct {
	sink  hintSink
	send  func(*fasthttp.RequestCtx, [][]byte) // sendHints; tests record instead
	sent  int                                  // 103s handed to the sink
	total int                                  // bytes of interim heads consumed
	pend  []byte                               // bytes read, not yet consumed nor handed on
	scan  int                                  // pend[:scan] holds no head end (a dribbled head is scanned once)
}

// reset starts watching a new answer for sink, keeping the buffer.
func (w *interimWatch) reset(sink hintSink) {
	*w = interimWatch{sink: sink, send: sendHints, pend: w.pend[:0]}
}

// take is given the next bytes read. Once the final answer's status line
// has begun it returns final true and out, the bytes from its first one
// on (p itself when nothing came before it: the common case copies
// nothing); until then it consumes 1xx heads and returns nothing. An
// error means the interim heads passed their bounds.
func (w *interimWatch) take(p []byte) (out []byte, final bool, err error) {
	if len(w.pend) == 0 && headKind(p) == headFinal {
		return p, true, nil
	}
	w.pend = append(w.pend, p...)
	// Heads are consumed from the front of rest; pend is compacted once,
	// when more bytes are needed (shifting it per head would make a read
	// full of tiny heads cost its length squared).
	rest := w.pend
	for {
		switch headKind(rest) {
		case headFinal:
			return rest, true, nil // pend is not touched again before reset
		case headShort:
			w.pend = append(w.pend[:0], rest...)
			return nil, false, nil
		}
		end := headEnd(rest, w.scan)
		if end < 0 {
			if len(rest) > MaxInterimHead || w.total+len(rest) > maxInterimBytes {
				return nil, false, errInterimTooLarge
			}
			w.scan = max(0, len(rest)-2)
			w.pend = append(w.pend[:0], rest...)
			return nil, false, nil
		}
		if end > MaxInterimHead || w.total+end > maxInterimBytes {
			return nil, false, errInterimTooLarge
		}
		w.total += end
		head := rest[:end]
		if w.sink.ctx != nil && w.sent < w.sink.max && bytes.HasPrefix(head[len("HTTP/1.1"):], []byte(" 103")) {
			if links := linkFields(head); len(links) > 0 {
				w.sent++
				w.send(w.sink.ctx, links)
			}
		}
		rest = rest[end:]
		w.scan = 0
	}
}

// What the bytes at the start of an answer are.
const (
	headShort   = iota // too few bytes to tell
	headInterim        // a 1xx status line other than 101
	headFinal          // any other status line, or not HTTP (fasthttp reports that)
)

// headKind tells an interim status line ("HTTP/1.x 1yz", not 101) from a
// final one as soon as the bytes allow.
func headKind(b []byte) int {
	const pre = "HTTP/1.x 1"
	for i := 0; i < len(pre) && i < len(b); i++ {
		if pre[i] != 'x' && b[i] != pre[i] {
			return headFinal
		}
	}
	switch {
	case len(b) < len("HTTP/1.1 101"):
		return headShort
	case b[10] == '0' && b[11] == '1':
		return headFinal // 101 Switching Protocols ends the HTTP answers
	}
	return headInterim
}

// headEnd returns the length of the head at the start of b, through its
// empty line (CRLF CRLF, or bare LFs as fasthttp also accepts), or -1;
// the search starts at from.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return -1
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
		if ok && bytes.EqualFold(bytes.TrimSpace(name), HLink) {
			if v := bytes.TrimSpace(value); len(v) > 0 {
				links = append(links, bytes.Clone(v))
			}
		}
	}
	return links
}
