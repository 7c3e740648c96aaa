package routing

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// spellingTable's routes; with scope, a route whose prefix holds %2F.
func spellingTable(t testing.TB, scope bool) *Table {
	t.Helper()
	specs := []RouteSpec{
		{Name: "admin", Hosts: []string{"*"}, PathPrefix: "/admin/"},
		{Name: "v1", Hosts: []string{"*"}, PathPrefix: "/api/v1/"},
		{Name: "user", Hosts: []string{"*"}, PathPrefix: "/%7Euser/"},
		{Name: "at", Hosts: []string{"*"}, PathPrefix: "/@x/"},
		{Name: "api", Hosts: []string{"*"}, PathPrefix: "/api"},
		{Name: "rest", Hosts: []string{"*"}, PathPrefix: "/"},
	}
	if scope {
		specs = append([]RouteSpec{{Name: "scope", Hosts: []string{"*"}, PathPrefix: "/@scope%2f"}}, specs...)
	}
	tab, err := NewTable(specs)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestMatchSpellings: a prefix means the same whatever the request's
// spelling; an encoded slash is a segment character, and a path whose
// route depends on reading it as '/' is refused.
func TestMatchSpellings(t *testing.T) {
	tab := spellingTable(t, true)
	for _, tt := range []struct {
		path, want string // want "!" = ErrAmbiguousPath
	}{
		{"/admin/x", "admin"},
		{"/%61dmin/x", "admin"},
		{"/%61%64%6D%69%6e%2Fx", "!"}, // decodes to /admin%2Fx; read with '/' it is /admin/x
		{"/admin%2Fx", "!"},
		{"/admin%2fx", "!"},
		{"/api%2Fv1/x", "!"},    // opaque: route api; slashed: v1
		{"/api%2Fv2/x", "api"},  // both readings: api
		{"/api/v1%2Fx", "!"},    // opaque: api; slashed: v1
		{"/api/v1/x%2Fy", "v1"}, // past the prefix
		{"/api/v1/a%2Fb", "v1"}, // GitLab-style project path
		{"/@scope%2Fname", "scope"},
		{"/@scope%2fname", "scope"},
		{"/%40scope%2Fname", "scope"}, // %40 is '@' to every origin
		{"/@scope/name", "rest"},      // a real slash is not the route's %2F
		{"/%40x/y", "at"},
		{"/~user/x", "user"},
		{"/%7euser/x", "user"},
		{"/%252Fadmin/x", "rest"}, // %25 stays: "%2Fadmin" is text here
		{"/%zzadmin", "rest"},     // malformed escapes stay as they are
		{"/adm%", "rest"},
		{"/a%2", "rest"},
	} {
		r, err := tab.Resolve([]byte("h"), []byte(tt.path))
		got := "<nil>"
		switch {
		case errors.Is(err, ErrAmbiguousPath):
			got = "!"
		case err != nil:
			t.Fatalf("Resolve(%q): %v", tt.path, err)
		case r != nil:
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("Resolve(%q) = %s, want %s", tt.path, got, tt.want)
		}
		if m := tab.Match([]byte("h"), []byte(tt.path)); m != r {
			t.Errorf("Match(%q) = %v, want Resolve's %v", tt.path, m, r)
		}
	}
}

// TestMatchFormLimit: prefixes longer than the stack buffer still match
// (the form is then built on the heap).
func TestMatchFormLimit(t *testing.T) {
	long := "/" + strings.Repeat("a", 2*formBuf) + "/"
	tab, err := NewTable([]RouteSpec{
		{Name: "long", Hosts: []string{"*"}, PathPrefix: long},
		{Name: "rest", Hosts: []string{"*"}, PathPrefix: "/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	enc := "/%61" + strings.Repeat("a", 2*formBuf-1) + "/x"
	if r := tab.Match(nil, []byte(enc)); r == nil || r.Name != "long" {
		t.Fatalf("Match(long encoded) = %v, want long", r)
	}
}

// FuzzMatchSpelling: whatever the spelling, a path is routed as an origin
// that percent-decodes it (encoded slashes included) would read it, or
// refused. The matching form is a fixed point. (Routes whose prefix holds
// %2F are left out: "/@scope/name" cannot be refused, and a decoding
// origin reads it as the route's "/@scope%2F".)
func FuzzMatchSpelling(f *testing.F) {
	for _, s := range []string{"/admin/x", "/%61dmin/x", "/admin%2Fx", "/api%2Fv1/x", "/api%2fv2", "/@scope%2Fn",
		"/%2540", "/%7Euser/", "/a%2", "/%", "/%%2F", "/api/v1%2F..%2F"} {
		f.Add(s)
	}
	tab := spellingTable(f, false)
	// The routes as a decoding origin reads them: prefixes decoded fully.
	type plain struct{ name, prefix string }
	var decoded []plain
	for _, r := range tab.any {
		p, err := url.PathUnescape(r.PathPrefix)
		if err != nil {
			f.Fatal(err)
		}
		decoded = append(decoded, plain{r.Name, p})
	}
	f.Fuzz(func(t *testing.T, path string) {
		m := AppendMatchForm(nil, []byte(path), -1)
		if again := AppendMatchForm(nil, m, -1); string(again) != string(m) {
			t.Fatalf("form(%q) = %q, form of that = %q", path, m, again)
		}
		r, err := tab.Resolve([]byte("h"), []byte(path))
		if err != nil {
			return // refused: no reading routes it
		}
		dec, uerr := url.PathUnescape(path)
		if uerr != nil || strings.Contains(path, "%25") {
			return // an origin refuses it, or decodes it in more than one way
		}
		want := ""
		for _, d := range decoded {
			if strings.HasPrefix(dec, d.prefix) {
				want = d.name
				break
			}
		}
		got := ""
		if r != nil {
			got = r.Name
		}
		if got != want {
			t.Fatalf("Resolve(%q) = %q; decoded %q belongs to %q", path, got, dec, want)
		}
	})
}

// BenchmarkResolveEncoded: a path with percent-encoding and an encoded
// slash takes the matching-form path (two forms built on the stack).
func BenchmarkResolveEncoded(b *testing.B) {
	tab := spellingTable(b, true)
	host, path := []byte("h"), []byte("/api/v1/projects/group%2Fproject/%7Efiles")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tab.Resolve(host, path); err != nil {
			b.Fatal(err)
		}
	}
}
