package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestInterimWatch: 103 heads yield their Link fields however the bytes
// are split; other 1xx are skipped; watching stops at the final head.
func TestInterimWatch(t *testing.T) {
	stream := "HTTP/1.1 100 Continue\r\n\r\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nlink:  </b.js>; rel=preload \r\nX-Other: 1\r\n\r\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </c.png>; rel=preload\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nLink: </final>\r\nContent-Length: 2\r\n\r\nok"
	want := []string{"</a.css>; rel=preload", "</b.js>; rel=preload", "</c.png>; rel=preload"}
	for _, step := range []int{1, 2, 7, 64, len(stream)} {
		var got []string
		w := interimWatch{send: func(_ *fasthttp.RequestCtx, links [][]byte) {
			for _, l := range links {
				got = append(got, string(l))
			}
		}}
		watching := true
		for i := 0; i < len(stream) && watching; i += step {
			watching = w.feed([]byte(stream[i:min(i+step, len(stream))]))
		}
		if watching {
			t.Errorf("step %d: still watching after the final head", step)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("step %d: links %q, want %q", step, got, want)
		}
	}
	w := interimWatch{send: func(*fasthttp.RequestCtx, [][]byte) { t.Error("a head that never ends gave hints") }}
	if w.feed([]byte("HTTP/1.1 103 Early Hints\r\nLink: " + strings.Repeat("x", maxInterimHead))) {
		t.Error("an interim head above maxInterimHead is still watched")
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
	tok := watchHints(req, &ctx)
	wire := req.Header.AppendBytes(nil)
	out, sink := takeHintsMark(wire, nil)
	if sink != &ctx || bytes.Contains(out, []byte("Shield-Hints")) {
		t.Fatalf("marked request: sink %p (want %p), sent %q", sink, &ctx, out)
	}
	if !bytes.HasPrefix(wire, out[:bytes.Index(out, []byte("\r\n"))]) || !bytes.HasSuffix(out, []byte("\r\n\r\n")) || len(out) >= len(wire) {
		t.Errorf("sent %q from %q", out, wire)
	}
	endHints(req, tok)
	if _, s := takeHintsMark(wire, nil); s != nil {
		t.Error("a sink outlived its fetch")
	}
	if len(req.Header.PeekBytes(hShieldHints)) != 0 {
		t.Error("the mark stayed on the request")
	}
	var old fasthttp.RequestCtx
	old.Request.Header.SetProtocol("HTTP/1.0")
	if tok := watchHints(req, &old); tok != 0 || len(req.Header.PeekBytes(hShieldHints)) != 0 {
		t.Error("an HTTP/1.0 client's fetch was marked")
	}
	// A body that carries the mark's bytes is the client's: untouched.
	smuggle := []byte("POST / HTTP/1.1\r\nHost: o\r\nContent-Length: 24\r\n\r\nx\r\nShield-Hints: 1\r\nyyyy")
	if out, s := takeHintsMark(smuggle, nil); s != nil || !bytes.Equal(out, smuggle) {
		t.Errorf("a body holding the mark's bytes was cut: %q", out)
	}
	plain := []byte("GET / HTTP/1.1\r\nHost: o\r\n\r\n")
	if out, s := takeHintsMark(plain, nil); s != nil || !bytes.Equal(out, plain) {
		t.Errorf("unmarked request changed: %q", out)
	}
}

// TestEarlyHintsThroughOwner: a client of the edge gets the origin's 103
// when the key's owner fetches it (owner → peer connection → edge →
// client), before the final answer; a hit replays none.
func TestEarlyHintsThroughOwner(t *testing.T) {
	c := newTestCluster(t, clusterSetup{}, "a", "b")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Link", "</style.css>; rel=preload")
		_ = ctx.EarlyHints()
		ctx.Response.Header.Del("Link")
		ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
		ctx.SetBodyString("final")
	})
	a, b := c.node("a"), c.node("b")
	path := pathWhere(t, "hints", func(p string) bool { return a.owner(t, p) == "b" })
	raw := func() string {
		conn, err := a.pubLn.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, testHost)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(bufio.NewReader(conn))
		if err != nil {
			t.Fatalf("read: %v (%q)", err, b)
		}
		return string(b)
	}
	first := raw()
	if !strings.HasPrefix(first, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n") {
		t.Errorf("miss via a, owner b: %q, want the 103 with its Link, then the 200", first)
	}
	if !b.has(t, path, kindResponse) {
		t.Errorf("%s not stored on its owner", path)
	}
	if again := raw(); !strings.HasPrefix(again, "HTTP/1.1 200 OK\r\n") || !strings.Contains(again, "hit") {
		t.Errorf("hit via a: %q, want a 200 hit with no interim answer", again)
	}
}

// FuzzInterimWatch: whatever an origin sends, split however, watching
// never panics, never keeps more than maxInterimHead plus one read, and
// every Link it hands on came from a 103 head.
func FuzzInterimWatch(f *testing.F) {
	f.Add([]byte("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), uint8(3))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 x\r\nLink:\r\n\r\n"), uint8(1))
	f.Add([]byte("HTTP/1.0 1"), uint8(0))
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		n := int(step)%64 + 1
		w := interimWatch{send: func(_ *fasthttp.RequestCtx, links [][]byte) {
			for _, l := range links {
				if len(l) == 0 || !bytes.Contains(stream, l) || !bytes.Contains(stream, []byte(" 103")) {
					t.Fatalf("link %q not from a 103 head of %q", l, stream)
				}
			}
		}}
		for i := 0; i < len(stream); i += n {
			if !w.feed(stream[i:min(i+n, len(stream))]) {
				break
			}
			if len(w.head) > maxInterimHead+n {
				t.Fatalf("kept %d bytes", len(w.head))
			}
		}
	})
}
