package routing

import (
	"strings"
	"testing"
)

// refHostRoutes is the host lookup as Resolve did it before hostRoutes:
// the port cut at the last ':' found scanning back before any ']', one
// trailing dot dropped, the rest copied and lower-cased, then looked up.
func refHostRoutes(t *Table, host []byte) []*Route {
	h := host
	for i := len(h) - 1; i >= 0; i-- {
		if h[i] == ']' {
			break
		}
		if h[i] == ':' {
			h = h[:i]
			break
		}
	}
	if n := len(h); n > 0 && h[n-1] == '.' {
		h = h[:n-1]
	}
	if len(h) > maxHostLen {
		return t.any
	}
	lc := []byte(string(h))
	for i, c := range lc {
		if 'A' <= c && c <= 'Z' {
			lc[i] = c + 'a' - 'A'
		}
	}
	if list, ok := t.byHost[string(lc)]; ok {
		return list
	}
	return t.any
}

func sameRoutes(a, b []*Route) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func hostTable(tb testing.TB) *Table {
	tb.Helper()
	tab, err := NewTable([]RouteSpec{
		{Name: "api", Hosts: []string{"API.example.com", "[::1]", "127.0.0.1"}, PathPrefix: "/api/"},
		{Name: "www", Hosts: []string{"www.example.com", "example.com"}, PathPrefix: "/"},
		{Name: "long", Hosts: []string{strings.Repeat("a", maxHostLen)}, PathPrefix: "/"},
		{Name: "any", Hosts: []string{"*"}, PathPrefix: "/"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return tab
}

var hostSeeds = []string{
	"", ".", "example.com", "Example.COM", "example.com.", "example.com:8080", "EXAMPLE.com.:80",
	"api.example.com", "[::1]", "[::1]:443", "[::1].", "127.0.0.1:1", "a:b:c", "example.com:", "example.com]:1",
	"[::1]:a:b", strings.Repeat("a", maxHostLen), strings.Repeat("A", maxHostLen) + ".:1", strings.Repeat("a", maxHostLen+1),
}

// TestHostRoutes: hostRoutes, which lower-cases only hosts holding
// upper case, picks the candidates the previous lookup picked.
func TestHostRoutes(t *testing.T) {
	tab := hostTable(t)
	for _, h := range hostSeeds {
		if got, want := tab.hostRoutes([]byte(h)), refHostRoutes(tab, []byte(h)); !sameRoutes(got, want) {
			t.Errorf("hostRoutes(%q) = %v, want %v", h, got, want)
		}
	}
	if got := tab.hostRoutes([]byte("Example.COM:8080")); len(got) == 0 || got[0].Name != "www" {
		t.Errorf("Example.COM:8080 routes to %v, want www first", got)
	}
}

// FuzzHostRoutes is TestHostRoutes on any host.
func FuzzHostRoutes(f *testing.F) {
	for _, h := range hostSeeds {
		f.Add(h)
	}
	tab := hostTable(f)
	f.Fuzz(func(t *testing.T, h string) {
		if got, want := tab.hostRoutes([]byte(h)), refHostRoutes(tab, []byte(h)); !sameRoutes(got, want) {
			t.Fatalf("hostRoutes(%q) = %v, want %v", h, got, want)
		}
	})
}
