package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

func TestGarbage(t *testing.T) {
	o, srv := testOrigin(t)
	o.setMode(modeGarbage)
	if resp, err := srv.Client().Get(srv.URL + "/g"); err == nil {
		resp.Body.Close()
		t.Fatalf("mode garbage: GET /g = %d, want a malformed-response error", resp.StatusCode)
	}
	// On the wire: exactly the garbage, then the connection closes.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /g HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read garbage: %v", err)
	}
	if string(got) != garbageReply {
		t.Errorf("mode garbage sent %q, want %q", got, garbageReply)
	}
}

func TestHuge(t *testing.T) {
	o, srv := testOrigin(t)
	o.setMode(modeHuge)
	resp, err := srv.Client().Get(srv.URL + "/big/one")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ContentLength != hugeLength {
		t.Fatalf("mode huge: %d, Content-Length %d; want 200, %d", resp.StatusCode, resp.ContentLength, int64(hugeLength))
	}
	const read = 1 << 20
	br := bufio.NewReader(io.LimitReader(resp.Body, read))
	head := `{"path":"/big/one","huge":"`
	prefix := make([]byte, len(head))
	if _, err := io.ReadFull(br, prefix); err != nil || string(prefix) != head {
		t.Fatalf("mode huge: body starts %q (%v), want %q", prefix, err, head)
	}
	rest, err := io.ReadAll(br)
	if err != nil || len(rest) != read-len(head) {
		t.Fatalf("mode huge: read %d more bytes (%v), want %d", len(rest), err, read-len(head))
	}
	for i := range rest {
		if want := padAlphabet[i%(32<<10)%len(padAlphabet)]; rest[i] != want {
			t.Fatalf("mode huge: body byte %d after the head = %q, want %q", i, rest[i], want)
		}
	}
	resp.Body.Close() // the client leaves: the handler must end
	eventually(t, "the huge handler to return", func() bool { return o.snapshot().InFlight == 0 })
}

func TestPrefixFaults(t *testing.T) {
	tests := []struct {
		name   string
		global string
		faults map[string]string // prefix → mode, set in any order
		path   string
		want   int
	}{
		{"no faults", modeOK, nil, "/a/x", 200},
		{"prefix hit", modeOK, map[string]string{"/a/": modeError}, "/a/x", 500},
		{"prefix miss", modeOK, map[string]string{"/a/": modeError}, "/b/x", 200},
		{"unavailable", modeOK, map[string]string{"/a/": modeUnavailable}, "/a/x", 503},
		{"prefix over global", modeError, map[string]string{"/a/": modeThrottle}, "/a/x", 429},
		{"global elsewhere", modeError, map[string]string{"/a/": modeThrottle}, "/b/x", 500},
		{"longest prefix wins", modeOK, map[string]string{"/a/": modeError, "/a/b/": modeThrottle}, "/a/b/x", 429},
		{"shorter prefix still applies", modeOK, map[string]string{"/a/": modeError, "/a/b/": modeThrottle}, "/a/c", 500},
		{"ok removes the prefix", modeOK, map[string]string{"/a/": modeOK}, "/a/x", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, srv := testOrigin(t)
			if r := do(t, srv, http.MethodPost, "/__origin/fault?mode="+tt.global, nil); r.status != http.StatusOK {
				t.Fatalf("global mode %s: %d %s", tt.global, r.status, r.body)
			}
			for prefix, mode := range tt.faults {
				if r := do(t, srv, http.MethodPost, "/__origin/fault?mode="+mode+"&prefix="+prefix, nil); r.status != http.StatusOK {
					t.Fatalf("mode %s on %s: %d %s", mode, prefix, r.status, r.body)
				}
			}
			if r := get(t, srv, tt.path); r.status != tt.want {
				t.Errorf("GET %s = %d, want %d", tt.path, r.status, tt.want)
			}
			want := 0
			for _, m := range tt.faults {
				if m != modeOK {
					want++
				}
			}
			if s := statsOf(t, srv); len(s.Faults) != want || s.Mode != tt.global {
				t.Errorf("stats mode %q faults %v; want mode %q and %d prefix faults", s.Mode, s.Faults, tt.global, want)
			}
		})
	}
}

func TestPrefixFaultErrors(t *testing.T) {
	_, srv := testOrigin(t)
	for _, target := range []string{
		"/__origin/fault?mode=error&prefix=nope",
		"/__origin/fault?mode=error&prefix=" + controlPrefix,
		"/__origin/fault?mode=explode&prefix=/a/",
	} {
		if r := do(t, srv, http.MethodPost, target, nil); r.status != http.StatusBadRequest {
			t.Errorf("POST %s = %d, want 400", target, r.status)
		}
	}
	if s := statsOf(t, srv); len(s.Faults) != 0 {
		t.Errorf("rejected prefix faults were kept: %v", s.Faults)
	}
}
