package httpx

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// watchAll feeds stream to w in pieces of step bytes, as reads would
// give them, and returns what the connection hands fasthttp: the bytes
// take passes on once the final answer has begun, then the rest as read.
func watchAll(w *interimWatch, stream string, step int) (handed string, err error) {
	final := false
	for i := 0; i < len(stream); i += step {
		p := []byte(stream[i:min(i+step, len(stream))])
		if final {
			handed += string(p)
			continue
		}
		out, fin, err := w.take(p)
		if err != nil {
			return handed, err
		}
		if fin {
			final = true
			handed += string(out)
		}
	}
	if !final {
		handed += string(w.pend) // the connection ended: hand on what there is
	}
	return handed, nil
}

// recorder is an interimWatch sink for tests: it keeps the Link values.
func recorder(max int, got *[]string) interimWatch {
	return interimWatch{sink: hintSink{ctx: new(fasthttp.RequestCtx), max: max}, send: func(_ *fasthttp.RequestCtx, links [][]byte) {
		for _, l := range links {
			*got = append(*got, string(l))
		}
	}}
}

// TestInterimWatch: the wire's 1xx heads are consumed and only the final
// answer is handed on, however the bytes are split; the Link fields of
// the first max 103 heads go to the sink and no more; other 1xx (100,
// 102, 104) are dropped; bare-LF heads are heads too.
func TestInterimWatch(t *testing.T) {
	const final = "HTTP/1.1 200 OK\r\nLink: </final>\r\nContent-Length: 2\r\n\r\nok"
	stream := "HTTP/1.1 100 Continue\r\n\r\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nlink:  </b.js>; rel=preload \r\nX-Other: 1\r\n\r\n" +
		"HTTP/1.1 102 Processing\r\n\r\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </c.png>; rel=preload\r\n\r\n" +
		"HTTP/1.1 104 Upload Resumption Supported\n\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </d.png>; rel=preload\r\n\r\n" +
		final
	for _, tc := range []struct {
		max  int
		want []string
	}{
		{3, []string{"</a.css>; rel=preload", "</b.js>; rel=preload", "</c.png>; rel=preload", "</d.png>; rel=preload"}},
		{2, []string{"</a.css>; rel=preload", "</b.js>; rel=preload", "</c.png>; rel=preload"}},
		{1, []string{"</a.css>; rel=preload", "</b.js>; rel=preload"}},
		{0, nil},
	} {
		for _, step := range []int{1, 2, 7, 11, 64, len(stream)} {
			var got []string
			w := recorder(tc.max, &got)
			handed, err := watchAll(&w, stream, step)
			if err != nil || handed != final {
				t.Errorf("max %d, step %d: handed on %q, %v; want the final answer only", tc.max, step, handed, err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("max %d, step %d: links %q, want %q", tc.max, step, got, tc.want)
			}
		}
	}
	// Answers without interim heads pass untouched, the whole read
	// handed on as it is (no copy), short reads included.
	for _, s := range []string{final, "HTTP/1.1 101 Switching Protocols\r\n\r\n", "garbage", "HTTP/1.0 404 Not Found\r\n\r\n"} {
		for _, step := range []int{1, 3, len(s)} {
			var got []string
			w := recorder(3, &got)
			if handed, err := watchAll(&w, s, step); handed != s || err != nil || len(got) != 0 {
				t.Errorf("%q in steps of %d: handed %q, %v, links %q", s, step, handed, err, got)
			}
		}
	}
	p := []byte(final)
	if out, fin, _ := (&interimWatch{}).take(p); !fin || &out[0] != &p[0] {
		t.Error("a final answer read whole was copied")
	}
}

// TestInterimBounds: 300 small 103s give 3 hints and the final answer;
// one interim head above MaxInterimHead, or interim heads above
// maxInterimBytes together, fail the answer (a 502 for the fetch).
func TestInterimBounds(t *testing.T) {
	const final = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	hint := "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n"
	var got []string
	w := recorder(3, &got)
	if handed, err := watchAll(&w, strings.Repeat(hint, 300)+final, 1000); err != nil || handed != final || len(got) != 3 {
		t.Errorf("300 hints: handed %q, %v, %d links; want the final answer and 3", handed, err, len(got))
	}
	big := "HTTP/1.1 103 Early Hints\r\nX-Pad: " + strings.Repeat("p", MaxInterimHead) + "\r\n\r\n"
	w = recorder(3, &got)
	if _, err := watchAll(&w, big+final, 4096); !errors.Is(err, errInterimTooLarge) {
		t.Errorf("a %d-byte interim head: %v, want errInterimTooLarge", len(big), err)
	}
	if len(w.pend) > MaxInterimHead+4096 {
		t.Errorf("kept %d bytes of one head", len(w.pend))
	}
	padded := "HTTP/1.1 103 Early Hints\r\nX-Pad: " + strings.Repeat("p", 1000) + "\r\n\r\n"
	n := maxInterimBytes/len(padded) + 1
	w = recorder(3, &got)
	if _, err := watchAll(&w, strings.Repeat(padded, n)+final, 4096); !errors.Is(err, errInterimTooLarge) {
		t.Errorf("%d interim heads of %d bytes: %v, want errInterimTooLarge", n, len(padded), err)
	}
	w = recorder(3, &got)
	if handed, err := watchAll(&w, strings.Repeat(padded, n-2)+final, 4096); err != nil || handed != final {
		t.Errorf("%d interim heads of %d bytes (under 1 MiB): %q, %v; want the final answer", n-2, len(padded), handed, err)
	}
}

// TestHintsMark: the mark comes out of the request bytes and names the
// registered sink; bytes without a mark are sent as they are.
func TestHintsMark(t *testing.T) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("/x")
	req.Header.SetHost("o")
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetProtocol("HTTP/1.1")
	tok := WatchHints(req, &ctx, 3)
	wire := req.Header.AppendBytes(nil)
	out, sink := takeHintsMark(wire, nil)
	if sink.ctx != &ctx || sink.max != 3 || bytes.Contains(out, []byte("Shield-Hints")) {
		t.Fatalf("marked request: sink %+v (want %p, 3), sent %q", sink, &ctx, out)
	}
	if !bytes.HasPrefix(wire, out[:bytes.Index(out, []byte("\r\n"))]) || !bytes.HasSuffix(out, []byte("\r\n\r\n")) || len(out) >= len(wire) {
		t.Errorf("sent %q from %q", out, wire)
	}
	EndHints(req, tok)
	if _, s := takeHintsMark(wire, nil); s.ctx != nil {
		t.Error("a sink outlived its fetch")
	}
	if len(req.Header.PeekBytes(hShieldHints)) != 0 {
		t.Error("the mark stayed on the request")
	}
	var old fasthttp.RequestCtx
	old.Request.Header.SetProtocol("HTTP/1.0")
	if tok := WatchHints(req, &old, 3); tok != 0 || len(req.Header.PeekBytes(hShieldHints)) != 0 {
		t.Error("an HTTP/1.0 client's fetch was marked")
	}
	if tok := WatchHints(req, &ctx, 0); tok != 0 || len(req.Header.PeekBytes(hShieldHints)) != 0 {
		t.Error("max_early_hints 0: the fetch was marked")
	}
	// A body that carries the mark's bytes is the client's: untouched.
	smuggle := []byte("POST / HTTP/1.1\r\nHost: o\r\nContent-Length: 24\r\n\r\nx\r\nShield-Hints: 1\r\nyyyy")
	if out, s := takeHintsMark(smuggle, nil); s.ctx != nil || !bytes.Equal(out, smuggle) {
		t.Errorf("a body holding the mark's bytes was cut: %q", out)
	}
	plain := []byte("GET / HTTP/1.1\r\nHost: o\r\n\r\n")
	if out, s := takeHintsMark(plain, nil); s.ctx != nil || !bytes.Equal(out, plain) {
		t.Errorf("unmarked request changed: %q", out)
	}
}

// FuzzInterimWatch: whatever an origin sends, split however, watching
// never panics and keeps at most MaxInterimHead plus one read; what it
// hands on is the stream minus the interim heads it consumed, which are
// 1xx heads; at most max links lists reach the sink, each from a 103 head.
func FuzzInterimWatch(f *testing.F) {
	f.Add([]byte("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), uint8(3), uint8(1))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 x\r\nLink:\r\n\r\n"), uint8(1), uint8(3))
	f.Add([]byte("HTTP/1.0 1"), uint8(0), uint8(0))
	f.Add([]byte("HTTP/1.1 102 x\n\nHTTP/1.1 103 x\nLink: <a>\n\nHTTP/1.1 103 x\nLink: <b>\n\nHTTP/1.1 204 x\n\n"), uint8(5), uint8(1))
	f.Add([]byte("HTTP/1.1 101 Switching\r\n\r\nHTTP/1.1 103 x\r\n\r\n"), uint8(2), uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, step, max uint8) {
		n := int(step)%64 + 1
		limit := int(max) % 5
		sends := 0
		w := interimWatch{sink: hintSink{ctx: new(fasthttp.RequestCtx), max: limit}, send: func(_ *fasthttp.RequestCtx, links [][]byte) {
			sends++
			for _, l := range links {
				if len(l) == 0 || !bytes.Contains(stream, l) || !bytes.Contains(stream, []byte(" 103")) {
					t.Fatalf("link %q not from a 103 head of %q", l, stream)
				}
			}
		}}
		var handed []byte
		final := false
		for i := 0; i < len(stream); i += n {
			p := stream[i:min(i+n, len(stream))]
			if final {
				handed = append(handed, p...)
				continue
			}
			out, fin, err := w.take(bytes.Clone(p))
			if err != nil {
				if w.total+len(w.pend) <= maxInterimBytes && len(w.pend) <= MaxInterimHead {
					t.Fatalf("error %v within the bounds (%d consumed, %d pending)", err, w.total, len(w.pend))
				}
				return
			}
			if len(w.pend) > MaxInterimHead+n {
				t.Fatalf("kept %d bytes", len(w.pend))
			}
			if fin {
				final = true
				handed = append(handed, out...)
			}
		}
		if !final {
			handed = append(handed, w.pend...)
		}
		if sends > limit {
			t.Fatalf("%d hints relayed, max %d", sends, limit)
		}
		if w.total+len(handed) != len(stream) || !bytes.Equal(handed, stream[w.total:]) {
			t.Fatalf("handed on %q, want %q (the stream after %d consumed bytes)", handed, stream[w.total:], w.total)
		}
		for rest := stream[:w.total]; len(rest) > 0; {
			if headKind(rest) != headInterim {
				t.Fatalf("consumed %q, not an interim head", rest)
			}
			end := headEnd(rest, 0)
			if end < 0 {
				t.Fatalf("consumed %q, not a whole head", rest)
			}
			rest = rest[end:]
		}
	})
}

// TestTrackedConnInterim: through the connection wrapper, a reader with
// a small buffer gets the final answer alone, whatever the writes'
// split; a connection that ends inside an interim head hands on what it
// has, then the error; the next request's answer is watched afresh.
func TestTrackedConnInterim(t *testing.T) {
	const final = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	hint := "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
	read := func(stream string, chunk, buf int) (string, error) {
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			req := make([]byte, 64)
			if _, err := server.Read(req); err != nil { // net.Pipe: the request write waits for this
				return
			}
			for i := 0; i < len(stream); i += chunk {
				if _, err := server.Write([]byte(stream[i:min(i+chunk, len(stream))])); err != nil {
					return
				}
			}
			server.Close()
		}()
		tc := NewTrackedConn(client)
		if _, err := tc.Write([]byte("GET / HTTP/1.1\r\nHost: o\r\n\r\n")); err != nil {
			return "", err
		}
		var got []byte
		b := make([]byte, buf)
		for {
			n, err := tc.Read(b)
			got = append(got, b[:n]...)
			if err != nil {
				return string(got), err
			}
		}
	}
	for _, chunk := range []int{1, 5, 40, 4096} {
		for _, buf := range []int{1, 7, 4096} {
			got, err := read(strings.Repeat(hint, 300)+"HTTP/1.1 102 x\r\n\r\n"+final, chunk, buf)
			if got != final || !errors.Is(err, io.EOF) {
				t.Errorf("writes of %d, reads of %d: %q, %v; want the final answer, then EOF", chunk, buf, got, err)
			}
		}
	}
	if got, err := read(hint+"HTTP/1.1 103 x\r\nLin", 7, 16); got != "HTTP/1.1 103 x\r\nLin" || !errors.Is(err, io.EOF) {
		t.Errorf("ended inside an interim head: %q, %v; want its bytes, then EOF", got, err)
	}
}
