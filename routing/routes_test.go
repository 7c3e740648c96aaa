package routing

import "testing"

func TestTableMatch(t *testing.T) {
	tab, err := NewTable([]RouteSpec{
		{Name: "api-v2", Hosts: []string{"API.example.com"}, PathPrefix: "/v2/"},
		{Name: "static", Hosts: []string{"*"}, PathPrefix: "/static/"},
		{Name: "api", Hosts: []string{"api.example.com", "api2.example.com"}, PathPrefix: "/"},
		{Name: "fallback", Hosts: []string{"*"}, PathPrefix: "/public/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host, path, want string
	}{
		{"api.example.com", "/v2/users", "api-v2"},
		{"API.EXAMPLE.COM:8080", "/v2/users", "api-v2"},
		{"api.example.com.", "/v1/users", "api"},
		{"api.example.com", "/static/a.css", "static"},
		{"api2.example.com", "/v2/users", "api"},
		{"other.example.com", "/static/x", "static"},
		{"other.example.com", "/public/x", "fallback"},
		{"other.example.com", "/private/x", ""},
		{"[::1]:8080", "/public/x", "fallback"},
		{"", "/public/x", "fallback"},
		{"api.example.com", "", ""},
	}
	for _, tt := range tests {
		r := tab.Match([]byte(tt.host), []byte(tt.path))
		got := ""
		if r != nil {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("Match(%q, %q) = %q, want %q", tt.host, tt.path, got, tt.want)
		}
	}
}

func TestTableNoWildcardIsNotOpen(t *testing.T) {
	tab, err := NewTable([]RouteSpec{{Name: "api", Hosts: []string{"api.example"}, PathPrefix: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := tab.Match([]byte("evil.example"), []byte("/")); r != nil {
		t.Fatalf("unknown host matched route %q", r.Name)
	}
}

func TestNewTableErrors(t *testing.T) {
	for _, specs := range [][]RouteSpec{
		{{Name: "a", Hosts: []string{"*"}, PathPrefix: "x"}},
		{{Name: "a", PathPrefix: "/"}},
		{{Name: "a", Hosts: []string{""}, PathPrefix: "/"}},
	} {
		if _, err := NewTable(specs); err == nil {
			t.Errorf("NewTable(%+v) = nil error", specs)
		}
	}
}

func BenchmarkTableMatch(b *testing.B) {
	tab, _ := NewTable([]RouteSpec{
		{Name: "api", Hosts: []string{"api.example.com"}, PathPrefix: "/v2/"},
		{Name: "any", Hosts: []string{"*"}, PathPrefix: "/"},
	})
	host, path := []byte("API.example.com:443"), []byte("/v2/users/42")
	b.ReportAllocs()
	for b.Loop() {
		if tab.Match(host, path) == nil {
			b.Fatal("no match")
		}
	}
}
