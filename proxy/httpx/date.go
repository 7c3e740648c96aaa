package httpx

import (
	"bufio"
	"bytes"
	"sync"

	"github.com/valyala/fasthttp"
)

// Date handling. fasthttp (v1.78) treats Date as managed: Set and Add
// ignore it, and without Server.NoDefaultDate it writes the sending time.
// A stored answer must keep its origin's Date (RFC 9110 §6.6.1, RFC 9111
// §4: Age says how long it was stored), so the servers run with
// NoDefaultDate and shield writes Date itself. The only way a handler can
// put a Date field into a fasthttp response header is to parse one, so
// SetDate parses a one-field header block into the response (from pooled
// buffers: no allocation), before any other field is added.

type dateParser struct {
	block []byte
	rd    bytes.Reader
	br    *bufio.Reader
}

var dateParsers = sync.Pool{New: func() any {
	d := &dateParser{block: make([]byte, 0, 96)}
	d.br = bufio.NewReaderSize(&d.rd, 128)
	return d
}}

var (
	// No reason phrase: fasthttp would keep a parsed one ("OK") and send
	// it with whatever status is set next ("304 OK", "404 OK").
	dateBlockHead = []byte("HTTP/1.1 200\r\nContent-Length: 0\r\nDate: ")
	dateBlockTail = []byte("\r\n\r\n")
)

// SetDate resets h and leaves it holding only Date: date. Call it first;
// it returns false (h untouched: no Date on a fresh header) for a value
// that does not fit a header line.
func SetDate(h *fasthttp.ResponseHeader, date []byte) bool {
	if len(date) == 0 || len(date) > 64 || bytes.ContainsAny(date, "\r\n") {
		return false
	}
	d := dateParsers.Get().(*dateParser)
	d.block = append(append(append(d.block[:0], dateBlockHead...), date...), dateBlockTail...)
	d.rd.Reset(d.block)
	d.br.Reset(&d.rd)
	err := h.Read(d.br)
	dateParsers.Put(d)
	// A parsed header without Content-Length reads as "until close";
	// a fresh header says 0 and the body sets it when written.
	h.SetContentLength(0)
	return err == nil
}

// EnsureDate gives a response that lacks Date fasthttp's sending time:
// it re-creates the header without NoDefaultDate (fields kept). Only
// answers built without a Date field get here (shield's own answers
// after a field was set, peer errors); none is a hit.
func EnsureDate(resp *fasthttp.Response) {
	if len(resp.Header.PeekCanonical(HDate)) > 0 {
		return
	}
	var keep fasthttp.ResponseHeader
	resp.Header.CopyTo(&keep)
	status := resp.StatusCode()
	resp.Header.Reset() // NoDefaultDate off: fasthttp writes the Date
	resp.Header.SetStatusCode(status)
	resp.Header.SetContentTypeBytes(keep.ContentType())
	for k, v := range keep.All() {
		if !bytes.EqualFold(k, HContentLength) && !bytes.EqualFold(k, []byte("Content-Type")) {
			resp.Header.AddBytesKV(k, v)
		}
	}
}
