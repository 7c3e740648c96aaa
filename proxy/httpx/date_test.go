package httpx

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

const testDate = "Tue, 15 Nov 1994 08:12:31 GMT"

// TestSetDate: the header holds the given Date, with no reason phrase
// carried over to another status and a zero Content-Length until a body
// is set; values that do not fit a header line are refused and leave no
// Date.
func TestSetDate(t *testing.T) {
	var resp fasthttp.Response
	if !SetDate(&resp.Header, []byte(testDate)) {
		t.Fatal("SetDate refused a valid date")
	}
	resp.Header.SetStatusCode(fasthttp.StatusNotModified)
	resp.Header.Set("ETag", `"v1"`)
	if got := string(resp.Header.PeekCanonical(HDate)); got != testDate {
		t.Errorf("Date %q, want %q", got, testDate)
	}
	if m := resp.Header.StatusMessage(); len(m) != 0 {
		t.Errorf("reason phrase %q carried over to the 304", m)
	}
	resp.Reset()
	resp.SetBodyString("body")
	if !SetDate(&resp.Header, []byte(testDate)) || resp.Header.ContentLength() != 0 {
		t.Errorf("Content-Length after SetDate = %d, want 0 (the body sets it when written)", resp.Header.ContentLength())
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "Tue\r\nX-Smuggled: 1", "a\nb"} {
		var h fasthttp.ResponseHeader
		if SetDate(&h, []byte(bad)) || len(h.PeekCanonical(HDate)) != 0 {
			t.Errorf("SetDate(%q) accepted, Date %q", bad, h.PeekCanonical(HDate))
		}
	}
}

// TestEnsureDate: an answer without Date is rebuilt so that fasthttp
// writes its sending time, keeping its status, Content-Type, fields and
// body; one with Date keeps it.
func TestEnsureDate(t *testing.T) {
	var resp fasthttp.Response
	resp.SetStatusCode(fasthttp.StatusBadGateway)
	resp.Header.SetContentType("text/plain")
	resp.Header.Set("X-Kept", "yes")
	resp.SetBodyString("peer failed")
	EnsureDate(&resp)
	s := resp.String()
	if !strings.HasPrefix(s, "HTTP/1.1 502 ") || !strings.Contains(s, "\r\nDate: ") || !strings.Contains(s, "\r\nX-Kept: yes\r\n") ||
		!strings.Contains(s, "Content-Type: text/plain") || !strings.HasSuffix(s, "peer failed") {
		t.Errorf("without Date: %q", s)
	}
	var dated fasthttp.Response
	SetDate(&dated.Header, []byte(testDate))
	EnsureDate(&dated)
	if got := string(dated.Header.PeekCanonical(HDate)); got != testDate {
		t.Errorf("with Date: %q, want it kept", got)
	}
}
