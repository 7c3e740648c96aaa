package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestFetchPage: ?page=fetch answers the HTML page with src as a script
// string (quotes and tags escaped); a src that is not a path here is 400.
func TestFetchPage(t *testing.T) {
	_, srv := testOrigin(t)
	r := get(t, srv, `/p.html?page=fetch&src=/data.json%3Fsize%3D10%26x%3D%3C%2Fscript%3E`)
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, Content-Type %q", r.status, r.header.Get("Content-Type"))
	}
	body := string(r.body)
	if !strings.Contains(body, `fetch("/data.json?size=10\u0026x=\u003c/script\u003e")`) {
		t.Errorf("page does not fetch the escaped src:\n%s", body)
	}
	for _, src := range []string{"", "http://elsewhere/x", "//elsewhere/x"} {
		if r := get(t, srv, "/p.html?page=fetch&src="+src); r.status != http.StatusBadRequest {
			t.Errorf("src %q: status %d, want 400", src, r.status)
		}
	}
}
