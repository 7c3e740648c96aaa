package config

import (
	"fmt"
	"strings"
)

// expandEnv replaces ${NAME} and ${NAME:-default} in s. "$${" produces a
// literal "${"; any other "$" is literal. As in the shell, the default is
// used when NAME is unset or empty; a plain ${NAME} with NAME unset is an
// error, so a missing secret never silently becomes "".
//
// It runs on decoded string scalars, never on the raw file: a value that
// contains ':' or '#' cannot change the YAML structure, and line numbers
// stay those of the file.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated variable reference %q (write $${ for a literal ${)", s[i:])
			}
			ref := s[i : i+end+1]
			v, err := lookupRef(ref[2:len(ref)-1], ref, lookup)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			i += end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// lookupRef resolves the inside of one ${...} reference.
func lookupRef(expr, ref string, lookup func(string) (string, bool)) (string, error) {
	name, def, hasDef := strings.Cut(expr, ":-")
	if !validEnvName(name) {
		return "", fmt.Errorf("invalid variable reference %q: only ${NAME} and ${NAME:-default} are supported", ref)
	}
	if strings.Contains(def, "${") {
		return "", fmt.Errorf("invalid variable reference %q: nested references are not supported", ref)
	}
	v, ok := lookup(name)
	switch {
	case hasDef && v == "":
		return def, nil
	case !ok:
		return "", fmt.Errorf("environment variable %s is not set (use ${%s:-default} for a default)", name, name)
	}
	return v, nil
}

// validEnvName reports whether name is a POSIX shell variable name.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
