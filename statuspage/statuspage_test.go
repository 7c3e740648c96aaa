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

// TestCacheTiers: the page shows both tiers — the memory tier always,
// the disk tier's counters and its degraded state when there is one.
func TestCacheTiers(t *testing.T) {
	s := &Status{Node: "n1", Time: time.Unix(1e9, 0), Cache: Cache{Entries: 3, Bytes: 3 << 20, MaxBytes: 64 << 20, Lookups: 10, Misses: 4, Writes: 5}}
	var b bytes.Buffer
	if err := WriteHTML(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<tr class="tier"><td class="l">memory</td><td>3</td><td>3.0 MiB</td><td>64.0 MiB</td><td>6</td><td>4</td><td>5</td>`,
		"none (cache.disk not configured)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("memory only: page lacks %q", want)
		}
	}
	s.Cache.Disk = &DiskTier{Entries: 7, Bytes: 7 << 20, MaxBytes: 2 << 30, Hits: 11, Misses: 2, Writes: 8, Evictions: 1, Errors: 3, Corrupt: 1, Degraded: true, DegradedTotal: 2}
	b.Reset()
	if err := WriteHTML(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"7 entries, 7.0 MiB of 2048.0 MiB on disk",
		`<tr class="tier"><td class="l">disk</td><td>7</td><td>7.0 MiB</td><td>2048.0 MiB</td><td>11</td><td>2</td><td>8</td><td>1</td><td class="warn">3</td><td>1</td>`,
		"degraded: writes to memory only (2× degraded since start)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("with a disk tier: page lacks %q", want)
		}
	}
	if strings.Contains(b.String(), "not configured") {
		t.Error("with a disk tier: page says none is configured")
	}
	b.Reset()
	if err := WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Cache.Disk == nil || *back.Cache.Disk != *s.Cache.Disk {
		t.Fatalf("JSON round trip: %v %+v", err, back.Cache.Disk)
	}
}
