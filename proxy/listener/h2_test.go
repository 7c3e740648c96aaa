package listener

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/httpx"
)

// TestReadPreface: a connection is HTTP/2 only when it opens with the
// whole preface, however it is split; otherwise it is HTTP/1 once its
// first line is an HTTP/1.x request line (or too long, or cut short, to
// tell: fasthttp answers it), and neither — closed unanswered — when that
// line is something else. Every byte read is kept for the server that
// gets the connection.
func TestReadPreface(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		kind   int
	}{
		{"http/1.1", []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n"}, isH1},
		{"short http/1.1", []string{"GET / HTTP/1.0\r\n\r\n"}, isH1},
		{"request line split", []string{"GE", "T / HTT", "P/1.1\r", "\n\r\n"}, isH1},
		{"empty lines first", []string{"\r\n\r\nGET / HTTP/1.1\r\n\r\n"}, isH1},
		{"bad field, still HTTP/1.1", []string{"GET / HTTP/1.1\r\nno colon\r\n\r\n"}, isH1},
		{"bare LF", []string{"GET / HTTP/1.1\nHost: a\n\n"}, isH1},
		{"request line cut short", []string{"GET / HT"}, isH1},
		{"line too long to tell", []string{"GET /" + strings.Repeat("a", maxFirstLine)}, isH1},
		{"preface and frames", []string{h2Preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"}, isH2},
		{"preface byte by byte", strings.Split(h2Preface, ""), isH2},
		{"PRI method, not the preface", []string{"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"}, isH1},
		{"preface cut short", []string{"PRI * HTTP/2.0\r\n"}, isH1},
		{"invalid preface (h2spec 3.5)", []string{"INVALID CONNECTION PREFACE\r\n\r\n"}, notHTTP},
		{"no version", []string{"GET /\r\n\r\n"}, notHTTP},
		{"binary", []string{"\x16\x03\x01\x00\x05hello\n"}, notHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := net.Pipe()
			defer c.Close()
			go func() {
				for _, w := range tc.writes {
					_, _ = peer.Write([]byte(w))
				}
				_ = peer.Close()
			}()
			seen, kind, _ := readPreface(c)
			if kind != tc.kind {
				t.Fatalf("kind = %d, want %d", kind, tc.kind)
			}
			rest, _ := io.ReadAll(&replayConn{Conn: c, pending: seen})
			if got, want := string(rest), strings.Join(tc.writes, ""); got != want {
				t.Fatalf("replayed %q, want %q", got, want)
			}
		})
	}
}

// h2Echo answers what the handler saw of the request, with an Early
// Hint first and a hop-by-hop field HTTP/2 must not carry.
func h2Echo(ctx *fasthttp.RequestCtx) {
	httpx.SetDate(&ctx.Response.Header, []byte("Sun, 06 Nov 1994 08:49:37 GMT"))
	ctx.Response.Header.Add("Link", "</a.css>; rel=preload")
	_ = ctx.EarlyHints()
	ctx.Response.Header.Del("Link")
	ctx.Response.Header.Set("X-Proto", string(ctx.Request.Header.Protocol()))
	ctx.Response.Header.Set("X-TLS", map[bool]string{true: "yes", false: "no"}[ctx.IsTLS()])
	ctx.Response.Header.Set("X-Remote", ctx.RemoteIP().String())
	ctx.Response.Header.Set("X-Host", string(ctx.Host()))
	ctx.Response.Header.Set("X-Req", string(ctx.Method())+" "+string(ctx.RequestURI())+" "+string(ctx.Request.Header.Peek("X-Test")))
	ctx.Response.Header.Add("Vary", "A")
	ctx.Response.Header.Add("Vary", "B")
	ctx.SetConnectionClose()
	ctx.SetBody(append([]byte("body:"), ctx.Request.Body()...))
}

// tooLarge is the HTTP/1.x server's ErrorHandler in these tests: the
// HTTP/2 side must answer through it (413 for a body over the limit).
func tooLarge(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		ctx.Error("too large\n", fasthttp.StatusRequestEntityTooLarge)
		return
	}
	ctx.Error("bad request\n", fasthttp.StatusBadRequest)
}

// TestFailWithoutErrorHandler: with no ErrorHandler on the HTTP/1.x
// server, a request the HTTP/2 side refuses gets a bare 400.
func TestFailWithoutErrorHandler(t *testing.T) {
	var ctx fasthttp.RequestCtx
	(&h2Handler{}).fail(&ctx, fasthttp.ErrBodyTooLarge)
	if ctx.Response.StatusCode() != fasthttp.StatusBadRequest {
		t.Fatalf("status %d, want 400", ctx.Response.StatusCode())
	}
	called := false
	(&h2Handler{onError: func(*fasthttp.RequestCtx, error) { called = true }}).fail(&ctx, fasthttp.ErrBodyTooLarge)
	if !called {
		t.Fatal("the ErrorHandler was not called")
	}
}

func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shield"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// TestPublicServesBothProtocols: one listener, HTTP/1.1 and HTTP/2 —
// over TLS (ALPN) and cleartext (h2c prior knowledge) — every request
// reaches the same fasthttp handler with its method, target, Host,
// fields, body, client address and TLS state; HTTP/2 answers carry no
// hop-by-hop field, no guessed Content-Type, the handler's Date, and the
// handler's Early Hints as a 103. Shutdown ends both servers.
func TestPublicServesBothProtocols(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := map[bool]string{false: "h2c", true: "tls"}[useTLS]
		t.Run(name, func(t *testing.T) {
			s := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
				MaxHeaderSize: 16 << 10, MaxBodySize: 1 << 10, HTTP2: true, H2C: !useTLS,
				HTTP2Limits: config.HTTP2Limits{MaxConcurrentStreams: 10, MaxFrameSize: 16 << 10, StreamWindow: 64 << 10, ConnectionWindow: 1 << 20}}
			pub := New(&fasthttp.Server{Handler: h2Echo, ErrorHandler: tooLarge, NoDefaultContentType: true, NoDefaultDate: true}, s, nil)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var tc *tls.Config
			scheme := "http"
			if useTLS {
				tc, scheme = selfSigned(t), "https"
			}
			served := make(chan error, 1)
			go func() { served <- pub.Serve(ln, tc) }()
			url := scheme + "://" + ln.Addr().String() + "/x?q=1"

			for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
				var p http.Protocols
				if proto == "HTTP/1.1" {
					p.SetHTTP1(true)
				} else if useTLS {
					p.SetHTTP2(true)
				} else {
					p.SetUnencryptedHTTP2(true)
				}
				tr := &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test certificate
				var interim []string
				trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					interim = append(interim, h.Get("Link"))
					return nil
				}}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, url, strings.NewReader("hello"))
				req.Header.Set("X-Test", "v")
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("%s: %v", proto, err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				tr.CloseIdleConnections()
				h := resp.Header
				if resp.Proto != proto || string(body) != "body:hello" || h.Get("X-Proto") != "HTTP/1.1" ||
					h.Get("X-TLS") != map[bool]string{true: "yes", false: "no"}[useTLS] || h.Get("X-Remote") != "127.0.0.1" ||
					h.Get("X-Host") != ln.Addr().String() || h.Get("X-Req") != "POST /x?q=1 v" || h.Get("Date") != "Sun, 06 Nov 1994 08:49:37 GMT" {
					t.Errorf("%s: %s %q %v", proto, resp.Proto, body, h)
				}
				if proto == "HTTP/2.0" {
					if _, ok := h["Connection"]; ok || h.Get("Content-Type") != "" || h.Get("Content-Length") != "10" {
						t.Errorf("HTTP/2 answer fields: %v; want no Connection, no Content-Type, Content-Length 10", h)
					}
					if v := h.Values("Vary"); len(v) != 2 || v[0] != "A" || v[1] != "B" {
						t.Errorf("HTTP/2 Vary fields: %q, want both, in order", v)
					}
					if len(interim) != 1 || interim[0] != "</a.css>; rel=preload" {
						t.Errorf("HTTP/2 interim answers: %q, want one 103 with the Link", interim)
					}
				}
			}

			var p http.Protocols
			if useTLS {
				p.SetHTTP2(true)
			} else {
				p.SetUnencryptedHTTP2(true)
			}
			tr := &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test certificate
			// OPTIONS * reaches the handler (shield answers it 400), not
			// net/http's built-in answer.
			opts, err := tr.RoundTrip(&http.Request{Method: http.MethodOptions, URL: &neturl.URL{Scheme: scheme, Host: ln.Addr().String(), Opaque: "*"}, Header: http.Header{}})
			if err != nil {
				t.Fatal(err)
			}
			_ = opts.Body.Close()
			if got := opts.Header.Get("X-Req"); got != "OPTIONS * " {
				t.Errorf("OPTIONS * over HTTP/2: handler saw %q, want it to reach the handler", got)
			}
			// A body over max_body_size is refused over HTTP/2 too.
			resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodPost, url, strings.NewReader(strings.Repeat("x", 2<<10)))))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			tr.CloseIdleConnections()
			if resp.StatusCode != 413 {
				t.Errorf("2KiB body over HTTP/2 with max_body_size 1KiB: %d, want 413", resp.StatusCode)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := pub.ShutdownWithContext(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			select {
			case <-served:
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return after Shutdown")
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestH2ContentLength: every HTTP/2 answer with a body says its length,
// whether net/http computes it (a body it buffers whole, up to 4 KiB) or
// writeH2Response sets it (larger bodies, HEAD); 204 and 304 carry none.
func TestH2ContentLength(t *testing.T) {
	h := func(ctx *fasthttp.RequestCtx) {
		n, _ := strconv.Atoi(string(ctx.QueryArgs().Peek("n")))
		if st := ctx.QueryArgs().GetUintOrZero("status"); st != 0 {
			ctx.SetStatusCode(st)
		}
		ctx.SetBody(bytes.Repeat([]byte("x"), n))
	}
	ln, tr := h2cServer(t, h, 1<<10)
	for _, tc := range []struct {
		method string
		n      int
		status int
		want   string // Content-Length, "" for none
	}{
		{"GET", 0, 200, "0"}, {"GET", 1, 200, "1"}, {"GET", 1024, 200, "1024"},
		{"GET", h2BufferedBody, 200, strconv.Itoa(h2BufferedBody)},
		{"GET", h2BufferedBody + 1, 200, strconv.Itoa(h2BufferedBody + 1)},
		{"GET", 100 << 10, 200, strconv.Itoa(100 << 10)},
		{"HEAD", 1024, 200, "1024"}, {"HEAD", 100 << 10, 200, strconv.Itoa(100 << 10)},
		{"GET", 0, 204, ""}, {"GET", 0, 304, ""},
	} {
		url := "http://" + ln.Addr().String() + "/?n=" + strconv.Itoa(tc.n) + "&status=" + strconv.Itoa(tc.status)
		resp, err := tr.RoundTrip(must(http.NewRequest(tc.method, url, nil)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_, has := resp.Header["Content-Length"]
		got := resp.Header.Get("Content-Length")
		if resp.StatusCode != tc.status || got != tc.want || has != (tc.want != "") {
			t.Errorf("%s n=%d status %d: %d Content-Length %q (present %v), want %d %q", tc.method, tc.n, tc.status, resp.StatusCode, got, has, tc.status, tc.want)
		}
		if tc.method == "GET" && len(body) != tc.n {
			t.Errorf("%s n=%d: body %d bytes", tc.method, tc.n, len(body))
		}
	}
}

// failingStream yields n bytes, then fails (a cache piece evicted while
// the body is sent).
type failingStream struct{ n int }

func (f *failingStream) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("evicted")
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

// TestH2BodyStreamFailureResetsStream: a body stream that fails, or ends
// short of its Content-Length, resets the HTTP/2 stream: the client gets
// an error, never a short body ended as complete. A stream that ends as
// it should reads cleanly.
func TestH2BodyStreamFailureResetsStream(t *testing.T) {
	h := func(ctx *fasthttp.RequestCtx) {
		good, _ := strconv.Atoi(string(ctx.QueryArgs().Peek("good")))
		cl, _ := strconv.Atoi(string(ctx.QueryArgs().Peek("cl")))
		if ctx.QueryArgs().Has("ok") {
			ctx.SetBodyStream(bytes.NewReader(make([]byte, good)), cl)
			return
		}
		ctx.SetBodyStream(&failingStream{n: good}, cl)
	}
	ln, tr := h2cServer(t, h, 1<<10)
	for _, tc := range []struct {
		query  string
		n      int // bytes of a complete body
		failed bool
	}{
		{"good=100000&cl=1000000", 0, true},   // fails after 100000 bytes of 1000000
		{"good=100000&cl=-1", 0, true},        // fails, length unknown
		{"ok&good=100000&cl=200000", 0, true}, // ends short of its length
		{"ok&good=300000&cl=300000", 300000, false},
		{"ok&good=300000&cl=-1", 300000, false},
	} {
		resp, err := tr.RoundTrip(must(http.NewRequest("GET", "http://"+ln.Addr().String()+"/?"+tc.query, nil)))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if failed := err != nil; failed != tc.failed || (!tc.failed && len(body) != tc.n) {
			t.Errorf("%s: read %d bytes, err %v; want failed = %v", tc.query, len(body), err, tc.failed)
		}
	}
}

// writeToTrap is a body stream whose WriteTo must not be used.
type writeToTrap struct {
	io.Reader
	t *testing.T
}

func (w writeToTrap) WriteTo(io.Writer) (int64, error) {
	w.t.Error("copyBody used the stream's WriteTo")
	return 0, errors.New("WriteTo")
}

// piecesStream writes itself in pieces (as cache.PieceReader's
// WritePieces); its Read must not be used.
type piecesStream struct {
	data  []byte
	piece int
	t     *testing.T
}

func (p *piecesStream) Read([]byte) (int, error) {
	p.t.Error("copyBody read a stream that writes itself in pieces")
	return 0, io.EOF
}

func (p *piecesStream) WritePieces(w io.Writer) (int64, error) {
	var n int64
	for b := p.data; len(b) > 0; {
		k, err := w.Write(b[:min(p.piece, len(b))])
		n += int64(k)
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	return n, nil
}

// sizesWriter records the largest write it is given.
type sizesWriter struct {
	bytes.Buffer
	most int
}

func (w *sizesWriter) Write(p []byte) (int, error) {
	w.most = max(w.most, len(p))
	return w.Buffer.Write(p)
}

// TestCopyBodyBounded: an HTTP/2 answer's body stream is copied without
// its WriteTo (which may fill a batch buffer of its own per blocked
// stream): through copyBody's buffer, writes of at most h2CopyBuf, or by
// its WritePieces when it has one.
func TestCopyBodyBounded(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320,000 bytes
	var w sizesWriter
	n, err := copyBody(&w, writeToTrap{Reader: bytes.NewReader(data), t: t})
	if err != nil || n != int64(len(data)) || !bytes.Equal(w.Bytes(), data) {
		t.Fatalf("copyBody = %d, %v; body equal %v", n, err, bytes.Equal(w.Bytes(), data))
	}
	if w.most > h2CopyBuf {
		t.Errorf("a write of %d bytes, want at most %d", w.most, h2CopyBuf)
	}
	w = sizesWriter{}
	n, err = copyBody(&w, &piecesStream{data: data, piece: 32 << 10, t: t})
	if err != nil || n != int64(len(data)) || !bytes.Equal(w.Bytes(), data) || w.most != 32<<10 {
		t.Fatalf("copyBody of a pieces stream = %d, %v; body equal %v, largest write %d", n, err, bytes.Equal(w.Bytes(), data), w.most)
	}
}

// TestH2RequestBody: a request body over HTTP/2 reaches the handler
// whole, read through several of copyRequest's pooled buffers, with or
// without a Content-Length; one over max_body_size is refused either
// way (a bare 400 without an error handler; shield's makes it 413, e2e
// TestHTTP2).
func TestH2RequestBody(t *testing.T) {
	h := func(ctx *fasthttp.RequestCtx) {
		sum := 0
		for _, b := range ctx.PostBody() {
			sum += int(b)
		}
		ctx.SetBodyString(strconv.Itoa(len(ctx.PostBody())) + " " + strconv.Itoa(sum) + " " + string(ctx.Request.Header.Peek("Content-Length")))
	}
	const maxBody = 5*h2CopyBuf + 100
	ln, tr := h2cServer(t, h, maxBody)
	for _, n := range []int{1, h2CopyBuf, 3*h2CopyBuf + 7, maxBody, maxBody + 1} {
		for _, sized := range []bool{true, false} {
			body := make([]byte, n)
			sum := 0
			for i := range body {
				body[i] = byte(i * 7)
				sum += int(body[i])
			}
			var rd io.Reader = bytes.NewReader(body)
			if !sized {
				rd = io.MultiReader(rd) // no length known: sent without Content-Length
			}
			req := must(http.NewRequest("POST", "http://"+ln.Addr().String()+"/", rd))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if n > maxBody {
				if resp.StatusCode != fasthttp.StatusBadRequest {
					t.Errorf("%d bytes (Content-Length sent: %v): %d, want 400", n, sized, resp.StatusCode)
				}
				continue
			}
			if want := fmt.Sprintf("%d %d %d", n, sum, n); resp.StatusCode != 200 || string(got) != want {
				t.Errorf("%d bytes (Content-Length sent: %v): %d %q, want 200 %q", n, sized, resp.StatusCode, got, want)
			}
		}
	}
}

// h2cServer serves h over cleartext HTTP/2 on a new local listener
// (max_body_size maxBody, small stream limits) until the test ends, and
// returns the listener and a transport that speaks HTTP/2 to it.
func h2cServer(t *testing.T, h fasthttp.RequestHandler, maxBody int) (net.Listener, *http.Transport) {
	t.Helper()
	s := config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		MaxHeaderSize: 16 << 10, MaxBodySize: config.Size(maxBody), H2C: true,
		HTTP2Limits: config.HTTP2Limits{MaxConcurrentStreams: 10, MaxFrameSize: 16 << 10, StreamWindow: 64 << 10, ConnectionWindow: 1 << 20}}
	pub := New(&fasthttp.Server{Handler: h, MaxRequestBodySize: maxBody}, s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = pub.Serve(ln, nil) }()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = pub.Shutdown()
	})
	return ln, tr
}
