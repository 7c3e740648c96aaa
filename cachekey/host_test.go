package cachekey

import "testing"

func TestAppendHost(t *testing.T) {
	tests := []struct {
		name, scheme, host, want string
	}{
		{"lower-cased", "http", "Example.COM", "example.com"},
		{"scheme case ignored", "HTTP", "example.com:80", "example.com"},
		{"http default port dropped", "http", "example.com:80", "example.com"},
		{"https default port dropped", "https", "example.com:443", "example.com"},
		{"80 kept for https", "https", "example.com:80", "example.com:80"},
		{"443 kept for http", "http", "example.com:443", "example.com:443"},
		{"other port kept", "http", "example.com:8080", "example.com:8080"},
		{"port compared as text", "http", "example.com:080", "example.com:080"},
		{"empty port dropped", "https", "example.com:", "example.com"},
		{"unknown scheme keeps port", "ftp", "example.com:80", "example.com:80"},
		{"trailing dot dropped", "http", "example.com.", "example.com"},
		{"trailing dot and port", "https", "Example.COM.:443", "example.com"},
		{"trailing dot kept port", "http", "example.com.:8080", "example.com:8080"},
		{"only one trailing dot", "http", "example.com..", "example.com.."},
		{"lone dot", "http", ".", ""},
		{"empty", "http", "", ""},
		{"ipv6 default port", "http", "[::1]:80", "[::1]"},
		{"ipv6 other port", "https", "[FE80::1]:8443", "[fe80::1]:8443"},
		{"ipv6 no port", "http", "[::1]", "[::1]"},
		{"ipv6 unterminated", "http", "[::1:80", "[::1:80"},
		{"two colons: no port", "http", "a:b:80", "a:b:80"},
		{"ipv4", "https", "10.0.0.1:443", "10.0.0.1"},
		{"non-ascii kept", "http", "\xc3\x89x.com", "\xc3\x89x.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendHost(nil, []byte(tt.scheme), []byte(tt.host)))
			if got != tt.want {
				t.Errorf("AppendHost(%q, %q) = %q, want %q", tt.scheme, tt.host, got, tt.want)
			}
			if ref := refHost(tt.scheme, tt.host); got != ref {
				t.Errorf("AppendHost(%q, %q) = %q, reference %q", tt.scheme, tt.host, got, ref)
			}
			again := string(AppendHost(nil, []byte(tt.scheme), []byte(got)))
			if again != got {
				t.Errorf("AppendHost not idempotent: %q → %q → %q", tt.host, got, again)
			}
		})
	}
}

func TestPlainHost(t *testing.T) {
	for host, want := range map[string]bool{
		"": true, "example.com": true, "example.com:8080": true, "127.0.0.1:19601": true, ":8080": true,
		"example.com:080": true, "example.com:80": false, "example.com:443": false, "example.com:": false,
		"Example.com": false, "example.com.": false, "example.com.:8080": false, "Example.com:8080": false,
		"a:b": false, "a:1:2": false, "[::1]:8080": false,
	} {
		if got := PlainHost([]byte(host)); got != want {
			t.Errorf("PlainHost(%q) = %v, want %v", host, got, want)
		}
		if want {
			for _, scheme := range []string{"http", "https"} {
				if canon := AppendHost(nil, []byte(scheme), []byte(host)); string(canon) != host {
					t.Errorf("PlainHost(%q) is true but its %s canonical form is %q", host, scheme, canon)
				}
			}
		}
	}
}
