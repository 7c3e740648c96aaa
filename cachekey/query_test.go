package cachekey

import (
	"strings"
	"testing"
)

func TestAppendQuery(t *testing.T) {
	ignore := []string{"utm_source", "utm_medium", "fbclid"}
	tests := []struct {
		name, query, want string
	}{
		{"empty", "", ""},
		{"only separators", "&&&", ""},
		{"single", "a=1", "a=1"},
		{"sorted by name", "b=2&a=1&c=3", "a=1&b=2&c=3"},
		{"empty params dropped", "&b=2&&a=1&", "a=1&b=2"},
		{"ignored dropped", "utm_source=x&b=2&fbclid=y&a=1&utm_medium=z", "a=1&b=2"},
		{"all ignored", "utm_source=x&fbclid=y", ""},
		{"ignored without value", "fbclid&a=1", "a=1"},
		{"ignored compared raw", "utm%5Fsource=x", "utm%5Fsource=x"},
		{"ignored case-sensitive", "UTM_SOURCE=x", "UTM_SOURCE=x"},
		{"ignored name only before =", "a=utm_source", "a=utm_source"},
		{"duplicates keep order", "a=2&b=1&a=1", "a=2&a=1&b=1"},
		{"duplicates keep order reversed", "a=1&b=1&a=2", "a=1&a=2&b=1"},
		{"bare names", "b&a", "a&b"},
		{"bare name and empty value stay distinct", "a=&a", "a=&a"},
		{"sort by name, not value", "a=2&a=1", "a=2&a=1"},
		{"name prefix sorts first", "ab=1&a=2", "a=2&ab=1"},
		{"semicolon is not a separator", "b=1;a=2&a=3", "a=3&b=1;a=2"},
		{"values raw", "q=%20x+y&p=%2F", "p=%2F&q=%20x+y"},
		{"empty name", "=x&a=1", "=x&a=1"},
		{"bytewise order", "b=1&B=2&_=3", "B=2&_=3&b=1"},
	}
	r, err := NewRules(ignore, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(r.AppendQuery(nil, []byte(tt.query)))
			if got != tt.want {
				t.Errorf("AppendQuery(%q) = %q, want %q", tt.query, got, tt.want)
			}
			if ref := refQuery(ignore, tt.query); got != ref {
				t.Errorf("AppendQuery(%q) = %q, reference %q", tt.query, got, ref)
			}
			if again := string(r.AppendQuery(nil, []byte(got))); again != got {
				t.Errorf("AppendQuery not idempotent: %q → %q → %q", tt.query, got, again)
			}
		})
	}
}

// TestAppendQueryNilRules checks that nil rules drop nothing but empty
// parameters.
func TestAppendQueryNilRules(t *testing.T) {
	var r *Rules
	if got, want := string(r.AppendQuery(nil, []byte("utm_source=1&&a=1"))), "a=1&utm_source=1"; got != want {
		t.Errorf("nil.AppendQuery = %q, want %q", got, want)
	}
}

// TestAppendQueryManyParams crosses the stack limit, where sorting switches
// from insertion sort to a heap merge sort, and checks both agree with the
// reference, stability included.
func TestAppendQueryManyParams(t *testing.T) {
	for _, n := range []int{stackParams - 1, stackParams, stackParams + 1, 5 * stackParams} {
		var b strings.Builder
		for i := n; i > 0; i-- {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			// Names repeat every 7 so stability matters; values record order.
			b.WriteString(string(rune('a' + i%7)))
			b.WriteString("=")
			b.WriteString(strings.Repeat("x", i%5))
			b.WriteString(string(rune('A' + i%26)))
		}
		q := b.String()
		got := string((*Rules)(nil).AppendQuery(nil, []byte(q)))
		if want := refQuery(nil, q); got != want {
			t.Errorf("n=%d: AppendQuery = %q, want %q", n, got, want)
		}
	}
}

// TestAppendQueryManyIgnored covers rules with more ignored names than the
// linear search handles, which switch to a set.
func TestAppendQueryManyIgnored(t *testing.T) {
	var ignore []string
	for i := range linearIgnore + 3 {
		ignore = append(ignore, "i"+strings.Repeat("x", i))
	}
	r, err := NewRules(ignore, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.ignoreSet == nil {
		t.Fatalf("%d ignored names: want a set", len(ignore))
	}
	q := "b=1&" + strings.Join(ignore, "=1&") + "=1&a=2&ixxxxxxxxxxxxxxxxx=3"
	got := string(r.AppendQuery(nil, []byte(q)))
	if want := refQuery(ignore, q); got != want || got != "a=2&b=1&ixxxxxxxxxxxxxxxxx=3" {
		t.Errorf("AppendQuery(%q) = %q, want %q", q, got, want)
	}
}

// TestIgnoredParamWithSemicolonKept: "utm_source=x;callback=evil" is not
// dropped, since an origin may read ";callback=evil" as a parameter.
func TestIgnoredParamWithSemicolonKept(t *testing.T) {
	r, err := NewRules([]string{"utm_source"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.AppendQuery(nil, []byte("a=1&utm_source=x;callback=evil"))); got != "a=1&utm_source=x;callback=evil" {
		t.Fatalf("AppendQuery = %q, want the ';' parameter kept", got)
	}
	if got := string(r.AppendQuery(nil, []byte("a=1&utm_source=x"))); got != "a=1" {
		t.Fatalf("AppendQuery = %q, want utm_source dropped", got)
	}
}

// TestAppendForwardQuery: the query a cache fetch forwards lacks exactly
// the parameters the key ignores, the others kept in order and raw.
func TestAppendForwardQuery(t *testing.T) {
	r, err := NewRules([]string{"utm_source", "fbclid"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		query, want string
		dropped     bool
	}{
		{"", "", false},
		{"b=2&a=1", "", false}, // nothing ignored: forwarded as it is
		{"b=2&utm_source=x&a=1", "b=2&a=1", true},
		{"utm_source=x", "", true},
		{"utm_source", "", true},
		{"fbclid=1&&b=%2F&utm_source=y&", "b=%2F", true},
		{"utm_source=x;callback=evil&a=1", "", false}, // ';' keeps it in the key, so it is sent
		{"UTM_SOURCE=x&utm%5Fsource=y", "", false},
		{"a=utm_source", "", false},
	} {
		got, dropped := r.AppendForwardQuery([]byte("pre"), []byte(tt.query))
		if string(got) != "pre"+tt.want || dropped != tt.dropped {
			t.Errorf("AppendForwardQuery(%q) = %q, %v; want %q, %v", tt.query, got[3:], dropped, tt.want, tt.dropped)
		}
	}
	var none *Rules
	if got, dropped := none.AppendForwardQuery(nil, []byte("utm_source=x")); dropped || len(got) != 0 {
		t.Errorf("nil rules dropped %q", got)
	}
}

// TestAppendQueryOneParam: a query without '&' takes appendOneParam's
// path; it agrees with the reference for each way one parameter can be
// kept or dropped (empty, ignored, ignored but holding ';', bare name,
// empty name), with few ignored names (searched linearly), many (a set)
// and none, as a query and as a key field.
func TestAppendQueryOneParam(t *testing.T) {
	many := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "utm_source"}
	for _, ignore := range [][]string{nil, {"utm_source", "x"}, many} {
		r, err := NewRules(ignore, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"", "id=42", "utm_source=x", "utm_source", "utm_source=x;y=1", "utm_source;", "x", "x=", "=1", "=", ";", "utm_sourc=1", "utm_source=a=b"} {
			want := refQuery(ignore, q)
			if got := r.AppendQuery(nil, []byte(q)); string(got) != want {
				t.Errorf("ignore %q: AppendQuery(%q) = %q, want %q", ignore, q, got, want)
			}
			if got, want := r.appendQuery([]byte("k"), []byte(q), true), refField([]byte("k"), want); string(got) != string(want) {
				t.Errorf("ignore %q: appendQuery(%q) as a field = %x, want %x", ignore, q, got, want)
			}
		}
	}
}
