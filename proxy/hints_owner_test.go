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

	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
)

// TestEarlyHintsThroughOwner: a client of the edge gets the origin's 103
// when the key's owner fetches it (owner → peer connection → edge →
// client), before the final answer; a hit replays none. Of 300 103s
// (and a 102) the client gets max_early_hints (3), then the 200.
func TestEarlyHintsThroughOwner(t *testing.T) { earlyHintsThroughOwner(t, false) }

// TestEarlyHintsThroughOwnerMux: the same over the multiplexed peer
// transport (the owner's 103s come back as hint frames).
func TestEarlyHintsThroughOwnerMux(t *testing.T) { earlyHintsThroughOwner(t, true) }

func earlyHintsThroughOwner(t *testing.T, mux bool) {
	setup := clusterSetup{}
	if mux {
		setup.cfg = func(c *config.Config) { c.Cluster.Transport = "mux" }
	}
	c := newTestCluster(t, setup, "a", "b")
	c.origin.setHandler(func(ctx *fasthttp.RequestCtx) {
		n := 1
		if bytes.HasPrefix(ctx.Path(), []byte("/flood")) {
			n = 300
			_, _ = ctx.Conn().Write([]byte("HTTP/1.1 102 Processing\r\n\r\n"))
		}
		ctx.Response.Header.Set("Link", "</style.css>; rel=preload")
		for range n {
			_ = ctx.EarlyHints()
		}
		ctx.Response.Header.Del("Link")
		ctx.Response.Header.Set("Cache-Control", "public, max-age=3600")
		ctx.SetBodyString("final")
	})
	a, b := c.node("a"), c.node("b")
	if mux {
		warm := pathWhere(t, "warm", func(p string) bool { return a.owner(t, p) == "b" })
		deadline := time.Now().Add(5 * time.Second)
		for !a.p.cluster.Load().MuxOpen("b") {
			if time.Now().After(deadline) {
				t.Fatal("no mux connection from a to b")
			}
			a.get(t, warm)
			time.Sleep(time.Millisecond)
		}
	}
	path := pathWhere(t, "hints", func(p string) bool { return a.owner(t, p) == "b" })
	raw := func(path string) string {
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
	first := raw(path)
	if !strings.HasPrefix(first, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n") {
		t.Errorf("miss via a, owner b: %q, want the 103 with its Link, then the 200", first)
	}
	if !b.has(t, path, cache.KindResponse) {
		t.Errorf("%s not stored on its owner", path)
	}
	if again := raw(path); !strings.HasPrefix(again, "HTTP/1.1 200 OK\r\n") || !strings.Contains(again, "hit") {
		t.Errorf("hit via a: %q, want a 200 hit with no interim answer", again)
	}
	flood := pathWhere(t, "flood", func(p string) bool { return a.owner(t, p) == "b" })
	got := raw(flood)
	hint := "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
	if !strings.HasPrefix(got, strings.Repeat(hint, 3)+"HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(got, "final") {
		t.Errorf("300 hints via a, owner b: %.600q, want 3 hints, then the 200 with its body", got)
	}
}
