package stale

import "testing"

func TestETagMatch(t *testing.T) {
	tests := []struct {
		name, inm, etag string
		want            bool
	}{
		{"strong = strong §8.8.3.2", `"abc"`, `"abc"`, true},
		{"weak comparison: W/ on the request §8.8.3.2", `W/"abc"`, `"abc"`, true},
		{"weak comparison: W/ on the stored §8.8.3.2", `"abc"`, `W/"abc"`, true},
		{"weak both §8.8.3.2", `W/"abc"`, `W/"abc"`, true},
		{"different tags §8.8.3.2", `"abc"`, `"abd"`, false},
		{"list §13.1.2", `"x", W/"y" ,"abc"`, `"abc"`, true},
		{"list without match §13.1.2", `"x", "y"`, `"abc"`, false},
		{"comma inside a tag §8.8.3", `"a,b"`, `"a,b"`, true},
		{"comma inside a tag is not a separator", `"a,b"`, `"b"`, false},
		{"star §13.1.2", `*`, `"abc"`, true},
		{"star matches a stored response without ETag §13.1.2", ` * `, ``, true},
		{"star inside a list is malformed", `"x", *`, `"abc"`, false},
		{"no stored ETag", `"abc"`, ``, false},
		{"unquoted stored ETag never matches", `abc`, `abc`, false},
		{"unquoted member skipped", `abc, "abc"`, `"abc"`, true},
		{"garbage after a tag spoils that member", `"abc"x, "y"`, `"abc"`, false},
		{"lower-case w/ is not weak §8.8.3", `w/"abc"`, `"abc"`, false},
		{"unterminated", `"abc`, `"abc"`, false},
		{"empty header", ``, `"abc"`, false},
		{"quotes are part of the comparison", `""`, `""`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ETagMatch([]byte(tt.inm), []byte(tt.etag)); got != tt.want {
				t.Errorf("ETagMatch(%q, %q) = %v, want %v", tt.inm, tt.etag, got, tt.want)
			}
		})
	}
}

func TestETagMatchStrong(t *testing.T) {
	tests := []struct {
		name, im, etag string
		want           bool
	}{
		{"strong = strong §8.8.3.2", `"abc"`, `"abc"`, true},
		{"W/ on the request never matches §8.8.3.2", `W/"abc"`, `"abc"`, false},
		{"W/ on the stored never matches §8.8.3.2", `"abc"`, `W/"abc"`, false},
		{"weak both never match §8.8.3.2", `W/"abc"`, `W/"abc"`, false},
		{"different tags §13.1.1", `"abc"`, `"abd"`, false},
		{"list §13.1.1", `"x", W/"abc" ,"abc"`, `"abc"`, true},
		{"list of weak members only §13.1.1", `W/"x", W/"abc"`, `"abc"`, false},
		{"list without match §13.1.1", `"x", "y"`, `"abc"`, false},
		{"star §13.1.1", `*`, `"abc"`, true},
		{"star matches a stored response without ETag §13.1.1", `*`, ``, true},
		{"star matches a weak stored ETag §13.1.1", `*`, `W/"abc"`, true},
		{"no stored ETag §13.1.1", `"abc"`, ``, false},
		{"lower-case w/ is not weak, and not a tag", `w/"abc"`, `"abc"`, false},
		{"unterminated", `"abc`, `"abc"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ETagMatchStrong([]byte(tt.im), []byte(tt.etag)); got != tt.want {
				t.Errorf("ETagMatchStrong(%q, %q) = %v, want %v", tt.im, tt.etag, got, tt.want)
			}
		})
	}
}

func TestModifiedSince(t *testing.T) {
	const lm = "Sun, 06 Nov 1994 08:49:37 GMT"
	tests := []struct {
		name, ius, lm string
		want          bool
	}{
		{"same date: not modified §13.1.4", lm, lm, false},
		{"later IUS: not modified §13.1.4", "Mon, 07 Nov 1994 08:49:37 GMT", lm, false},
		{"earlier IUS: modified §13.1.4", "Sat, 05 Nov 1994 08:49:37 GMT", lm, true},
		{"obsolete format IUS §5.6.7", "Saturday, 05-Nov-94 08:49:37 GMT", lm, true},
		{"invalid IUS is ignored §13.1.4", "yesterday", lm, false},
		{"a list of dates is ignored §13.1.4", "Sat, 05 Nov 1994 08:49:37 GMT, Sat, 05 Nov 1994 08:49:37 GMT", lm, false},
		{"no Last-Modified", "Sat, 05 Nov 1994 08:49:37 GMT", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ModifiedSince([]byte(tt.ius), []byte(tt.lm)); got != tt.want {
				t.Errorf("ModifiedSince(%q, %q) = %v, want %v", tt.ius, tt.lm, got, tt.want)
			}
		})
	}
}

func TestNotModifiedSince(t *testing.T) {
	const lm = "Sun, 06 Nov 1994 08:49:37 GMT"
	tests := []struct {
		name, ims, lm string
		want          bool
	}{
		{"same date §13.1.3", lm, lm, true},
		{"later IMS §13.1.3", "Mon, 07 Nov 1994 08:49:37 GMT", lm, true},
		{"earlier IMS §13.1.3", "Sat, 05 Nov 1994 08:49:37 GMT", lm, false},
		{"obsolete format IMS §5.6.7", "Sunday, 06-Nov-94 08:49:37 GMT", lm, true},
		{"invalid IMS is ignored §13.1.3", "yesterday", lm, false},
		{"no Last-Modified", lm, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NotModifiedSince([]byte(tt.ims), []byte(tt.lm)); got != tt.want {
				t.Errorf("NotModifiedSince(%q, %q) = %v, want %v", tt.ims, tt.lm, got, tt.want)
			}
		})
	}
}

func TestNotModified(t *testing.T) {
	const lm = "Sun, 06 Nov 1994 08:49:37 GMT"
	tests := []struct {
		name, inm, ims, etag, lm string
		want                     bool
	}{
		{"If-None-Match decides alone when it matches §13.1.2", `"a"`, "Sat, 05 Nov 1994 08:49:37 GMT", `"a"`, lm, true},
		{"If-None-Match decides alone when it fails §13.1.3", `"b"`, lm, `"a"`, lm, false},
		{"If-Modified-Since without If-None-Match §13.1.3", "", lm, `"a"`, lm, true},
		{"blank If-None-Match counts as absent", "  ", lm, `"a"`, lm, true},
		{"no conditionals", "", "", `"a"`, lm, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NotModified([]byte(tt.inm), []byte(tt.ims), []byte(tt.etag), []byte(tt.lm))
			if got != tt.want {
				t.Errorf("NotModified = %v, want %v", got, tt.want)
			}
		})
	}
}
