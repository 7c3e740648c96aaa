package cluster

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// forwardEntry is forwardTo through DoEntry, asking for an entry answer
// when want.
func (n *testNode) forwardEntry(t *testing.T, owner, uri string, ent *EntryAnswer) (*fasthttp.Response, bool) {
	t.Helper()
	fw, ok := n.node.Begin(owner, time.Now().UnixNano())
	if !ok {
		return nil, false
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(uri)
	req.Header.SetHost("example.test")
	n.node.SetForwardHead(HTTPHead(&req.Header), n.m.View().Current.Generation(), []byte("acme"), []byte("192.0.2.1"))
	return n.node.DoEntry(nil, fw, req, 0, ent)
}

// TestMuxEntryAnswer: an owner answers with an entry only a request
// whose edge asked for one (the edge of an earlier release never sets
// the flag), and only when its handler calls AnswerEntry; an owner that
// does not (an earlier release ignores the flag, a miss) answers with
// its response as before. An entry above EntryAnswerMax is not sent.
func TestMuxEntryAnswer(t *testing.T) {
	stored := []byte("the entry's stored bytes")
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		l.answer = func(ctx *fasthttp.RequestCtx) bool {
			switch string(ctx.Path()) {
			case "/entry":
				return AnswerEntry(ctx, stored, time.Unix(0, 42))
			case "/large":
				return AnswerEntry(ctx, make([]byte, EntryAnswerMax+1), time.Now())
			}
			return false
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	a.waitMux(t, "b")

	ent := &EntryAnswer{Want: true, Buf: make([]byte, 0, 8)}
	resp, ok := a.forwardEntry(t, "b", "/entry", ent)
	if !ok || !ent.Got || string(ent.Buf) != string(stored) || ent.OwnerNow != 42 {
		t.Fatalf("entry answer: ok %v, got %v, %q at %d", ok, ent.Got, ent.Buf, ent.OwnerNow)
	}
	fasthttp.ReleaseResponse(resp)
	if a.node.EntryAnswers() != 1 {
		t.Fatalf("entry answers = %d, want 1", a.node.EntryAnswers())
	}
	for _, c := range []struct {
		uri  string
		want bool
	}{{"/entry", false}, {"/other", true}, {"/large", true}} {
		ent := &EntryAnswer{Want: c.want}
		resp, ok := a.forwardEntry(t, "b", c.uri, ent)
		if !ok || ent.Got || string(resp.Body()) != "served by b "+c.uri {
			t.Fatalf("%s (want %v): ok %v, got %v, body %q", c.uri, c.want, ok, ent.Got, resp.Body())
		}
		fasthttp.ReleaseResponse(resp)
	}
	if a.node.EntryAnswers() != 1 {
		t.Fatalf("entry answers = %d, want 1", a.node.EntryAnswers())
	}
}

// TestEntryVerdictTripsBreaker: the owner's breaker hears of an entry
// answer only from the edge's check (EntryChecked): entries that keep
// failing it trip the breaker as transport errors do (the owner is then
// skipped), entries that check do not.
func TestEntryVerdictTripsBreaker(t *testing.T) {
	s := muxSetup(nil, nil)
	s.local = func(l *fakeLocal) {
		l.answer = func(ctx *fasthttp.RequestCtx) bool {
			return AnswerEntry(ctx, []byte("stored bytes"), time.Now())
		}
	}
	h := newHarness(t, s, "a", "b")
	a := h.node("a")
	a.waitMux(t, "b")
	forward := func(ok bool) {
		t.Helper()
		fw, allowed := a.node.Begin("b", time.Now().UnixNano())
		if !allowed {
			t.Fatal("b skipped before its entries failed three checks")
		}
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		req.SetRequestURI("/entry")
		req.Header.SetHost("example.test")
		a.node.SetForwardHead(HTTPHead(&req.Header), a.m.View().Current.Generation(), []byte("acme"), []byte("192.0.2.1"))
		ent := &EntryAnswer{Want: true}
		resp, got := a.node.DoEntry(nil, fw, req, 0, ent)
		if !got || !ent.Got {
			t.Fatalf("no entry answer: ok %v, got %v", got, ent.Got)
		}
		fasthttp.ReleaseResponse(resp)
		a.node.EntryChecked(fw, ok)
	}
	for range 5 {
		forward(true)
	}
	forward(false)
	forward(false)
	forward(true) // a good one in between: the count starts again
	for range peerSkipTrip {
		forward(false)
	}
	if _, allowed := a.node.Begin("b", time.Now().UnixNano()); allowed {
		t.Fatalf("b still forwarded to after %d entries in a row failed their check", peerSkipTrip)
	}
}
