package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a configuration file. Line and Column are 1-based
// and point at the offending value (or key, for unknown and duplicate
// keys); both are 0 only for problems of the whole file, such as an empty
// one. Field is the dotted path of the setting, e.g. "routes[0].origin" or
// "origins.api.servers[1]"; it is empty for syntax errors.
//
// Parse and Load return several problems at once with errors.Join, sorted
// by position; each is an *Error, so errors.As finds the first.
type Error struct {
	File         string
	Line, Column int
	Field, Msg   string
}

// Error formats e as "FILE:LINE:COL: FIELD: MESSAGE", leaving out the parts
// that are unknown, the way compilers do so editors can jump to it.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":" + strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// joinErrors sorts errs by position, drops exact duplicates (a value reached
// through two aliases reports once per path, but never twice per path) and
// joins them. It returns nil for no errors.
func joinErrors(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), strings.Compare(a.Field, b.Field))
	})
	errs = slices.CompactFunc(errs, func(a, b *Error) bool { return *a == *b })
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// yamlLineRE matches yaml.v3's syntax error text, "yaml: line N: problem".
var yamlLineRE = regexp.MustCompile(`(?s)^yaml: (?:line (\d+): )?(.*)$`)

// parserProblems are the problems yaml.v3's parser (as opposed to its
// scanner) reports. For these, yaml.v3 v3.0.1 prints the 0-based line of
// the enclosing construct, and omits it on the first line; scanner
// problems come 1-based. The library is archived, so the list is fixed.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
}

// readerProblems are yaml.v3 reader errors: bad encoding, which yaml.v3
// reports without a position, so syntaxError finds it itself.
var readerProblems = map[string]bool{
	"invalid leading UTF-8 octet":        true,
	"incomplete UTF-8 octet sequence":    true,
	"invalid trailing UTF-8 octet":       true,
	"invalid length of a UTF-8 sequence": true,
	"invalid Unicode character":          true,
	"control characters are not allowed": true,
}

// syntaxError turns a yaml.v3 parse error into an *Error. yaml.v3 gives a
// line but no column; the line is corrected for parser problems, inferred
// when yaml.v3 leaves it out, and clamped into the file (an unterminated
// quote is reported on the line after the last).
func syntaxError(file string, data []byte, err error) *Error {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{File: file, Msg: "invalid YAML: " + err.Error()}
	}
	e := &Error{File: file, Msg: "invalid YAML: " + m[2]}
	e.Line, _ = strconv.Atoi(m[1]) // 0 when absent
	problem := m[2]
	switch {
	case parserProblems[problem]:
		e.Line++
	case e.Line > 0:
	case readerProblems[problem]:
		e.Line, e.Column = badCharPosition(data)
	case strings.HasPrefix(problem, "found ") || strings.Contains(problem, "find ") ||
		strings.HasSuffix(problem, "not allowed in this context"):
		// A scanner problem: yaml.v3 omits the line only when it is the first.
		e.Line = 1
	}
	if e.Line > 0 {
		e.Line = min(e.Line, lineCount(data))
	}
	return e
}

// badCharPosition returns the 1-based line and column (in characters) of
// the first byte YAML does not accept: invalid UTF-8 or a control
// character other than tab and line breaks. It returns 0, 0 if none.
func badCharPosition(data []byte) (line, col int) {
	line, col = 1, 1
	for i := 0; i < len(data); {
		if n := breakLen(data[i:]); n > 0 {
			line, col = line+1, 1
			i += n
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1,
			r < 0x20 && r != '\t',
			r >= 0x7F && r <= 0x9F,
			r == 0xFFFE || r == 0xFFFF:
			return line, col
		}
		col++
		i += size
	}
	return 0, 0
}

// breakLen returns the length of the line break data starts with, or 0.
// YAML's scanner ends a line at "\r\n", "\r", "\n", NEL, LS and PS.
func breakLen(data []byte) int {
	switch {
	case len(data) == 0:
		return 0
	case data[0] == '\n':
		return 1
	case data[0] == '\r':
		if len(data) > 1 && data[1] == '\n' {
			return 2
		}
		return 1
	case len(data) > 1 && data[0] == 0xC2 && data[1] == 0x85:
		return 2
	case len(data) > 2 && data[0] == 0xE2 && data[1] == 0x80 && (data[2] == 0xA8 || data[2] == 0xA9):
		return 3
	}
	return 0
}

// lineCount counts the lines of data as YAML's scanner does.
func lineCount(data []byte) int {
	n := 1
	for i := 0; i < len(data); {
		if b := breakLen(data[i:]); b > 0 {
			n++
			i += b
			continue
		}
		i++
	}
	return n
}

// kindName names a node's kind for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.DocumentNode:
		return "a document"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}
