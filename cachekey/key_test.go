package cachekey

import (
	"bytes"
	"testing"
)

// base returns typical Parts for a route with one key header.
func base() Parts {
	return Parts{
		Namespace: 3,
		Route:     "api",
		Scheme:    []byte("https"),
		Host:      []byte("api.example.com"),
		Path:      []byte("/v1/items/42"),
		Query:     []byte("lang=en&page=2"),
		Tenant:    []byte("acme"),
		Headers:   [][]byte{[]byte("mobile")},
	}
}

func mk(edit func(*Parts)) Parts {
	p := base()
	if edit != nil {
		edit(&p)
	}
	return p
}

// TestAppendEquivalence checks every normalisation from both sides: inputs
// that must share a key do, and inputs that must not, don't.
func TestAppendEquivalence(t *testing.T) {
	r, err := NewRules([]string{"utm_source"}, []string{"X-Device"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		a, b Parts
		same bool
	}{
		{"identical", mk(nil), mk(nil), true},
		{"scheme case", mk(nil), mk(func(p *Parts) { p.Scheme = []byte("HTTPS") }), true},
		{"scheme differs", mk(nil), mk(func(p *Parts) { p.Scheme = []byte("http") }), false},
		{"host case", mk(nil), mk(func(p *Parts) { p.Host = []byte("API.Example.com") }), true},
		{"https default port", mk(nil), mk(func(p *Parts) { p.Host = []byte("api.example.com:443") }), true},
		{"http port on https", mk(nil), mk(func(p *Parts) { p.Host = []byte("api.example.com:80") }), false},
		{"http default port", mk(func(p *Parts) { p.Scheme = []byte("http") }),
			mk(func(p *Parts) { p.Scheme = []byte("http"); p.Host = []byte("api.example.com:80") }), true},
		{"https port on http", mk(func(p *Parts) { p.Scheme = []byte("http") }),
			mk(func(p *Parts) { p.Scheme = []byte("http"); p.Host = []byte("api.example.com:443") }), false},
		{"trailing dot", mk(nil), mk(func(p *Parts) { p.Host = []byte("api.example.com.") }), true},
		{"other host", mk(nil), mk(func(p *Parts) { p.Host = []byte("api2.example.com") }), false},
		{"path case", mk(nil), mk(func(p *Parts) { p.Path = []byte("/V1/items/42") }), false},
		{"path percent-encoding kept", mk(nil), mk(func(p *Parts) { p.Path = []byte("/v1/items/%34%32") }), false},
		{"path dot segments kept", mk(nil), mk(func(p *Parts) { p.Path = []byte("/v1/x/../items/42") }), false},
		{"empty path vs slash", mk(func(p *Parts) { p.Path = nil }), mk(func(p *Parts) { p.Path = []byte("/") }), false},
		{"query order", mk(nil), mk(func(p *Parts) { p.Query = []byte("page=2&lang=en") }), true},
		{"query ignored param", mk(nil), mk(func(p *Parts) { p.Query = []byte("utm_source=x&page=2&lang=en") }), true},
		{"query empty params", mk(nil), mk(func(p *Parts) { p.Query = []byte("&lang=en&&page=2&") }), true},
		{"query value differs", mk(nil), mk(func(p *Parts) { p.Query = []byte("lang=en&page=3") }), false},
		{"query duplicates order", mk(func(p *Parts) { p.Query = []byte("a=1&a=2") }),
			mk(func(p *Parts) { p.Query = []byte("a=2&a=1") }), false},
		{"query semicolon", mk(func(p *Parts) { p.Query = []byte("a=1;b=2") }),
			mk(func(p *Parts) { p.Query = []byte("a=1&b=2") }), false},
		{"no query vs ?", mk(func(p *Parts) { p.Query = nil }), mk(func(p *Parts) { p.Query = []byte{} }), true},
		{"no query vs only ignored", mk(func(p *Parts) { p.Query = nil }),
			mk(func(p *Parts) { p.Query = []byte("utm_source=1") }), true},
		{"query vs path boundary", mk(func(p *Parts) { p.Path = []byte("/a?b"); p.Query = nil }),
			mk(func(p *Parts) { p.Path = []byte("/a"); p.Query = []byte("b") }), false},
		{"tenant absent vs present", mk(func(p *Parts) { p.Tenant = nil }), mk(nil), false},
		{"tenant differs", mk(nil), mk(func(p *Parts) { p.Tenant = []byte("globex") }), false},
		{"tenant vs route boundary", mk(func(p *Parts) { p.Route = "ab"; p.Tenant = nil }),
			mk(func(p *Parts) { p.Route = "a"; p.Tenant = []byte("b") }), false},
		{"namespace", mk(nil), mk(func(p *Parts) { p.Namespace = 4 }), false},
		{"route", mk(nil), mk(func(p *Parts) { p.Route = "api2" }), false},
		{"header absent: nil vs empty", mk(func(p *Parts) { p.Headers = [][]byte{nil} }),
			mk(func(p *Parts) { p.Headers = [][]byte{{}} }), true},
		{"header absent: missing entry", mk(func(p *Parts) { p.Headers = nil }),
			mk(func(p *Parts) { p.Headers = [][]byte{nil} }), true},
		{"header absent vs present", mk(func(p *Parts) { p.Headers = nil }), mk(nil), false},
		{"header value differs", mk(nil), mk(func(p *Parts) { p.Headers = [][]byte{[]byte("desktop")} }), false},
		{"header value OWS", mk(nil), mk(func(p *Parts) { p.Headers = [][]byte{[]byte("  mobile ")} }), true},
		{"header value case kept", mk(nil), mk(func(p *Parts) { p.Headers = [][]byte{[]byte("Mobile")} }), false},
		{"header extra entries ignored", mk(nil),
			mk(func(p *Parts) { p.Headers = append(p.Headers, []byte("x")) }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := Append(nil, r, &tt.a), Append(nil, r, &tt.b)
			if got := bytes.Equal(ka, kb); got != tt.same {
				t.Errorf("keys equal = %v, want %v\n a: %x\n b: %x", got, tt.same, ka, kb)
			}
			if got := Digest(ka) == Digest(kb); got != tt.same {
				t.Errorf("digests equal = %v, want %v", got, tt.same)
			}
			for _, k := range []struct {
				p   *Parts
				key []byte
			}{{&tt.a, ka}, {&tt.b, kb}} {
				if ref := refKey([]string{"utm_source"}, []string{"X-Device"}, k.p, nil); !bytes.Equal(k.key, ref) {
					t.Errorf("Append = %x, reference %x", k.key, ref)
				}
			}
		})
	}
}

// TestAppendKeyHeaderNames checks that a key header's name is in the key, so a
// renamed header in the config cannot reuse old entries.
func TestAppendKeyHeaderNames(t *testing.T) {
	ra, err := NewRules(nil, []string{"X-A"})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := NewRules(nil, []string{"X-B"})
	if err != nil {
		t.Fatal(err)
	}
	p := base()
	if ka, kb := Append(nil, ra, &p), Append(nil, rb, &p); bytes.Equal(ka, kb) {
		t.Errorf("same key %x for key headers X-A and X-B", ka)
	}
}

// TestAppendPrefix checks Append appends and leaves dst's prefix alone.
func TestAppendPrefix(t *testing.T) {
	p := base()
	fresh := Append(nil, nil, &p)
	got := Append([]byte("prefix"), nil, &p)
	if want := append([]byte("prefix"), fresh...); !bytes.Equal(got, want) {
		t.Errorf("Append(prefix) = %x, want %x", got, want)
	}
	if fresh[0] != Version {
		t.Errorf("key starts with %#x, want Version %#x", fresh[0], Version)
	}
}

func TestAppendVary(t *testing.T) {
	primary := Append(nil, nil, &Parts{Route: "r", Scheme: []byte("http"), Host: []byte("a"), Path: []byte("/")})
	variant := func(dims ...refVary) []byte {
		k := bytes.Clone(primary)
		for _, d := range dims {
			var v []byte
			if d.value != nil {
				v = []byte(*d.value)
			}
			k = AppendVary(k, []byte(d.name), v)
		}
		return k
	}
	s := func(v string) *string { return &v }
	tests := []struct {
		name string
		a, b []refVary
		same bool
	}{
		{"absent vs empty", []refVary{{"accept-encoding", nil}}, []refVary{{"accept-encoding", s("")}}, false},
		{"absent vs value", []refVary{{"accept-encoding", nil}}, []refVary{{"accept-encoding", s("gzip")}}, false},
		{"empty vs OWS only", []refVary{{"accept-encoding", s("")}}, []refVary{{"accept-encoding", s("  ")}}, true},
		{"OWS normalised", []refVary{{"accept-encoding", s("gzip, br")}},
			[]refVary{{"accept-encoding", s(" gzip ,br\t")}}, true},
		{"spaces collapsed", []refVary{{"x-lang", s("en  us")}},
			[]refVary{{"x-lang", s("en us")}}, true},
		{"value case kept", []refVary{{"x-lang", s("en")}}, []refVary{{"x-lang", s("EN")}}, false},
		{"Accept-Language case-free RFC9111§4.1", []refVary{{"accept-language", s("en-US;q=1")}}, []refVary{{"accept-language", s("EN-us ; Q=1")}}, true},
		{"name case", []refVary{{"Accept-Encoding", s("gzip")}}, []refVary{{"accept-encoding", s("gzip")}}, true},
		{"name differs", []refVary{{"accept-encoding", s("gzip")}}, []refVary{{"accept-language", s("gzip")}}, false},
		{"boundary between dims", []refVary{{"a", s("b")}, {"c", nil}},
			[]refVary{{"a", s("bVc")}}, false},
		{"no dims vs absent dim", nil, []refVary{{"a", nil}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := variant(tt.a...), variant(tt.b...)
			if got := bytes.Equal(ka, kb); got != tt.same {
				t.Errorf("variant keys equal = %v, want %v\n a: %x\n b: %x", got, tt.same, ka, kb)
			}
			if ref := refKey(nil, nil, &Parts{Route: "r", Scheme: []byte("http"), Host: []byte("a"), Path: []byte("/")}, tt.a); !bytes.Equal(ka, ref) {
				t.Errorf("variant = %x, reference %x", ka, ref)
			}
		})
	}
}

// TestAppendLongFields crosses the one-byte uvarint limit (127) in every
// field, including the normalised header value whose length is only known
// after writing it.
func TestAppendLongFields(t *testing.T) {
	r, err := NewRules(nil, []string{"x-long"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{126, 127, 128, 129, 300, 20000} {
		long := bytes.Repeat([]byte("ab "), n/3+1)[:n]
		p := Parts{
			Route: string(long), Scheme: []byte("http"), Host: long, Path: long,
			Query: long, Tenant: long, Headers: [][]byte{long},
		}
		got := AppendVary(Append(nil, r, &p), long, long)
		v := string(long)
		want := refKey(nil, []string{"x-long"}, &p, []refVary{{string(long), &v}})
		if !bytes.Equal(got, want) {
			t.Errorf("n=%d: Append disagrees with reference", n)
		}
	}
}

// TestDigest pins Digest to published XXH64 (seed 0) values.
func TestDigest(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"abc", 0x44bc2cf5ad770999},
	}
	for _, tt := range tests {
		if got := Digest([]byte(tt.in)); got != tt.want {
			t.Errorf("Digest(%q) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

// TestAppendVaryListNormalised: RFC 9111 §4.1 lets a cache normalise
// values with identical semantics; Accept-Encoding and Accept-Language
// ignore case and whitespace.
func TestAppendVaryListNormalised(t *testing.T) {
	same := [][2]string{
		{"Accept-Language", "en-US, fr;q=0.5"},
		{"accept-language", "EN-us,fr ; q=0.5"},
	}
	a := AppendVary(nil, []byte(same[0][0]), []byte(same[0][1]))
	b := AppendVary(nil, []byte(same[1][0]), []byte(same[1][1]))
	if string(a) != string(b) {
		t.Fatalf("Accept-Language spellings key apart: %q vs %q", a, b)
	}
	c := AppendVary(nil, []byte("X-Token"), []byte("AbC"))
	d := AppendVary(nil, []byte("X-Token"), []byte("abc"))
	if string(c) == string(d) {
		t.Fatal("other fields must keep case")
	}
}

// TestHostPlainSameKey: HostPlain only skips reading a plain host again;
// the key is the one Append builds without it.
func TestHostPlainSameKey(t *testing.T) {
	for _, host := range []string{"example.com", "127.0.0.1:19601", "a:8080", ""} {
		if !PlainHost([]byte(host)) {
			t.Fatalf("PlainHost(%q) false", host)
		}
		for _, scheme := range []string{"http", "https"} {
			p := Parts{Route: "r", Scheme: []byte(scheme), Host: []byte(host), Path: []byte("/p"), Query: []byte("b=1&a=2")}
			want := Append(nil, nil, &p)
			p.HostPlain = true
			if got := Append(nil, nil, &p); string(got) != string(want) {
				t.Errorf("%s %q: key %q with HostPlain, %q without", scheme, host, got, want)
			}
		}
	}
}
