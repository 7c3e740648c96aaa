package config

import (
	"math"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  string
	}{
		{in: "0", want: 0},
		{in: "1024", want: 1024},
		{in: "1024B", want: 1024},
		{in: "100KB", want: 100_000},
		{in: "64KiB", want: 64 << 10},
		{in: "8MiB", want: 8 << 20},
		{in: "512MiB", want: 512 << 20},
		{in: "1GB", want: 1_000_000_000},
		{in: "2GiB", want: 2 << 30},
		{in: " 16 MiB ", want: 16 << 20},
		{in: "9223372036854775807", want: math.MaxInt64},
		{in: "9223372036854775808", err: "too large"},
		{in: "8589934592GiB", err: "too large"},
		{in: "8589934591GiB", want: 8589934591 << 30},
		{in: "-1", err: "negative"},
		{in: "-1MiB", err: "negative"},
		{in: "", err: "invalid size"},
		{in: "MiB", err: "invalid size"},
		{in: "lots", err: "invalid size"},
		{in: "1.5GiB", err: "unknown unit"},
		{in: "1mb", err: "unknown unit"},
		{in: "1TiB", err: "unknown unit"},
		{in: "0x10", err: "unknown unit"},
		{in: "+5", err: "invalid size"},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSize(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1023, "1023"},
		{1024, "1KiB"},
		{1000, "1KB"},
		{1536, "1536"}, // 1.5KiB: only bytes represent it exactly
		{512 * MiB, "512MiB"},
		{8 * MiB, "8MiB"},
		{GB, "1GB"},
		{3 * GiB, "3GiB"},
		{4000 * KiB, "4000KiB"},
		{-5, "-5"},
	}
	for _, tc := range tests {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(tc.in), got, tc.want)
		}
		if tc.in < 0 {
			continue
		}
		back, err := ParseSize(tc.in.String())
		if err != nil || back != tc.in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in.String(), back, err, tc.in)
		}
	}
}

func TestSizeYAML(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  string
	}{
		{in: "s: 1024", want: 1024},
		{in: "s: 512MiB", want: 512 * MiB},
		{in: `s: "8MiB"`, want: 8 * MiB},
		{in: "s: ~", want: 0},
		{in: "s: -1", err: "negative"},
		{in: "s: [1]", err: "must be a scalar"},
		{in: "s: 1e9", err: "unknown unit"},
	}
	for _, tc := range tests {
		var v struct{ S Size }
		err := yaml.Unmarshal([]byte(tc.in), &v)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Unmarshal(%q) = %v, %v; want error containing %q", tc.in, v.S, err, tc.err)
		case tc.err == "" && (err != nil || v.S != tc.want):
			t.Errorf("Unmarshal(%q) = %d, %v; want %d", tc.in, v.S, err, tc.want)
		}
		if tc.err != "" {
			continue
		}
		out, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ S Size }
		if err := yaml.Unmarshal(out, &back); err != nil || back != v {
			t.Errorf("round trip of %d via %q = %d, %v", v.S, out, back.S, err)
		}
	}
}
