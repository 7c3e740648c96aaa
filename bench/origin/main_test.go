package main

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/valyala/fasthttp"
)

func do(o *origin, uri string) *fasthttp.RequestCtx {
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.SetRequestURI(uri)
	o.handle(ctx)
	return ctx
}

func TestHandle(t *testing.T) {
	tests := []struct {
		name     string
		uri      string
		fault    bool
		status   int
		size     int // -1: do not check
		cc       string
		counted  bool
		bodyHas  string
		noCCSent bool
	}{
		{name: "default", uri: "/x", status: 200, size: 1024, cc: defaultCC, counted: true},
		{name: "size", uri: "/x?size=102400", status: 200, size: 102400, cc: defaultCC, counted: true},
		{name: "10 MiB", uri: "/x?size=10485760", status: 200, size: 10 << 20, cc: defaultCC, counted: true},
		{name: "largest", uri: "/x?size=16777216", status: 200, size: maxSize, cc: defaultCC, counted: true},
		{name: "empty", uri: "/x?size=0", status: 200, size: 0, cc: defaultCC, counted: true},
		{name: "cc", uri: "/x?cc=public,%20max-age=1,%20stale-if-error=60", status: 200, size: 1024, cc: "public, max-age=1, stale-if-error=60", counted: true},
		{name: "no cc", uri: "/x?cc=", status: 200, size: 1024, counted: true, noCCSent: true},
		{name: "status", uri: "/x?status=404", status: 404, size: 1024, cc: defaultCC, counted: true},
		{name: "too big", uri: "/x?size=16777217", status: 400, size: -1, counted: true},
		{name: "fault", uri: "/x", fault: true, status: 503, size: -1, cc: "no-store", counted: true},
		{name: "stats", uri: "/__origin/stats", status: 200, size: -1, bodyHas: `"total":0`},
		{name: "unknown control", uri: "/__origin/nope", status: 404, size: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &origin{}
			o.fault.Store(tt.fault)
			ctx := do(o, tt.uri)
			if got := ctx.Response.StatusCode(); got != tt.status {
				t.Errorf("status = %d, want %d", got, tt.status)
			}
			b := ctx.Response.Body()
			if tt.size >= 0 && (len(b) != tt.size || !bytes.Equal(b, body[:tt.size])) {
				t.Errorf("body is %d bytes, want the first %d of the pattern", len(b), tt.size)
			}
			cc := string(ctx.Response.Header.Peek("Cache-Control"))
			if tt.cc != "" && cc != tt.cc {
				t.Errorf("Cache-Control = %q, want %q", cc, tt.cc)
			}
			if tt.noCCSent && cc != "" {
				t.Errorf("Cache-Control = %q, want none", cc)
			}
			if want := map[bool]int64{true: 1, false: 0}[tt.counted]; o.total.Load() != want {
				t.Errorf("total = %d, want %d", o.total.Load(), want)
			}
			if tt.bodyHas != "" && !bytes.Contains(b, []byte(tt.bodyHas)) {
				t.Errorf("body %q lacks %q", b, tt.bodyHas)
			}
		})
	}
}

func TestControl(t *testing.T) {
	o := &origin{}
	do(o, "/a")
	do(o, "/b")
	steps := []struct {
		uri       string
		wantTotal int64
		wantFault bool
	}{
		{"/__origin/fault?mode=error", 2, true},
		{"/c", 3, true},
		{"/__origin/fault?mode=bogus", 3, true},
		{"/__origin/fault?mode=ok", 3, false},
		{"/__origin/reset", 0, false},
		{"/d", 1, false},
	}
	for _, s := range steps {
		t.Run(s.uri, func(t *testing.T) {
			do(o, s.uri)
			if o.total.Load() != s.wantTotal || o.fault.Load() != s.wantFault {
				t.Errorf("after %s: total %d fault %v, want %d %v", s.uri, o.total.Load(), o.fault.Load(), s.wantTotal, s.wantFault)
			}
		})
	}
}

// TestTypeText: type= sets the Content-Type and serves the JSON-like
// text, which must compress like real JSON: well, but not a hundredfold.
func TestTypeText(t *testing.T) {
	ctx := do(&origin{}, "/x?size=8192&type=application/json")
	if ct := string(ctx.Response.Header.ContentType()); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	b := ctx.Response.Body()
	if !bytes.Equal(b, text[:8192]) || !bytes.HasPrefix(b, []byte(`{"id":0,`)) {
		t.Fatalf("body is not the first 8192 bytes of the text: %.40q", b)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if r := float64(len(b)) / float64(z.Len()); r < 2 || r > 20 {
		t.Errorf("gzip ratio %.1f, want 2..20 (JSON-like)", r)
	}
	if ct := string(do(&origin{}, "/x").Response.Header.ContentType()); ct != "application/octet-stream" {
		t.Errorf("default Content-Type = %q", ct)
	}
}
