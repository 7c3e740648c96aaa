package cachekey

import "testing"

func TestAppendValue(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"only OWS", " \t ", ""},
		{"trimmed", "  gzip\t", "gzip"},
		{"OWS around commas", "gzip , br,\tdeflate", "gzip,br,deflate"},
		{"runs collapsed", "a  \t b", "a b"},
		{"tab becomes space", "a\tb", "a b"},
		{"case kept", "GZip", "GZip"},
		{"empty list elements kept", "a,,b", "a,,b"},
		{"spaced empty element", "a , , b", "a,,b"},
		{"leading comma", " ,a", ",a"},
		{"params", "text/html; q=0.8, */*;  q=0.1", "text/html; q=0.8,*/*; q=0.1"},
		{"quoted string not special", `"a  b"`, `"a b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendValue(nil, []byte(tt.in)))
			if got != tt.want {
				t.Errorf("AppendValue(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if ref := refValue(tt.in); got != ref {
				t.Errorf("AppendValue(%q) = %q, reference %q", tt.in, got, ref)
			}
			if again := string(AppendValue(nil, []byte(got))); again != got {
				t.Errorf("AppendValue not idempotent: %q → %q → %q", tt.in, got, again)
			}
		})
	}
}
