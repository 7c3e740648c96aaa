package proxy

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/cachekey"
	"github.com/shield-proxy/shield/config"
	"github.com/shield-proxy/shield/proxy/cache"
)

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// hangUpOrigin accepts connections and closes each without answering
// once the gate opens: an origin that fails after the fetch has started.
type hangUpOrigin struct {
	ln      net.Listener
	accepts atomic.Int64
	done    chan struct{}
}

func newHangUpOrigin(t testing.TB, g *gate) *hangUpOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &hangUpOrigin{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.accepts.Add(1)
			<-g.ch
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		g.open()
		_ = ln.Close()
		<-o.done
	})
	return o
}

func TestOriginFailure(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		p := newTestProxy(t, closedAddr(t), nil)
		got := summary(serve(p, get(t, "/down")))
		if got.code != 502 || !strings.Contains(got.cacheStatus, "detail=error") {
			t.Fatalf("response = %+v, want 502 with detail=error", got)
		}
	})
	t.Run("origin 5xx with explicit freshness is stored RFC9111§3", func(t *testing.T) {
		o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.WriteHeader(500)
			_, _ = w.Write([]byte("cacheable error"))
		})
		p := newTestProxy(t, o.addr(), nil)
		for i := range 2 {
			got := summary(serve(p, get(t, "/5xx")))
			if got.code != 500 || got.body != "cacheable error" {
				t.Fatalf("request %d = %+v, want the origin's 500", i, got)
			}
			if i == 1 && got.cacheStatus != "shield; hit; ttl=59" && got.cacheStatus != "shield; hit; ttl=60" {
				t.Fatalf("second request Cache-Status = %q, want a hit", got.cacheStatus)
			}
		}
		if n := o.hits.Load(); n != 1 {
			t.Fatalf("origin got %d requests, want 1 (a 500 with max-age is stored)", n)
		}
	})
	t.Run("origin 5xx without explicit freshness is passed, not stored", func(t *testing.T) {
		o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "public")
			w.WriteHeader(503)
			_, _ = w.Write([]byte("origin says no"))
		})
		p := newTestProxy(t, o.addr(), nil)
		for i := range 2 {
			got := summary(serve(p, get(t, "/5xx")))
			if got.code != 503 || got.body != "origin says no" {
				t.Fatalf("request %d = %+v, want the origin's 503", i, got)
			}
		}
		if n := o.hits.Load(); n != 2 {
			t.Fatalf("origin got %d requests, want 2 (errors are not cached)", n)
		}
	})
}

// TestOriginFailureCoalesced: waiters on a failing fetch answer the
// leader's status instead of each retrying the origin.
func TestOriginFailureCoalesced(t *testing.T) {
	const clients = 20
	tests := []struct {
		name       string
		wantStatus int
		wantDetail string
		start      func(t *testing.T, g *gate) (addr string, requests func() int64)
		edit       func(*config.Config)
	}{
		{
			name: "origin hangs up", wantStatus: 502, wantDetail: "detail=error",
			start: func(t *testing.T, g *gate) (string, func() int64) {
				o := newHangUpOrigin(t, g)
				return o.ln.Addr().String(), o.accepts.Load
			},
		},
		{
			name: "origin slower than the timeout", wantStatus: 504, wantDetail: "detail=timeout",
			start: func(t *testing.T, g *gate) (string, func() int64) {
				o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
					select {
					case <-r.Context().Done(): // the proxy gave up and closed
					case <-g.ch:
					}
				})
				return o.addr(), o.hits.Load
			},
			edit: func(c *config.Config) {
				c.Origins["o"].Timeout = time.Second
				c.Cache.WaitTimeout = time.Minute // waiters outlast the leader
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t)
			addr, requests := tt.start(t, g)
			p := newTestProxy(t, addr, tt.edit)
			ctxs := make([]*fasthttp.RequestCtx, clients)
			for i := range ctxs {
				ctxs[i] = get(t, "/fail")
			}
			wait := concurrently(p, ctxs)
			queued(t, p, clients-1)
			if tt.wantStatus == 502 {
				g.open() // hang up now; the timeout case waits for its deadline
			}
			wait()
			for i, ctx := range ctxs {
				got := summary(ctx)
				if got.code != tt.wantStatus || !strings.Contains(got.cacheStatus, tt.wantDetail) {
					t.Fatalf("client %d = %+v, want %d with %s", i, got, tt.wantStatus, tt.wantDetail)
				}
			}
			if n := requests(); n != 1 {
				t.Fatalf("origin got %d requests, want 1", n)
			}
		})
	}
}

// TestWaitTimeout: a waiter gives up after cache.wait_timeout, with a 504
// of its own, while the leader goes on.
func TestWaitTimeout(t *testing.T) {
	g := newGate(t)
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		<-g.ch
		w.Header().Set("Cache-Control", "public, max-age=60")
		_, _ = w.Write([]byte("late"))
	})
	p := newTestProxy(t, o.addr(), func(c *config.Config) { c.Cache.WaitTimeout = 50 * time.Millisecond })
	leader := get(t, "/slow")
	waitLeader := concurrently(p, []*fasthttp.RequestCtx{leader})
	waitUntil(t, "the leader reaches the origin", func() bool { return o.hits.Load() == 1 })
	waiter := serve(p, get(t, "/slow"))
	if got := summary(waiter); got.code != 504 || !strings.Contains(got.cacheStatus, "detail=wait-timeout") {
		t.Fatalf("waiter = %+v, want 504 wait-timeout", got)
	}
	g.open()
	waitLeader()
	if got := summary(leader); got.code != 200 || got.body != "late" {
		t.Fatalf("leader = %+v, want 200 %q", got, "late")
	}
}

// TestTooLargeStreamsThrough: a body over max_object_size (64 KiB here)
// reaches the client intact and is not stored, with or without a
// Content-Length.
func TestTooLargeStreamsThrough(t *testing.T) {
	body := make([]byte, 300*1024)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	tests := []struct {
		name          string
		contentLength bool
	}{
		{"Content-Length", true},
		{"chunked", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				if tt.contentLength {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				}
				for chunk := range slices.Chunk(body, 10_000) {
					_, _ = w.Write(chunk)
					w.(http.Flusher).Flush()
				}
			})
			p := newTestProxy(t, o.addr(), nil)
			for i := range 2 {
				ctx := serve(p, get(t, "/big"))
				got := ctx.Response.Body()
				if ctx.Response.StatusCode() != 200 || !bytes.Equal(got, body) {
					t.Fatalf("request %d: status %d, %d bytes (intact: %v), want 200 and %d intact bytes",
						i, ctx.Response.StatusCode(), len(got), bytes.Equal(got, body), len(body))
				}
				if cs := string(ctx.Response.Header.Peek("Cache-Status")); !strings.Contains(cs, "too-large") {
					t.Fatalf("request %d: Cache-Status = %q, want detail=too-large", i, cs)
				}
			}
			if n := o.hits.Load(); n != 2 {
				t.Fatalf("origin got %d requests, want 2 (nothing stored)", n)
			}
			if e, ok := stored(t, p, primaryKey(p, get(t, "/big"))); ok && e.Kind != cache.KindHitForMiss {
				t.Fatalf("stored an entry of kind %d for a too-large body, want none or hit-for-miss", e.Kind)
			}
		})
	}
}

// TestCorruptEntryIsMiss writes broken entries straight into the store
// under a request's key: each must be a counted miss, then replaced by a
// good entry.
func TestCorruptEntryIsMiss(t *testing.T) {
	good := func(key []byte) []byte {
		e := cache.Entry{Kind: cache.KindResponse, Status: 200, StoredAt: time.Now().UnixNano(), Lifetime: int64(time.Hour),
			KeyDigest: cachekey.Digest(key), Body: []byte("planted")}
		return cache.AppendEntry(nil, &e, nil, nil)
	}
	tests := []struct {
		name  string
		value func(key []byte) []byte
	}{
		{"garbage", func([]byte) []byte { return bytes.Repeat([]byte("junk"), 40) }},
		{"flipped byte", func(key []byte) []byte { b := good(key); b[3] ^= 1; return b }},
		{"truncated", func(key []byte) []byte { b := good(key); return b[:len(b)-1] }},
		{"other key's entry", func([]byte) []byte { return good([]byte("another key")) }},
		{"unknown version", func(key []byte) []byte {
			b := good(key)
			return reseal(b, 3, 4) // the version byte: one past the current format (3)
		}},
		{"short", func([]byte) []byte { return []byte{1, 2, 3} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newTestOrigin(t, cacheable("from origin"))
			p := newTestProxy(t, o.addr(), nil)
			key := primaryKey(p, get(t, "/c"))
			// Make sure the good entry would be served, so that a miss
			// below is the corruption's doing.
			putEntry(t, p, key, good(key))
			if got := summary(serve(p, get(t, "/c"))); got.body != "planted" {
				t.Fatalf("planted good entry: response %+v, want a hit %q", got, "planted")
			}
			// Planted as a snapshot or an earlier release holds it: not
			// this process's write, so read with its checksum checked
			// (values this process stores are trusted, proxy/cache/store.go).
			p.cache.Fastcache().Set(key, tt.value(key))
			before := p.g.corrupt.Get()
			got := summary(serve(p, get(t, "/c")))
			if got.code != 200 || got.body != "from origin" || !strings.HasPrefix(got.cacheStatus, "shield; fwd=miss") {
				t.Fatalf("response = %+v, want a miss answered by the origin", got)
			}
			if n := p.g.corrupt.Get() - before; n != 1 {
				t.Fatalf("corrupt counter rose by %d, want 1", n)
			}
			if got := summary(serve(p, get(t, "/c"))); !strings.HasPrefix(got.cacheStatus, "shield; hit") || got.body != "from origin" {
				t.Fatalf("after the miss: %+v, want a hit on the origin's answer", got)
			}
		})
	}
}

// TestCorruptVariantIsMiss: the same for a broken variant under a good
// vary marker.
func TestCorruptVariantIsMiss(t *testing.T) {
	o := newTestOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Vary", "Accept-Language")
		_, _ = w.Write([]byte("v" + strconv.FormatInt(n, 10)))
	})
	p := newTestProxy(t, o.addr(), nil)
	serve(p, get(t, "/v", "Accept-Language: en"))
	vkey := cachekey.AppendVary(primaryKey(p, get(t, "/v")), []byte("accept-language"), []byte("en"))
	if e, ok := stored(t, p, vkey); !ok || string(e.Body) != "v1" {
		t.Fatalf("variant key computed by the test holds %v %q, want the stored variant", ok, e.Body)
	}
	p.cache.Fastcache().Set(vkey, []byte("not an entry at all, but long enough to look like one....................."))
	before := p.g.corrupt.Get()
	got := summary(serve(p, get(t, "/v", "Accept-Language: en")))
	if got.body != "v2" || !strings.HasPrefix(got.cacheStatus, "shield; fwd=vary-miss") {
		t.Fatalf("response = %+v, want a vary-miss answered by the origin", got)
	}
	if n := p.g.corrupt.Get() - before; n != 1 {
		t.Fatalf("corrupt counter rose by %d, want 1", n)
	}
}

// reseal returns a copy of enc with the meta byte at metaOff set to v and
// the checksum recomputed, so that only the content check can reject it
// (the footer's last 8 bytes: xxhash of body and meta).
func reseal(enc []byte, metaOff int, v byte) []byte {
	var e cache.Entry
	if err := cache.DecodeEntry(enc, &e); err != nil {
		panic(err)
	}
	out := slices.Clone(enc)
	out[len(e.Body)+metaOff] = v
	payload := out[:len(out)-16]
	sum := xxhash.Sum64(payload)
	for i := range 8 {
		out[len(out)-8+i] = byte(sum >> (8 * i))
	}
	return out
}

// TestStoreInPlace: a miss's body read with room after it (readBody) is
// encoded in place — the entry shares the body's buffer, no second copy
// of the body — and decodes to the same entry; a body without the room,
// or one not the caller's to append to, is copied as before.
func TestStoreInPlace(t *testing.T) {
	o := newTestOrigin(t, cacheable("x"))
	p := newTestProxy(t, o.addr(), nil)
	var h fasthttp.RequestHeader
	now := time.Now()
	headers := []cache.Header{{Name: []byte("Content-Type"), Value: []byte("text/plain")}}
	want := bytes.Repeat([]byte("b"), 5000)
	for _, c := range []struct {
		name           string
		short          int // bytes of room missing
		owned, inPlace bool
	}{
		{"room, owned", 0, true, true},
		{"a byte short", 1, true, false},
		{"room, not owned", 0, false, false},
	} {
		e := cache.Entry{Kind: cache.KindResponse, Status: 200, StoredAt: now.UnixNano(), Lifetime: int64(time.Hour),
			FetchSeq: p.cache.Invalidations().Next(), ETag: []byte(`"v1"`)}
		room := cache.EntryMetaMax(&e, nil, headers) - c.short
		e.Body = append(make([]byte, 0, len(want)+room), want...)
		key := []byte("k " + c.name)
		enc, _, res := p.storeResponse(key, &h, &e, nil, headers, now, c.owned)
		if res != cache.Stored {
			t.Fatalf("%s: not stored (%v)", c.name, res)
		}
		if shared := &enc[0] == &e.Body[0]; shared != c.inPlace {
			t.Errorf("%s: entry shares the body's buffer: %v, want %v", c.name, shared, c.inPlace)
		}
		var d cache.Entry
		if err := cache.DecodeEntryCheck(enc, &d, true); err != nil || !bytes.Equal(d.Body, want) || string(d.ETag) != `"v1"` {
			t.Fatalf("%s: encoded entry does not decode as stored: %v, body %d bytes, ETag %q", c.name, err, len(d.Body), d.ETag)
		}
		if got, ok := stored(t, p, key); !ok || !bytes.Equal(got.Body, want) {
			t.Fatalf("%s: cache holds %d bytes (found %v), want the body", c.name, len(got.Body), ok)
		}
	}
}

// TestReadBodyHeadroom: readBody leaves the room asked for after a body
// read whole, whether fasthttp read it or it is read from the stream.
func TestReadBodyHeadroom(t *testing.T) {
	want := bytes.Repeat([]byte("x"), 3000)
	var whole, streamed fasthttp.Response
	whole.SetBody(want)
	streamed.SetBodyStream(bytes.NewReader(want), len(want))
	for name, resp := range map[string]*fasthttp.Response{"read by fasthttp": &whole, "streamed": &streamed} {
		body, complete, err := readBody(resp, 1<<20, 300)
		if err != nil || !complete || !bytes.Equal(body, want) {
			t.Fatalf("%s: %d bytes, complete %v, err %v", name, len(body), complete, err)
		}
		if room := cap(body) - len(body); room < 300 {
			t.Errorf("%s: %d bytes of room after the body, want at least 300", name, room)
		}
	}
}
