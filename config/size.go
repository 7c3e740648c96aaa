package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Size units. Decimal units are powers of 1000, binary units powers of 1024,
// as in IEC 80000-13; "MB" never silently means 1<<20.
const (
	KB Size = 1000
	MB Size = 1000 * KB
	GB Size = 1000 * MB

	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
)

// sizeUnits is ordered largest first so String picks the biggest unit that
// divides exactly.
var sizeUnits = []struct {
	name string
	mult Size
}{
	{"GiB", GiB}, {"GB", GB}, {"MiB", MiB}, {"MB", MB}, {"KiB", KiB}, {"KB", KB},
}

// String formats s with the largest unit that represents it exactly
// ("512MiB", "100KB"), or as a bare integer. ParseSize(s.String()) == s.
func (s Size) String() string {
	if s > 0 {
		for _, u := range sizeUnits {
			if s%u.mult == 0 {
				return strconv.FormatInt(int64(s/u.mult), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// UnmarshalYAML accepts an integer (bytes) or a string of decimal digits
// with an optional unit: "1024", "64KiB", "8MiB", "1GB". Negative values,
// fractions, unknown units and values that overflow int64 are errors.
// A null node leaves s unchanged.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("config: line %d: size must be a scalar, got %s", n.Line, kindName(n))
	}
	if n.ShortTag() == "!!null" {
		return nil
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("config: line %d: %w", n.Line, err)
	}
	*s = v
	return nil
}

// MarshalYAML writes s in the form String gives, so a marshalled Config reads
// like a hand-written one and parses back to the same value.
func (s Size) MarshalYAML() (any, error) {
	return s.String(), nil
}

// errSizeSyntax is wrapped by every ParseSize error.
var errSizeSyntax = errors.New("want digits with an optional unit B, KB, MB, GB, KiB, MiB or GiB")

// ParseSize parses the textual form of a Size (see UnmarshalYAML). Spaces
// around the number and between the number and the unit are allowed.
func ParseSize(text string) (Size, error) {
	s := strings.TrimSpace(text)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("size %q must not be negative", text)
		}
		return 0, fmt.Errorf("invalid size %q: %w", text, errSizeSyntax)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is too large", text)
	}
	unit := strings.TrimSpace(s[i:])
	mult := Size(1)
	if unit != "" && unit != "B" {
		mult = 0
		for _, u := range sizeUnits {
			if u.name == unit {
				mult = u.mult
				break
			}
		}
		if mult == 0 {
			return 0, fmt.Errorf("invalid size %q: unknown unit %q: %w", text, unit, errSizeSyntax)
		}
	}
	if n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("size %q is too large", text)
	}
	return Size(n) * mult, nil
}
