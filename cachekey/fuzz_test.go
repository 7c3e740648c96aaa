package cachekey

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

var (
	fuzzIgnore  = []string{"utm_source", "x"}
	fuzzHeaders = []string{"X-A", "accept-language"}
)

// FuzzAppend checks the properties of Append on arbitrary parts: it never
// panics, agrees with the reference implementation, writes the same bytes
// into a dirty reused buffer as into a fresh one, is idempotent over already
// canonical hosts, queries and header values, keeps paths apart, and ignores
// the order of distinctly named query parameters.
func FuzzAppend(f *testing.F) {
	f.Add(uint32(0), "r", "http", "a", "/", "/x", "", "", "", "", uint64(0))
	f.Add(uint32(1), "api", "https", "API.Example.com.:443", "/v1/items/42", "/v1/items/%34%32",
		"page=2&lang=en&utm_source=x", "acme", " en , fr ", "mobile", uint64(1))
	f.Add(uint32(7), "api", "HTTP", "[::1]:80", "/a/../b", "/b", "a=2&b=1&a=1&&x&x=1", "", "", "", uint64(2))
	f.Add(uint32(0), "", "ftp", "a:b:80", "", "/", "=&=&;a=1;b=2", "t", "\t", "a  b", uint64(3))
	f.Add(uint32(9), "x", "https", "a..:443", "/%2F", "/%2f", strings.Repeat("p=1&", 40), "", "", "", uint64(4))
	f.Add(uint32(9), "x", "https", "a.:8443", "/", "//", strings.Repeat("z=1&y&", 60)+"utm_source=1", "", "", "", uint64(5))
	f.Fuzz(func(t *testing.T, ns uint32, route, scheme, host, path, path2, query, tenant, h0, h1 string, seed uint64) {
		r, err := NewRules(fuzzIgnore, fuzzHeaders)
		if err != nil {
			t.Fatal(err)
		}
		p := Parts{
			Namespace: ns, Route: route, Scheme: []byte(scheme), Host: []byte(host), Path: []byte(path),
			Query: []byte(query), Tenant: []byte(tenant), Headers: [][]byte{[]byte(h0), []byte(h1)},
		}
		key := Append(nil, r, &p)

		if ref := refKey(fuzzIgnore, fuzzHeaders, &p, nil); !bytes.Equal(key, ref) {
			t.Fatalf("Append = %x\nreference %x", key, ref)
		}

		dirty := bytes.Repeat([]byte{0xA5}, len(key)+64)
		if got := Append(dirty[:0], r, &p); !bytes.Equal(got, key) {
			t.Fatalf("Append into dirty buffer = %x, fresh %x", got, key)
		}
		dirty = bytes.Repeat([]byte{0xA5}, len(key)+64)
		if got := Append(dirty[:3], r, &p); !bytes.Equal(got[:3], []byte{0xA5, 0xA5, 0xA5}) || !bytes.Equal(got[3:], key) {
			t.Fatalf("Append after prefix = %x, want a5a5a5 ‖ %x", got, key)
		}

		canon := p
		canon.Scheme = appendLower(nil, p.Scheme)
		canon.Host = AppendHost(nil, p.Scheme, p.Host)
		canon.Query = r.AppendQuery(nil, p.Query)
		canon.Headers = [][]byte{AppendValue(nil, p.Headers[0]), AppendValue(nil, p.Headers[1])}
		if got := Append(nil, r, &canon); !bytes.Equal(got, key) {
			t.Fatalf("Append of canonical parts = %x, want %x (host %q → %q, query %q → %q)",
				got, key, p.Host, canon.Host, p.Query, canon.Query)
		}

		if path2 != path {
			p2 := p
			p2.Path = []byte(path2)
			if got := Append(nil, r, &p2); bytes.Equal(got, key) {
				t.Fatalf("paths %q and %q share key %x", path, path2, key)
			}
		}

		// Keep the first parameter of each name, then compare the key of that
		// list in its order and in a shuffled order.
		var distinct []string
		seen := map[string]bool{}
		for _, prm := range strings.Split(query, "&") {
			name, _, _ := strings.Cut(prm, "=")
			if prm == "" || seen[name] {
				continue
			}
			seen[name] = true
			distinct = append(distinct, prm)
		}
		pa, pb := p, p
		pa.Query = []byte(strings.Join(distinct, "&"))
		rand.New(rand.NewPCG(seed, seed>>1)).Shuffle(len(distinct), func(i, j int) {
			distinct[i], distinct[j] = distinct[j], distinct[i]
		})
		pb.Query = []byte(strings.Join(distinct, "&"))
		if ka, kb := Append(nil, r, &pa), Append(nil, r, &pb); !bytes.Equal(ka, kb) {
			t.Fatalf("query %q and its permutation %q give different keys", pa.Query, pb.Query)
		}
	})
}

// FuzzAppendVary checks AppendVary: it never panics, agrees with the
// reference, is the same into a dirty buffer, keeps an absent header apart
// from every present value, and AppendValue is idempotent.
func FuzzAppendVary(f *testing.F) {
	f.Add("accept-encoding", "gzip, br", false)
	f.Add("Accept-Language", "  en-GB ,\tfr  ", false)
	f.Add("accept", "", true)
	f.Add("x", "", false)
	f.Add("x", strings.Repeat("a ,", 100), false)
	f.Fuzz(func(t *testing.T, name, value string, absent bool) {
		primary := Append(nil, nil, &Parts{Route: "r", Scheme: []byte("http"), Host: []byte("a"), Path: []byte("/")})
		v := []byte(value)
		var refV *string
		if absent {
			v = nil
		} else {
			refV = &value
		}
		key := AppendVary(bytes.Clone(primary), []byte(name), v)
		ref := refKey(nil, nil, &Parts{Route: "r", Scheme: []byte("http"), Host: []byte("a"), Path: []byte("/")},
			[]refVary{{name, refV}})
		if !bytes.Equal(key, ref) {
			t.Fatalf("AppendVary = %x\nreference %x", key, ref)
		}

		dirty := append(bytes.Clone(primary), bytes.Repeat([]byte{0xA5}, len(key))...)
		if got := AppendVary(dirty[:len(primary)], []byte(name), v); !bytes.Equal(got, key) {
			t.Fatalf("AppendVary into dirty buffer = %x, fresh %x", got, key)
		}

		absentKey := AppendVary(bytes.Clone(primary), []byte(name), nil)
		presentKey := AppendVary(bytes.Clone(primary), []byte(name), []byte(value))
		if bytes.Equal(absentKey, presentKey) {
			t.Fatalf("absent and present %q share variant key %x", value, absentKey)
		}

		norm := AppendValue(nil, []byte(value))
		if again := AppendValue(nil, norm); !bytes.Equal(again, norm) {
			t.Fatalf("AppendValue not idempotent: %q → %q → %q", value, norm, again)
		}
	})
}

// FuzzForwardQuery: the query a cache fetch forwards has the request's
// key, and holds nothing the key ignores.
func FuzzForwardQuery(f *testing.F) {
	for _, s := range []string{"", "a=1", "utm_source=x&a=1", "a=1&utm_source", "utm_source=x;b=1", "&&utm_source=&", "x&utm_source=1&x"} {
		f.Add(s)
	}
	r, err := NewRules([]string{"utm_source", "x"}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out, dropped := r.AppendForwardQuery(nil, []byte(q))
		sent := q
		if dropped {
			sent = string(out)
		} else if len(out) != 0 {
			t.Fatalf("AppendForwardQuery(%q) appended %q without dropping", q, out)
		}
		if a, b := r.AppendQuery(nil, []byte(sent)), r.AppendQuery(nil, []byte(q)); string(a) != string(b) {
			t.Fatalf("forwarded %q keys as %q, the request %q as %q", sent, a, q, b)
		}
		var none *Rules
		if a, b := r.AppendQuery(nil, []byte(sent)), none.AppendQuery(nil, []byte(sent)); string(a) != string(b) {
			t.Fatalf("forwarded %q still holds an ignored parameter (%q vs %q)", sent, a, b)
		}
	})
}
