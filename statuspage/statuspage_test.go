package statuspage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestHTMLEscapes: keys and purge targets come from clients; the page
// must show them as text, never as markup.
func TestHTMLEscapes(t *testing.T) {
	s := &Status{
		Node: "n1", Time: time.Unix(1e9, 0),
		Keys:   Keys{Window: "30s", Sample: 16, Top: []Key{{Key: `h/<script>alert(1)</script>`, Requests: 5}}},
		Events: []Event{{Time: time.Unix(1e9-5, 0), Kind: "purge", Detail: `url "><img src=x>`}},
		Routes: []Route{{Name: "r", Origin: "o", Requests: 3, HitRatio: -1}},
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, s); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script>", "<img"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains raw %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;", `content="5"`, "5s ago", "single node", "no tenants configured", "<td class=\"hit-ratio\">–</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	b.Reset()
	if err := WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Keys.Top[0].Key != s.Keys.Top[0].Key {
		t.Fatalf("JSON round trip: %v %+v", err, back.Keys)
	}
}
