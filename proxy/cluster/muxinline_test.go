package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The owner's reader serves a request whose answer is at hand inline
// (Local.ServePeerHit) and hands every other to a worker.

// requestFrames returns request frames for uris to n (ids first,
// first+1, …), with n's generation.
func requestFrames(n *testNode, first uint32, uris ...string) []byte {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	var frames []byte
	for i, uri := range uris {
		req.Reset()
		req.SetRequestURI(uri)
		req.Header.SetHost("example.test")
		req.Header.Set("Shield-Generation", fmt.Sprint(n.m.View().Current.Generation()))
		payload := appendRequest(nil, req, 0)
		frames = appendFrameHeader(frames, frameRequest, first+uint32(i), uint32(len(payload)))
		frames = append(frames, payload...)
	}
	return frames
}

// inlineHits makes l answer every request for a path under /hit inline
// (ServePeerHit), "inline <uri>", and nothing else.
func inlineHits(l *fakeLocal) {
	l.hit = func(ctx *fasthttp.RequestCtx) bool {
		if !strings.HasPrefix(string(ctx.Path()), "/hit") {
			return false
		}
		ctx.SetBodyString("inline " + string(ctx.RequestURI()))
		return true
	}
}

// readAnswer reads one answer frame and returns its id and body.
func readAnswer(t *testing.T, br *bufio.Reader) (uint32, string) {
	t.Helper()
	var hdr [frameHeaderLen]byte
	fh, p, err := readFrame(br, &hdr, nil, 1<<30)
	if err != nil || fh.typ != frameResponse {
		t.Fatalf("answer: %+v %v", fh, err)
	}
	body, _, err := splitResponse(p)
	if err != nil {
		t.Fatal(err)
	}
	return fh.id, string(body)
}

// writeLog is a connection that records each Write as it came.
type writeLog struct {
	net.Conn // nil: only the methods below are called
	remote   net.Addr
	mu       sync.Mutex
	writes   [][]byte
}

func (c *writeLog) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(b))
	return len(b), nil
}

func (c *writeLog) RemoteAddr() net.Addr             { return c.remote }
func (c *writeLog) LocalAddr() net.Addr              { return c.remote }
func (c *writeLog) SetWriteDeadline(time.Time) error { return nil }
func (c *writeLog) SetReadDeadline(time.Time) error  { return nil }
func (c *writeLog) SetDeadline(time.Time) error      { return nil }
func (c *writeLog) Close() error                     { return nil }
func (c *writeLog) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (c *writeLog) snapshot() [][]byte               { c.mu.Lock(); defer c.mu.Unlock(); return c.writes }
func (c *writeLog) frames(t *testing.T) (ids []uint32) {
	return frameIDs(t, bytes.Join(c.snapshot(), nil))
}

// frameIDs lists the ids of the answer frames in b.
func frameIDs(t *testing.T, b []byte) (ids []uint32) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(b))
	for br.Buffered() > 0 || len(ids) == 0 {
		id, body := readAnswer(t, br)
		if !strings.HasPrefix(body, "inline /hit") {
			t.Fatalf("answer %d: %q", id, body)
		}
		ids = append(ids, id)
		if _, err := br.Peek(1); err != nil {
			break
		}
	}
	return ids
}

// TestMuxInlineBatch: requests read together whose answers are at hand
// are served by the reader itself, in order, and answered with one
// write; a request read on its own gets its answer at once.
func TestMuxInlineBatch(t *testing.T) {
	h := newHarness(t, setup{local: inlineHits}, "a", "b")
	a, b := h.node("a"), h.node("b")
	conn := &writeLog{remote: &net.TCPAddr{IP: a.ip, Port: 50000}}
	pr, pw := net.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	s := b.node.newMuxServer(conn, bufio.NewReaderSize(pr, 16<<10))
	go s.w.run()
	done := make(chan struct{})
	go func() {
		s.read()
		s.close()
		close(done)
	}()
	// Five frames in one write: one answer write. net.Pipe hands them
	// over as one read.
	go func() { _, _ = pw.Write(requestFrames(b, 1, "/hit/1", "/hit/2", "/hit/3", "/hit/4", "/hit/5")) }()
	waitUntil(t, "five answers", func() bool { return len(conn.snapshot()) > 0 })
	if w := conn.snapshot(); len(w) != 1 {
		t.Fatalf("%d writes for five requests read together, want 1", len(w))
	}
	if ids := conn.frames(t); fmt.Sprint(ids) != "[1 2 3 4 5]" {
		t.Fatalf("answers %v", ids)
	}
	// One more, alone: answered without waiting for another.
	go func() { _, _ = pw.Write(requestFrames(b, 6, "/hit/6")) }()
	waitUntil(t, "the sixth answer", func() bool { return len(conn.snapshot()) == 2 })
	_ = pw.Close()
	<-done
	if got := b.local.inline.Load(); got != 6 {
		t.Errorf("%d served inline, want 6", got)
	}
	if len(b.local.served) != 0 {
		t.Errorf("workers served %v", b.local.served)
	}
}

// TestMuxInlineMissDoesNotBlock: a request that is not a hit (its owner
// waits for the origin) goes to a worker: the hit read after it on the
// same connection is answered meanwhile.
func TestMuxInlineMissDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var waiting atomic.Int64
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		inlineHits(l)
		l.before = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/slow" {
				waiting.Add(1)
				<-release
			}
		}
	}
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	conn, br := rawMux(t, h, b, a.ip, testSecret)
	var hdr [frameHeaderLen]byte
	if fh, _, err := readFrame(br, &hdr, nil, 64); err != nil || fh.typ != frameHelloOK {
		t.Fatalf("hello: %+v %v", fh, err)
	}
	if _, err := conn.Write(requestFrames(b, 1, "/slow", "/hit/2")); err != nil {
		t.Fatal(err)
	}
	// The hit's answer comes first, while /slow is still waiting (a
	// reader serving /slow itself would never read the hit: the read
	// times out at the connection's deadline).
	if id, body := readAnswer(t, br); id != 2 || body != "inline /hit/2" {
		t.Fatalf("first answer: %d %q, want the hit's", id, body)
	}
	waitUntil(t, "/slow in its worker", func() bool { return waiting.Load() == 1 })
	unblock()
	if id, body := readAnswer(t, br); id != 1 || body != "served by b /slow" {
		t.Fatalf("second answer: %d %q", id, body)
	}
}

// TestMuxInlineInflightLimit: hits served inline do not lift the owner's
// in-flight limit: with muxMaxInflight requests waiting in workers the
// reader reads no further (a hit behind them waits too), and ServePeer
// never holds more; once they are released every request is answered.
func TestMuxInlineInflightLimit(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var inflight, most atomic.Int64
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		inlineHits(l)
		l.before = func(*fasthttp.RequestCtx) {
			n := inflight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			inflight.Add(-1)
		}
	}
	h := newHarness(t, s, "a", "b")
	a, b := h.node("a"), h.node("b")
	conn, br := rawMux(t, h, b, a.ip, testSecret)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var hdr [frameHeaderLen]byte
	if fh, _, err := readFrame(br, &hdr, nil, 64); err != nil || fh.typ != frameHelloOK {
		t.Fatalf("hello: %+v %v", fh, err)
	}
	uris := []string{"/hit/first"}
	for i := range muxMaxInflight + 10 {
		uris = append(uris, fmt.Sprintf("/slow/%d", i))
	}
	uris = append(uris, "/hit/last")
	go func() { _, _ = conn.Write(requestFrames(b, 1, uris...)) }()
	if id, _ := readAnswer(t, br); id != 1 {
		t.Fatalf("first answer %d, want the first hit's", id)
	}
	waitUntil(t, "the owner's workers full", func() bool { return inflight.Load() == muxMaxInflight })
	time.Sleep(50 * time.Millisecond) // room for a reader that would read on (none may)
	if got := most.Load(); got != muxMaxInflight {
		t.Fatalf("%d requests in ServePeer at once, want %d", got, muxMaxInflight)
	}
	if got := b.local.inline.Load(); got != 1 {
		t.Fatalf("%d hits served inline while the workers were full, want 1 (the reader reads no further)", got)
	}
	unblock()
	seen := map[uint32]bool{1: true}
	for len(seen) < len(uris) {
		id, _ := readAnswer(t, br)
		seen[id] = true
	}
	if got := b.local.inline.Load(); got != 2 {
		t.Errorf("%d hits served inline, want 2", got)
	}
}
