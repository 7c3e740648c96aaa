package listener

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shield-proxy/shield/config"
)

// chunkConn reads src in reads of at most chunk bytes (a client's
// segments), then io.EOF.
type chunkConn struct {
	net.Conn
	src   []byte
	chunk int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk)], c.src)
	c.src = c.src[n:]
	return n, nil
}

// filtered is what Go's server reads of stream (after the preface)
// through a filter, read in reads of at most readSize bytes, the client's
// bytes arriving in chunks of chunk.
func filtered(stream []byte, chunk, readSize int) ([]byte, *h2Filter) {
	f := newH2Filter(&chunkConn{src: append([]byte(h2Preface), stream...), chunk: max(chunk, 1)}, nil, newH2Limits(16<<10, 16<<10))
	var out []byte
	buf := make([]byte, max(readSize, 1))
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out[min(len(out), len(h2Preface)):], f
		}
	}
}

func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

func settingsPayload(kv ...uint32) []byte {
	var p []byte
	for i := 0; i+1 < len(kv); i += 2 {
		p = binary.BigEndian.AppendUint16(p, uint16(kv[i]))
		p = binary.BigEndian.AppendUint32(p, kv[i+1])
	}
	return p
}

// TestH2FilterSettings: a SETTINGS frame naming a setting twice becomes
// one naming each once with the value processing in order leaves (the
// smallest header table size); one with an invalid value becomes that
// value alone; any other passes as it is, whatever the read sizes.
func TestH2FilterSettings(t *testing.T) {
	ping := frame(0x6, 0, 0, make([]byte, 8))
	for _, tc := range []struct {
		name    string
		in, out []uint32
	}{
		{"no repeat", []uint32{4, 100, 3, 10}, []uint32{4, 100, 3, 10}},
		{"window twice (h2spec 6.5.3)", []uint32{4, 100, 4, 1}, []uint32{4, 1}},
		{"order of first naming", []uint32{3, 5, 4, 100, 3, 7, 4, 1}, []uint32{3, 7, 4, 1}},
		{"smallest table size", []uint32{1, 0, 1, 4096}, []uint32{1, 0}},
		{"invalid value kept for Go to refuse", []uint32{4, 1, 2, 5, 4, 1 << 31}, []uint32{2, 5}},
	} {
		in := append(frame(0x4, 0, 0, settingsPayload(tc.in...)), ping...)
		want := append(frame(0x4, 0, 0, settingsPayload(tc.out...)), ping...)
		for _, sizes := range [][2]int{{1, 1}, {3, 7}, {1000, 9}, {1000, 1000}} {
			if got, _ := filtered(in, sizes[0], sizes[1]); !bytes.Equal(got, want) {
				t.Errorf("%s, chunks %v: got % x, want % x", tc.name, sizes, got, want)
			}
		}
	}
	ack := frame(0x4, flagAck, 0, nil)
	if got, f := filtered(ack, 100, 100); !bytes.Equal(got, ack) || f.rewrites != 0 {
		t.Errorf("SETTINGS ACK: % x", got)
	}
}

// block is fields HPACK-encoded by enc (its table carried over).
func block(enc *hpack.Encoder, buf *bytes.Buffer, kv ...string) []byte {
	buf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(buf.Bytes())
}

// TestH2FilterHeaders: a header block with a connection-specific field or
// a TE other than trailers ends with the poison field, in its last frame
// (before the padding) when that frame has room, else it is left as it
// is; any other block passes as it is. The blocks share the
// client encoder's table (the second "connection" is an index), which
// the filter's decoder must follow.
func TestH2FilterHeaders(t *testing.T) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	req := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a.test"}
	fields := func(kv ...string) []byte { return block(enc, &buf, append(req, kv...)...) }
	eh := byte(flagEndHeaders)
	poisoned := func(b []byte) []byte { return append(bytes.Clone(b), poisonField...) }
	var in, want []byte
	add := func(i, w []byte) { in, want = append(in, i...), append(want, w...) }

	b := fields()
	add(frame(1, eh|1, 1, b), frame(1, eh|1, 1, b))
	b = fields("connection", "keep-alive")
	add(frame(1, eh|1, 3, b), frame(1, eh|1, 3, poisoned(b)))
	b = fields("connection", "keep-alive") // an index now
	add(frame(1, eh|1, 5, b), frame(1, eh|1, 5, poisoned(b)))
	b = fields("te", "trailers")
	add(frame(1, eh|1, 7, b), frame(1, eh|1, 7, b))
	b = fields("te", "trailers, deflate")
	add(frame(1, eh|1, 9, b), frame(1, eh|1, 9, poisoned(b)))
	b = fields("upgrade", "h2c")
	prio := []byte{3, 0, 0, 0, 0, 16}
	add(frame(1, eh|flagPadded|flagPriority, 11, append(append(bytes.Clone(prio), b...), 0, 0, 0)),
		frame(1, eh|flagPadded|flagPriority, 11, append(append(bytes.Clone(prio), poisoned(b)...), 0, 0, 0)))
	b = fields("x-a", "1", "transfer-encoding", "chunked")
	add(append(frame(1, 1, 13, b[:3]), frame(9, eh, 13, b[3:])...),
		append(frame(1, 1, 13, b[:3]), frame(9, eh, 13, poisoned(b[3:]))...))
	// A frame of the largest size: no room for the field.
	b = fields("keep-alive", "5", "x-big", strings.Repeat("~", 16<<10-200))
	pad := 16<<10 - 1 - len(b)
	full := append(append([]byte{byte(pad)}, b...), make([]byte, pad)...)
	add(frame(1, eh|flagPadded, 15, full), frame(1, eh|flagPadded, 15, full))
	b = fields()
	add(frame(1, eh|1, 17, b), frame(1, eh|1, 17, b))

	for _, sizes := range [][2]int{{1, 1}, {5, 9}, {1 << 20, 1 << 20}} {
		got, f := filtered(in, sizes[0], sizes[1])
		if !bytes.Equal(got, want) {
			t.Fatalf("chunks %v: got\n% x\nwant\n% x", sizes, got, want)
		}
		if f.rewrites != 5 || f.dead {
			t.Fatalf("chunks %v: %d rewrites (dead %v), want 5", sizes, f.rewrites, f.dead)
		}
	}
}

// TestH2FilterGivesUp: where Go ends the connection — a frame over its
// size, a header block interrupted, a block it cannot decode — the
// filter passes that frame and everything after as they are.
func TestH2FilterGivesUp(t *testing.T) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	conn := block(enc, &buf, ":method", "GET", "connection", "x")
	tail := frame(1, flagEndHeaders, 3, conn) // would be poisoned
	for name, head := range map[string][]byte{
		"too large":           frame(0, 0, 1, make([]byte, 16<<10+1)),
		"interrupted block":   append(frame(1, 0, 1, nil), frame(0, 0, 1, nil)...),
		"stray CONTINUATION":  frame(9, flagEndHeaders, 1, nil),
		"undecodable":         frame(1, flagEndHeaders, 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
		"HEADERS on stream 0": frame(1, flagEndHeaders, 0, conn),
	} {
		in := append(bytes.Clone(head), tail...)
		got, f := filtered(in, 7, 100)
		if !bytes.Equal(got, in) || !f.dead || f.rewrites != 0 {
			t.Errorf("%s: passed % x (dead %v), want the input", name, got, f.dead)
		}
	}
}

// TestH2FilterWithGo: through Public's HTTP/2 server, a request with a
// connection-specific field, or TE other than trailers, is reset with
// PROTOCOL_ERROR (RFC 9113 §8.2.2) — not answered 400 — and the
// connection goes on: a request after it, whose fields are indexes into
// the table the reset one filled, is answered. A SETTINGS frame naming
// the window twice is acknowledged and the last value applies.
func TestH2FilterWithGo(t *testing.T) {
	s := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		MaxHeaderSize: 16 << 10, MaxBodySize: 1 << 10, HTTP2: true, H2C: true,
		HTTP2Limits: config.HTTP2Limits{MaxConcurrentStreams: 10, MaxFrameSize: 16 << 10, StreamWindow: 64 << 10, ConnectionWindow: 1 << 20}}
	pub := New(&fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("0123456789") }}, s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = pub.Serve(ln, nil) }()
	defer func() { _ = pub.Shutdown() }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write([]byte(h2Preface))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteRawFrame(http2.FrameSettings, 0, 0, settingsPayload(4, 100, 4, 3))
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	req := []string{":method", "GET", ":scheme", "http", ":path", "/", ":authority", "a.test"}
	streams := map[uint32][]string{
		1: append(req, "connection", "keep-alive"),
		3: append(req, "te", "gzip"),
		5: append(req, "x-ok", "1"),
		7: append(req, "x-ok", "1"), // every field an index
	}
	for id := uint32(1); id <= 7; id += 2 {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndStream: true, EndHeaders: true, BlockFragment: block(enc, &buf, streams[id]...)})
	}
	got := map[uint32]string{}
	acked := false
	for got[1] == "" || got[3] == "" || !strings.Contains(got[5], "data") || !strings.Contains(got[7], "data") {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			acked = acked || f.IsAck()
		case *http2.RSTStreamFrame:
			got[f.StreamID] = "reset " + f.ErrCode.String()
		case *http2.MetaHeadersFrame:
			if _, ok := got[f.StreamID]; !ok {
				got[f.StreamID] = "status " + f.PseudoValue("status")
			}
		case *http2.HeadersFrame:
			t.Fatalf("HEADERS not decoded")
		case *http2.DataFrame:
			// The stream window is the SETTINGS frame's last value, 3.
			if !strings.Contains(got[f.StreamID], "data") {
				got[f.StreamID] += " data " + strconv.Itoa(len(f.Data()))
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		}
	}
	want := map[uint32]string{1: "reset PROTOCOL_ERROR", 3: "reset PROTOCOL_ERROR", 5: "status 200 data 3", 7: "status 200 data 3"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("stream %d: %q, want %q", id, got[id], w)
		}
	}
	if !acked {
		t.Error("SETTINGS not acknowledged")
	}
}

// FuzzH2Filter: any byte stream through the filter, in any segments and
// read sizes, never panics; without a rewrite Go reads the stream as it
// came (less a frame left incomplete at its end); with one, what Go
// reads is still a sequence of frames.
func FuzzH2Filter(f *testing.F) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	f.Add(frame(4, 0, 0, settingsPayload(4, 100, 4, 1)), uint8(3), uint8(9))
	f.Add(append(frame(1, flagEndHeaders, 1, block(enc, &buf, ":method", "GET", "connection", "x")), frame(0, 1, 1, []byte("abc"))...), uint8(1), uint8(4))
	f.Add(append(frame(1, 0, 1, block(enc, &buf, "te", "x")), frame(9, flagEndHeaders|flagPadded, 1, []byte{1, 2})...), uint8(200), uint8(200))
	f.Fuzz(func(t *testing.T, stream []byte, chunk, readSize uint8) {
		out, flt := filtered(stream, int(chunk), int(readSize))
		if flt.rewrites == 0 {
			if !bytes.HasPrefix(stream, out) {
				t.Fatalf("no rewrite, yet\n% x\nread as\n% x", stream, out)
			}
			if tail := stream[len(out):]; len(tail) >= frameHeaderLen && len(tail) >= frameHeaderLen+frameLen(tail) {
				t.Fatalf("a whole frame held back: % x", tail)
			}
			return
		}
		for len(out) >= frameHeaderLen && len(out) >= frameHeaderLen+frameLen(out) {
			out = out[frameHeaderLen+frameLen(out):]
		}
		if len(out) > 0 && len(stream) > 0 && bytes.HasSuffix(stream, out) {
			return // the stream's own incomplete last frame, passed after giving up
		}
		if len(out) > 0 {
			t.Fatalf("rewritten stream ends with %d bytes that are no frame", len(out))
		}
	})
}

// BenchmarkH2Filter: the filter's cost per request of an h2load-like
// client (a HEADERS frame of indexed fields, a WINDOW_UPDATE), read as
// Go's framer reads (a header, then its payload); "raw" is the same reads
// without the filter.
func BenchmarkH2Filter(b *testing.B) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	var stream []byte
	const reqs = 1000
	for i := range reqs {
		hb := block(enc, &buf, ":method", "GET", ":path", "/bench/object?size=1024&cc=public,%20max-age=3600",
			":scheme", "http", ":authority", "127.0.0.1:8080", "accept", "*/*", "accept-encoding", "gzip, deflate", "user-agent", "h2load nghttp2/1.64.0")
		stream = append(stream, frame(1, flagEndHeaders|1, uint32(2*i+1), hb)...)
		stream = append(stream, frame(8, 0, 0, []byte{0, 0, 4, 0})...)
	}
	src := append([]byte(h2Preface), stream...)
	read := func(r io.Reader) {
		var hdr [9]byte
		payload := make([]byte, 16<<10)
		_, _ = io.ReadFull(r, payload[:len(h2Preface)])
		for range 2 * reqs {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(r, payload[:frameLen(hdr[:])]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N / reqs {
			read(&chunkConn{src: src, chunk: 4 << 10})
		}
	})
	b.Run("filter", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N / reqs {
			read(newH2Filter(&chunkConn{src: src, chunk: 4 << 10}, nil, newH2Limits(16<<10, 16<<10)))
		}
	})
}

// TestH2FilterSettingsFlood: h2MaxSettings SETTINGS frames (and any
// number of ACKs) pass; the next one ends the connection: every read
// after it fails with errH2Flood, before Go sees the frame.
func TestH2FilterSettingsFlood(t *testing.T) {
	settings := frame(0x4, 0, 0, settingsPayload(4, 65535))
	ack := frame(0x4, flagAck, 0, nil)
	var in []byte
	for range h2MaxSettings {
		in = append(append(in, settings...), ack...)
	}
	passed := len(in)
	in = append(in, settings...)
	f := newH2Filter(&chunkConn{src: append([]byte(h2Preface), in...), chunk: 100}, nil, newH2Limits(16<<10, 16<<10))
	var out []byte
	buf := make([]byte, 64)
	var err error
	for err == nil {
		var n int
		n, err = f.Read(buf)
		out = append(out, buf[:n]...)
	}
	if err != errH2Flood {
		t.Fatalf("read error %v, want errH2Flood", err)
	}
	if got := len(out) - len(h2Preface); got != passed {
		t.Errorf("passed %d bytes, want %d (the frames before the flood's)", got, passed)
	}
	if _, err := f.Read(buf); err != errH2Flood {
		t.Errorf("read after the flood: %v, want errH2Flood", err)
	}
}
