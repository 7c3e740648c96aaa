package stale

import "testing"

// want builds expected Directives from the empty set.
func want(edit func(d *Directives)) Directives {
	var d Directives
	d.Reset()
	if edit != nil {
		edit(&d)
	}
	return d
}

// exported returns d without its bookkeeping, for comparisons.
func exported(d Directives) Directives {
	d.seen = 0
	return d
}

func parse(lines ...string) Directives {
	var d Directives
	d.Reset()
	for _, l := range lines {
		d.Parse([]byte(l))
	}
	return d
}

func TestParseCacheControl(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  Directives
	}{
		{"empty §5.2", []string{""}, want(nil)},
		{"typical §5.2.2.1 §5.2.2.9 RFC5861§3", []string{"public, max-age=60, stale-while-revalidate=30"},
			want(func(d *Directives) { d.Public, d.MaxAge, d.StaleWhileRevalidate = true, 60, 30 })},
		{"every response directive §5.2.2", []string{"must-revalidate, must-understand, no-cache, no-store, no-transform, private, proxy-revalidate, public, s-maxage=5, max-age=7, immutable, stale-if-error=9, stale-while-revalidate=8"},
			want(func(d *Directives) {
				d.MustRevalidate, d.MustUnderstand, d.NoCache, d.NoStore, d.NoTransform = true, true, true, true, true
				d.Private, d.ProxyRevalidate, d.Public, d.Immutable = true, true, true, true
				d.SMaxAge, d.MaxAge, d.StaleIfError, d.StaleWhileRevalidate = 5, 7, 9, 8
			})},
		{"every request directive §5.2.1", []string{"max-age=1, max-stale=2, min-fresh=3, no-cache, no-store, no-transform, only-if-cached"},
			want(func(d *Directives) {
				d.MaxAge, d.MaxStale, d.MinFresh = 1, 2, 3
				d.NoCache, d.NoStore, d.NoTransform, d.OnlyIfCached = true, true, true, true
			})},
		{"case-insensitive names §5.2", []string{"PUBLIC, Max-Age=10, S-MAXAGE=20"},
			want(func(d *Directives) { d.Public, d.MaxAge, d.SMaxAge = true, 10, 20 })},
		{"OWS everywhere §5.6.1 RFC9110", []string{" \tpublic ,\tmax-age = 10 , ,, no-cache\t"},
			want(func(d *Directives) { d.Public, d.MaxAge, d.NoCache = true, 10, true })},
		{"quoted delta accepted §5.2", []string{`max-age="60", s-maxage="1\2"`},
			want(func(d *Directives) { d.MaxAge, d.SMaxAge = 60, 12 })},
		{"no-cache with field names is qualified §5.2.2.4", []string{`no-cache="Set-Cookie, max-age=99", public`},
			want(func(d *Directives) { d.NoCacheQualified, d.Public = true, true })},
		{"private with field names is qualified §5.2.2.7", []string{`private="x", max-age=5`},
			want(func(d *Directives) { d.PrivateQualified, d.MaxAge = true, 5 })},
		{"empty field list is plain no-cache §5.2.2.4", []string{`no-cache="", private=" , "`},
			want(func(d *Directives) { d.NoCache, d.Private = true, true })},
		{"unquoted field list is plain private §5.2.2.7", []string{`private=X-Name`},
			want(func(d *Directives) { d.Private = true })},
		{"quoted comma with escapes stays in the quote §5.6.4 RFC9110", []string{`no-cache="a\", max-age=1", s-maxage=2`},
			want(func(d *Directives) { d.NoCache, d.SMaxAge = true, 2 })},
		{"duplicate: first wins §4.2.1", []string{"max-age=10, max-age=20"},
			want(func(d *Directives) { d.MaxAge = 10 })},
		{"duplicate across lines: first wins §4.2.1", []string{"max-age=10", "max-age=20"},
			want(func(d *Directives) { d.MaxAge = 10 })},
		{"duplicate: first invalid still wins §4.2.1", []string{"max-age=x, max-age=20, stale-if-error=y, stale-if-error=5"},
			want(func(d *Directives) { d.MaxAge = 0 })},
		{"invalid max-age is stale §4.2.1 §5.2.2.1", []string{"max-age=abc"}, want(func(d *Directives) { d.MaxAge = 0 })},
		{"max-age without value is stale §5.2.2.1", []string{"max-age"}, want(func(d *Directives) { d.MaxAge = 0 })},
		{"max-age empty value is stale §5.2.2.1", []string{"max-age="}, want(func(d *Directives) { d.MaxAge = 0 })},
		{"negative max-age is stale §1.2.2", []string{"max-age=-1"}, want(func(d *Directives) { d.MaxAge = 0 })},
		{"fractional s-maxage is stale §1.2.2", []string{"s-maxage=1.5"}, want(func(d *Directives) { d.SMaxAge = 0 })},
		{"garbage after quote is invalid §5.2", []string{`max-age="60"x`}, want(func(d *Directives) { d.MaxAge = 0 })},
		{"unterminated quote is invalid §5.2", []string{`max-age="60`}, want(func(d *Directives) { d.MaxAge = 0 })},
		{"empty quote is invalid §1.2.2", []string{`s-maxage=""`}, want(func(d *Directives) { d.SMaxAge = 0 })},
		{"invalid stale-while-revalidate is absent RFC5861§3", []string{"stale-while-revalidate=soon"}, want(nil)},
		{"invalid stale-if-error is absent RFC5861§4", []string{"stale-if-error"}, want(nil)},
		{"invalid min-fresh is absent §5.2.1.3", []string{"min-fresh=-3"}, want(nil)},
		{"max-stale without value: any §5.2.1.2", []string{"max-stale"}, want(func(d *Directives) { d.MaxStaleAny = true })},
		{"max-stale invalid value is absent §5.2.1.2", []string{"max-stale=x"}, want(nil)},
		{"overflow clamps §1.2.2", []string{"max-age=99999999999999999999999, stale-if-error=2147483648"},
			want(func(d *Directives) { d.MaxAge, d.StaleIfError = MaxDeltaSeconds, MaxDeltaSeconds })},
		{"largest exact value §1.2.2", []string{"max-age=2147483647"}, want(func(d *Directives) { d.MaxAge = MaxDeltaSeconds })},
		{"leading zeros §1.2.2", []string{"max-age=007"}, want(func(d *Directives) { d.MaxAge = 7 })},
		{"bool with a value still counts §5.2", []string{"no-store=1, public=yes"},
			want(func(d *Directives) { d.NoStore, d.Public = true, true })},
		{"unknown directives ignored §5.2.3", []string{"foo, bar=baz, community=\"UCI\", max-age=3"},
			want(func(d *Directives) { d.MaxAge = 3 })},
		{"name with trailing garbage is unknown", []string{"no-store foo, public;"}, want(nil)},
		{"non-ASCII look-alike is not a name", []string{"\u017f-maxage=5"}, want(nil)},
		{"garbage", []string{"\x00\xff,=,\"\\", ",,,", "=5"}, want(nil)},
		{"lone escape at end", []string{`no-cache="\`}, want(func(d *Directives) { d.NoCache = true })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := exported(parse(tt.lines...))
			if got != tt.want {
				t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", tt.lines, got, tt.want)
			}
		})
	}
}

func TestDirectivesReset(t *testing.T) {
	d := parse("no-store, max-age=5, max-stale, private, immutable")
	d.Reset()
	if d != want(nil) || d.seen != 0 {
		t.Fatalf("Reset left %+v", d)
	}
	d.Parse([]byte("max-age=7"))
	if d.MaxAge != 7 {
		t.Errorf("after Reset, max-age=7 parsed as %d: duplicate tracking survived Reset", d.MaxAge)
	}
}

func TestPragmaNoCache(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"no-cache", true},         // RFC 9111 §5.4
		{"NO-CACHE", true},         // case-insensitive like Cache-Control
		{"x=1, \tno-cache ", true}, // a list
		{"no-cache=1", false},      // only the bare directive is defined
		{"", false},
		{"no-cacher", false},
		{",,,", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := PragmaNoCache([]byte(tt.in)); got != tt.want {
				t.Errorf("PragmaNoCache(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestQualifiedFields(t *testing.T) {
	// RFC 9111 §5.2.2.4 and §5.2.2.7: the named fields are the ones a
	// shared cache must not store.
	v := []byte(`max-age=60, no-cache="Set-Cookie, X-A", private="x-name", no-cache="Ignored"`)
	got := QualifiedFields(nil, v)
	for _, name := range []string{"set-cookie", "X-A", "X-Name"} {
		if !ListHas(got, []byte(name)) {
			t.Errorf("QualifiedFields(%q) = %q, lacks %s", v, got, name)
		}
	}
	if ListHas(got, []byte("Ignored")) || ListHas(got, []byte("max-age=60")) {
		t.Errorf("QualifiedFields(%q) = %q: a duplicate or another directive counted", v, got)
	}
	if got := QualifiedFields(nil, []byte(`no-cache, private`)); len(got) != 0 {
		t.Errorf("unqualified directives name fields: %q", got)
	}
}
