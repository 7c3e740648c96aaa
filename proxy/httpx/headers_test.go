package httpx

import "testing"

// TestFieldClasses: the field classes the request path filters with —
// hop-by-hop (the fixed list and names the Connection field lists, any
// case, OWS around them), client-sent forwarding fields, the fields an
// edge vouches for, never-stored and 304 fields — hold exactly their
// members.
func TestFieldClasses(t *testing.T) {
	for _, tc := range []struct {
		name, connection string
		want             bool
	}{
		{"Connection", "", true},
		{"keep-alive", "", true},
		{"TRANSFER-ENCODING", "", true},
		{"Proxy-Authorization", "", true},
		{"X-Private", "", false},
		{"X-Private", "close, x-private", true},
		{"X-Private", "close,  X-PRIVATE  ,te", true},
		{"X-Private", "x-privateer", false},
		{"Content-Type", "close", false},
	} {
		if got := IsHopByHop([]byte(tc.name), []byte(tc.connection)); got != tc.want {
			t.Errorf("IsHopByHop(%q, Connection: %q) = %v", tc.name, tc.connection, got)
		}
	}
	for name, want := range map[string]bool{"Forwarded": true, "forwarded": true, "X-Forwarded-For": true, "x-forwarded-prefix": true,
		"X-Forwarded-": false, "X-Forward": false, "Forwarded-For": false} {
		if got := IsForwardedHeader([]byte(name)); got != want {
			t.Errorf("IsForwardedHeader(%q) = %v", name, got)
		}
	}
	for name, want := range map[string]bool{"X-Forwarded-For": true, "x-forwarded-proto": true, "X-Forwarded-Host": true, "X-Forwarded-Port": true,
		"X-Forwarded-Prefix": false, "Forwarded": false} {
		if got := IsEdgeForwarded([]byte(name)); got != want {
			t.Errorf("IsEdgeForwarded(%q) = %v", name, got)
		}
	}
	for name, want := range map[string]bool{"Age": true, "content-length": true, "Cache-Status": true, "VIA": true, "Date": false, "ETag": false} {
		if got := NotStored([]byte(name)); got != want {
			t.Errorf("NotStored(%q) = %v", name, got)
		}
	}
	for name, want := range map[string]bool{"Cache-Control": true, "date": true, "ETag": true, "Expires": true, "Vary": true,
		"Last-Modified": true, "Content-Location": true, "Content-Type": false, "Content-Length": false, "Set-Cookie": false} {
		if got := NotModifiedHeader([]byte(name)); got != want {
			t.Errorf("NotModifiedHeader(%q) = %v", name, got)
		}
	}
	for _, tc := range []struct {
		list, tok string
		want      bool
	}{{"gzip, br", "br", true}, {" GZIP ", "gzip", true}, {"", "x", false}, {"a,,b", "", true}, {"brotli", "br", false}} {
		if got := ListContains([]byte(tc.list), []byte(tc.tok)); got != tc.want {
			t.Errorf("ListContains(%q, %q) = %v", tc.list, tc.tok, got)
		}
	}
}
