package cachekey

import (
	"errors"
	"slices"
	"testing"
)

func TestNewRules(t *testing.T) {
	tests := []struct {
		name        string
		ignore      []string
		headers     []string
		wantHeaders []string
		wantErrs    []error // each must be matched by errors.Is
	}{
		{name: "none"},
		{
			name:        "headers lower-cased and sorted",
			ignore:      []string{"utm_source"},
			headers:     []string{"X-Device", "Accept-Language", "x-b"},
			wantHeaders: []string{"accept-language", "x-b", "x-device"},
		},
		{name: "empty header", headers: []string{""}, wantErrs: []error{ErrEmptyName}},
		{name: "header with space", headers: []string{"X Device"}, wantErrs: []error{ErrInvalidName}},
		{name: "header with colon", headers: []string{"x:y"}, wantErrs: []error{ErrInvalidName}},
		{name: "header non-ascii", headers: []string{"x-é"}, wantErrs: []error{ErrInvalidName}},
		{name: "duplicate header ignoring case", headers: []string{"X-A", "x-a"}, wantErrs: []error{ErrDuplicateName}},
		{name: "empty query name", ignore: []string{""}, wantErrs: []error{ErrEmptyName}},
		{name: "query name with =", ignore: []string{"a=b"}, wantErrs: []error{ErrInvalidName}},
		{name: "query name with &", ignore: []string{"a&b"}, wantErrs: []error{ErrInvalidName}},
		{name: "duplicate query name", ignore: []string{"a", "a"}, wantErrs: []error{ErrDuplicateName}},
		{name: "query names case-sensitive", ignore: []string{"a", "A"}},
		{
			name:     "every problem reported",
			ignore:   []string{"", "x", "x"},
			headers:  []string{"bad name", "ok", "OK"},
			wantErrs: []error{ErrEmptyName, ErrDuplicateName, ErrInvalidName},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRules(tt.ignore, tt.headers)
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("NewRules(%q, %q) = nil error, want %v", tt.ignore, tt.headers, tt.wantErrs)
				}
				for _, want := range tt.wantErrs {
					if !errors.Is(err, want) {
						t.Errorf("NewRules(%q, %q) = %v, want it to wrap %v", tt.ignore, tt.headers, err, want)
					}
				}
				if r != nil {
					t.Errorf("NewRules returned rules with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewRules(%q, %q) = %v", tt.ignore, tt.headers, err)
			}
			if got := r.KeyHeaders(); !slices.Equal(got, tt.wantHeaders) {
				t.Errorf("KeyHeaders() = %q, want %q", got, tt.wantHeaders)
			}
		})
	}
}

func TestNilRules(t *testing.T) {
	var r *Rules
	if got := r.KeyHeaders(); got != nil {
		t.Errorf("nil.KeyHeaders() = %q, want nil", got)
	}
	p := &Parts{Route: "r", Scheme: []byte("http"), Host: []byte("a"), Path: []byte("/"), Query: []byte("b&a")}
	empty, err := NewRules(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Append(nil, r, p), Append(nil, empty, p); string(got) != string(want) {
		t.Errorf("Append(nil rules) = %x, want %x (empty rules)", got, want)
	}
}

// isTokenTable is IsToken as it was: the table, byte by byte.
func isTokenTable(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return true
}

// TestIsTokenAgreesWithTable: IsToken's word-at-a-time fast path
// answers as the table does for every byte value at every position of
// names of 1 to 24 bytes (each built on a name of letters, digits and
// '-', the fast path's case), and for all two-byte names.
func TestIsTokenAgreesWithTable(t *testing.T) {
	const base = "Accept-Encoding-X-Foo-9z"
	for n := 1; n <= len(base); n++ {
		for i := 0; i < n; i++ {
			for c := 0; c < 256; c++ {
				b := []byte(base[:n])
				b[i] = byte(c)
				if got, want := IsToken(b), isTokenTable(b); got != want {
					t.Fatalf("IsToken(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	for c := 0; c < 1<<16; c++ {
		b := []byte{byte(c), byte(c >> 8)}
		if got, want := IsToken(b), isTokenTable(b); got != want {
			t.Fatalf("IsToken(%q) = %v, want %v", b, got, want)
		}
	}
	if IsToken(nil) || IsToken([]byte{}) {
		t.Fatal("the empty name is a token")
	}
}

// FuzzIsToken: IsToken agrees with the table on any input.
func FuzzIsToken(f *testing.F) {
	for _, s := range []string{"", "Host", "Accept-Encoding", "X-A\r\n", "Content Length", "a\x10b-cdefgh", "abcdefgh\x0d", "~!#$%&'*+-.^_`|"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := IsToken(b), isTokenTable(b); got != want {
			t.Fatalf("IsToken(%q) = %v, want %v", b, got, want)
		}
	})
}
