package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/proxy/httpx"
)

// The multiplexed peer transport (cluster.transport: mux) carries
// forwarded GET and HEAD requests between nodes over persistent
// connections, many at once, instead of one HTTP/1.1 exchange per
// connection at a time. Purges, purge logs, usage and hand-offs stay on
// HTTP.
//
// A connection opens with muxPreface — its first byte, NUL, starts no
// HTTP request, so the peer listener tells the two protocols apart by
// one byte and serves both on one port — then the edge's hello (the
// cluster secret, compared in constant time) and the owner's answer;
// nothing is served before the hello is accepted. After it, both sides
// send frames:
//
//	type u8 | id u32 | length u32 | payload (length bytes)
//
// A request's payload is its flags, method, request URI and header
// fields (the fields the HTTP path sends: Host, the client's forwarded
// fields, the peer protocol's); an answer's is its body, then its status
// and header fields, then the head's length (the body is appended first,
// as it comes, with no second pass); an entry answer's (frameEntry,
// muxentry.go) the owner's clock and a fresh hit's stored entry as it is.
// Lengths inside payloads are uvarints.
// Answers come back in any order, matched by id; each request has its
// own timeout, and a connection that breaks fails its requests at once
// (they are served locally, as HTTP failures are). An owner whose peer
// listener closes (shutdown) says so (frameGoAway, with the last request
// id it read: ids go on the wire in order), answers what it read and
// then closes; the edge sends nothing more on it and sends the requests
// the owner did not read over HTTP, as the HTTP server's graceful
// shutdown would have them.

// muxPreface opens a multiplexed connection.
const muxPreface = "\x00shield-mux/1\n"

// Frame types.
const (
	frameHello    byte = 1 // edge → owner: the cluster secret
	frameHelloOK  byte = 2 // owner → edge: accepted; payload: max in-flight u32
	frameRequest  byte = 3 // edge → owner: a forwarded request
	frameResponse byte = 4 // owner → edge: its answer
	frameHints    byte = 5 // owner → edge: a 103 head for the request's client
	frameError    byte = 6 // owner → edge: no answer; payload: an errCode
	frameGoAway   byte = 7 // owner → edge: closing; payload: the last request id read (u32)
	// frameEntry (owner → edge) answers a request flagged reqFlagEntry
	// with a fresh hit's stored entry as it is (muxentry.go); payload:
	// the owner's clock (unix ns, u64) | the entry's bytes.
	frameEntry byte = 8
)

// Error codes of frameError.
const (
	errCodeForbidden byte = 1 // bad hello: the connection closes
	errCodeTooLarge  byte = 2 // the answer is above MaxBody: served locally
	errCodeFailed    byte = 3 // the owner could not encode its answer
)

// frameHeaderLen is the size of a frame's header.
const frameHeaderLen = 9

// Frame limits. A request is a head (no body): muxMaxRequest bounds it.
// An answer is bounded by the node's MaxBody plus muxMaxHead.
const (
	muxMaxRequest = 1 << 20
	muxMaxHead    = 1 << 20
	// muxMaxInflight bounds the requests one connection has in flight
	// (the owner stops reading beyond it; the edge sends beyond it over
	// HTTP).
	muxMaxInflight = 512
	// muxMaxQueued bounds the bytes a connection's writer holds: a
	// slow reader blocks the writers instead of growing the queue.
	muxMaxQueued = 4 << 20
	// muxHoldMax bounds the answers the owner's reader holds unwritten
	// while it serves the requests already read (muxWriter.hold).
	muxHoldMax = 32 << 10
)

// Flags of a request.
const (
	reqFlagHints byte = 1 // the edge's client takes 103 Early Hints
	// reqFlagEntry: the edge takes a fresh hit as frameEntry. An owner
	// of an earlier release ignores the flag (it reads hints only) and
	// answers with frameResponse, so the edge asks without negotiating.
	reqFlagEntry byte = 2
)

var (
	errFrameTooLarge = errors.New("cluster: mux frame above its limit")
	errBadFrame      = errors.New("cluster: malformed mux frame")
)

// frameHeader is a decoded frame header.
type frameHeader struct {
	typ    byte
	id     uint32
	length uint32
}

// appendFrameHeader appends a frame header.
func appendFrameHeader(dst []byte, typ byte, id, length uint32) []byte {
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, id)
	return binary.BigEndian.AppendUint32(dst, length)
}

// parseFrameHeader decodes b (frameHeaderLen bytes) and checks the
// length against limit.
func parseFrameHeader(b []byte, limit int) (frameHeader, error) {
	h := frameHeader{typ: b[0], id: binary.BigEndian.Uint32(b[1:5]), length: binary.BigEndian.Uint32(b[5:9])}
	if h.typ < frameHello || h.typ > frameEntry {
		return h, fmt.Errorf("%w: type %d", errBadFrame, h.typ)
	}
	if uint64(h.length) > uint64(limit) {
		return h, fmt.Errorf("%w: %d bytes", errFrameTooLarge, h.length)
	}
	return h, nil
}

// readFrame reads one frame's header and payload from r into buf (grown
// as needed) and returns the payload.
func readFrame(r io.Reader, hdr *[frameHeaderLen]byte, buf []byte, limit int) (frameHeader, []byte, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frameHeader{}, buf, err
	}
	h, err := parseFrameHeader(hdr[:], limit)
	if err != nil {
		return h, buf, err
	}
	n := int(h.length)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return h, buf, fmt.Errorf("cluster: mux frame payload: %w", io.ErrUnexpectedEOF)
	}
	return h, buf, nil
}

// appendField appends one length-prefixed byte string.
func appendField(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// nextField reads one length-prefixed byte string from b.
func nextField(b []byte) (field, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, errBadFrame
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// appendRequest appends the payload of req's frame: flags, method,
// request URI and every header field but Shield-Auth.
func appendRequest(dst []byte, req *fasthttp.Request, flags byte) []byte {
	var r MuxRequest
	r.b = dst
	r.start(flags, req.Header.Method(), req.Header.RequestURI())
	for k, v := range req.Header.All() {
		r.add(k, v)
	}
	return r.b
}

// MuxRequest is a forwarded request encoded as a mux request frame's
// payload while the edge builds it — Start, then its fields through
// Head (the peer protocol's with SetForwardHead) — and sent by DoMux,
// with no fasthttp.Request in between. Acquire one with
// AcquireMuxRequest; its buffer is kept for the next request.
type MuxRequest struct {
	b    []byte
	head bool // a HEAD request
}

var muxRequestPool = sync.Pool{New: func() any { return new(MuxRequest) }}

// AcquireMuxRequest returns an empty MuxRequest from a pool.
func AcquireMuxRequest() *MuxRequest { return muxRequestPool.Get().(*MuxRequest) }

// ReleaseMuxRequest returns r to the pool.
func ReleaseMuxRequest(r *MuxRequest) {
	r.b, r.head = r.b[:0], false
	muxRequestPool.Put(r)
}

// Start begins the request: its method and request URI.
func (r *MuxRequest) Start(method, uri []byte) { r.start(0, method, uri) }

// start begins the payload with flags (DoMux sets them when it sends).
func (r *MuxRequest) start(flags byte, method, uri []byte) {
	r.b = append(r.b[:0], flags)
	r.b = appendField(r.b, method)
	r.b = appendField(r.b, uri)
	r.head = string(method) == fasthttp.MethodHead
}

// add appends a header field; Shield-Auth is dropped (the connection's
// hello carried the secret).
func (r *MuxRequest) add(k, v []byte) {
	if equalFold(k, hShieldAuth) {
		return
	}
	r.b = appendField(appendField(r.b, k), v)
}

// Head is where the request's header fields go.
func (r *MuxRequest) Head() ReqHead { return ReqHead{m: r} }

// ReqHead is a forwarded request's head being built: a fasthttp
// request header (HTTPHead) or a mux request frame (MuxRequest.Head).
// The peer protocol's fields are set through it in one place
// (SetForwardHead, setPeerAuth) whichever the transport.
type ReqHead struct {
	h *fasthttp.RequestHeader
	m *MuxRequest
}

// HTTPHead is h as a ReqHead.
func HTTPHead(h *fasthttp.RequestHeader) ReqHead { return ReqHead{h: h} }

// Add adds a field k (any case) with value v.
func (d ReqHead) Add(k, v []byte) {
	if d.m != nil {
		d.m.add(k, v)
		return
	}
	d.h.AddBytesKV(k, v)
}

// SetCanonical sets field k (canonical case) to v, replacing one there
// is in an HTTP header; a mux request's fields are only ever added, so a
// field set there must not have been added before (the edge drops the
// client's fields it sets).
func (d ReqHead) SetCanonical(k, v []byte) {
	if d.m != nil {
		d.m.add(k, v)
		return
	}
	d.h.SetCanonical(k, v)
}

// decodeRequest sets req (reset) from a request frame's payload.
func decodeRequest(b []byte, req *fasthttp.Request) (flags byte, err error) {
	flags, method, uri, fields, err := splitRequest(b)
	if err != nil {
		return 0, err
	}
	req.Header.SetMethodBytes(method)
	req.Header.SetRequestURIBytes(uri)
	return flags, decodeFields(fields, &req.Header)
}

// splitRequest splits a request frame's payload into its flags, method,
// request URI and header fields (still encoded).
func splitRequest(b []byte) (flags byte, method, uri, fields []byte, err error) {
	if len(b) < 1 {
		return 0, nil, nil, nil, errBadFrame
	}
	flags, b = b[0], b[1:]
	if method, b, err = nextField(b); err != nil {
		return 0, nil, nil, nil, err
	}
	if uri, b, err = nextField(b); err != nil {
		return 0, nil, nil, nil, err
	}
	if len(method) == 0 || len(uri) == 0 {
		return 0, nil, nil, nil, errBadFrame
	}
	return flags, method, uri, b, nil
}

// decodeFields adds a request's encoded header fields to h.
func decodeFields(b []byte, h *fasthttp.RequestHeader) error {
	for len(b) > 0 {
		var k, v []byte
		var err error
		if k, b, err = nextField(b); err != nil {
			return err
		}
		if v, b, err = nextField(b); err != nil {
			return err
		}
		if len(k) == 0 {
			return errBadFrame
		}
		h.AddBytesKV(k, v)
	}
	return nil
}

// appendResponse appends an answer's payload: body, then status and
// header fields, then the head's length (u32). The Connection field is the owner's connection's, never relayed. skipBody
// (HEAD) sends no body but the Content-Length it would have had.
func appendResponse(dst []byte, resp *fasthttp.Response, body []byte, skipBody bool) []byte {
	if !skipBody {
		dst = append(dst, body...)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, uint16(resp.StatusCode()))
	var num [32]byte
	// As fasthttp's Response.Write: a HEAD answer with a body says its
	// length, one without keeps the Content-Length it was given.
	cl := resp.Header.ContentLength()
	if !skipBody || len(body) > 0 || cl < 0 {
		cl = len(body)
	}
	dst = appendField(dst, strContentLength)
	dst = appendField(dst, strconv.AppendInt(num[:0], int64(cl), 10))
	dated := false
	for k, v := range resp.Header.All() {
		if equalFold(k, strContentLength) || equalFold(k, strConnection) {
			continue
		}
		dated = dated || equalFold(k, strDate)
		dst = appendField(dst, k)
		dst = appendField(dst, v)
	}
	if !dated {
		// The HTTP path's server dates an answer that has no Date
		// (httpx.EnsureDate): so does this one.
		dst = appendField(dst, strDate)
		dst = appendField(dst, fasthttp.AppendHTTPDate(num[:0], time.Now()))
	}
	return binary.BigEndian.AppendUint32(dst, uint32(len(dst)-start))
}

// splitResponse splits an answer's payload into body and head.
func splitResponse(b []byte) (body, head []byte, err error) {
	if len(b) < 4 {
		return nil, nil, errBadFrame
	}
	n := binary.BigEndian.Uint32(b[len(b)-4:])
	if uint64(n) > uint64(len(b)-4) || n < 2 {
		return nil, nil, errBadFrame
	}
	cut := len(b) - 4 - int(n)
	return b[:cut], b[cut : len(b)-4], nil
}

// decodeResponseHead sets resp's status and header fields from an
// answer's head.
func decodeResponseHead(head []byte, resp *fasthttp.Response) error {
	status := int(binary.BigEndian.Uint16(head))
	if status < 100 || status > 999 {
		return errBadFrame
	}
	// fasthttp ignores Date when set or added: it is parsed in, first
	// (httpx.SetDate resets the header).
	for pass := range 2 {
		b := head[2:]
		for len(b) > 0 {
			var k, v []byte
			var err error
			if k, b, err = nextField(b); err != nil {
				return err
			}
			if v, b, err = nextField(b); err != nil {
				return err
			}
			if len(k) == 0 {
				return errBadFrame
			}
			switch isDate := equalFold(k, strDate); {
			case pass == 0 && isDate:
				httpx.SetDate(&resp.Header, v)
			case pass == 1 && !isDate:
				resp.Header.AddBytesKV(k, v)
			}
		}
		if pass == 0 {
			resp.SetStatusCode(status)
		}
	}
	return nil
}

var (
	strContentLength = []byte(fasthttp.HeaderContentLength)
	strConnection    = []byte(fasthttp.HeaderConnection)
	strDate          = []byte(fasthttp.HeaderDate)
)

// equalFold is ASCII case-insensitive equality.
func equalFold(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i]|0x20 != b[i]|0x20 {
			return false
		}
	}
	return true
}

// payloadPool holds frame payload buffers.
var payloadPool = sync.Pool{New: func() any { return new([]byte) }}
