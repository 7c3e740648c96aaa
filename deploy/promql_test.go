package deploy

import (
	"slices"
	"strings"
	"testing"
)

// metricNames returns the metric names a PromQL expression selects, in
// order of first use. It is a lexer, not a parser: it skips string
// literals, label matchers ({...}), ranges and subqueries ([...]),
// comments, numbers and durations, Grafana variables ($x, ${x}, [[x]]),
// the label lists after by/without/on/ignoring/group_left/group_right,
// and every identifier followed by "(" (a function or an aggregation).
// What is left is a metric name. Keywords are matched case-insensitively,
// as PromQL does.
func metricNames(expr string) []string {
	var names []string
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
		case c == '{':
			i = skipBalanced(s, i, '{', '}')
		case c == '[':
			i = skipBalanced(s, i, '[', ']')
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				i = skipBalanced(s, i, '{', '}')
				continue
			}
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			i = skipNumber(s, i)
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && isSpace(s[k]) {
				k++
			}
			call := k < len(s) && s[k] == '('
			lower := strings.ToLower(word)
			switch {
			case grouping[lower]:
				if call {
					j = skipBalanced(s, k, '(', ')')
				}
			case keywords[lower], call:
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names
}

// grouping keywords take a parenthesised label list, never metric names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are PromQL words that are not metric names even when no "("
// follows them: operators, literals, and aggregations written as
// `sum by (x) (...)`.
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

// skipString returns the index after the string literal starting at i.
// Backquoted strings have no escapes.
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`':
			i++
		case s[i] == q:
			return i + 1
		}
	}
	return len(s)
}

// skipBalanced returns the index after the close that matches the open at
// i, stepping over string literals; len(s) when it is missing.
func skipBalanced(s string, i int, open, close byte) int {
	depth := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
			continue
		case c == open:
			depth++
		case c == close:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(s)
}

// skipNumber returns the index after a number or a duration starting at
// i: 0.95, 1e-3, 0x1f, 5m, 1h30m.
func skipNumber(s string, i int) int {
	for i < len(s) {
		c := s[i]
		switch {
		case isIdentChar(c) || c == '.':
			i++
		case (c == '+' || c == '-') && (s[i-1] == 'e' || s[i-1] == 'E') && !strings.HasPrefix(strings.ToLower(s[:i]), "0x"):
			i++
		default:
			return i
		}
	}
	return i
}

// varQueryNames returns the metric names of a Grafana Prometheus variable
// query: label_values(expr, label), label_values(label) (none),
// query_result(expr), or a plain expression.
func varQueryNames(q string) []string {
	q = strings.TrimSpace(q)
	if inner, ok := strings.CutPrefix(q, "label_values("); ok {
		inner = strings.TrimSuffix(strings.TrimSpace(inner), ")")
		if comma := lastTopLevelComma(inner); comma >= 0 {
			return metricNames(inner[:comma])
		}
		return nil // label_values(label): every series, no metric named
	}
	if inner, ok := strings.CutPrefix(q, "query_result("); ok {
		return metricNames(strings.TrimSuffix(strings.TrimSpace(inner), ")"))
	}
	return metricNames(q)
}

// lastTopLevelComma is the index of the last comma outside braces,
// brackets, parentheses and strings; -1 if none.
func lastTopLevelComma(s string) int {
	last, depth := -1, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\'', '`':
			i = skipString(s, i) - 1
		case '{', '[', '(':
			depth++
		case '}', ']', ')':
			depth--
		case ',':
			if depth == 0 {
				last = i
			}
		}
	}
	return last
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`shield_cache_bytes / shield_cache_max_bytes > 0.95`, []string{"shield_cache_bytes", "shield_cache_max_bytes"}},
		{`sum(rate(shield_requests_total{instance=~"$instance",cache="hit"}[$__rate_interval]))`, []string{"shield_requests_total"}},
		{`sum by (route) (rate(a_total[5m])) / sum without(cache, le) (rate(b_total[5m]))`, []string{"a_total", "b_total"}},
		{`sum(rate(a_total[5m])) BY (instance)`, []string{"a_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(d_seconds_bucket{route=~"$route"}[$__rate_interval])))`, []string{"d_seconds_bucket"}},
		{`x{l="a{b}[c] y_total"} and on(instance) group_left(origin) z`, []string{"x", "z"}},
		{`x{l='it\'s y'} unless ignoring (job) w offset 5m`, []string{"x", "w"}},
		{"x{l=`raw\\`} + y", []string{"x", "y"}}, // backquotes have no escapes: the string ends at the second `
		{`1e-3 * x + 0x1f + .5 + Inf - NaN`, []string{"x"}},
		{`x > bool 2 or vector(1)`, []string{"x"}},
		{"a # a comment naming b\n+ c", []string{"a", "c"}},
		{`${DS} + $__range_s + foo`, []string{"foo"}},
		{`increase(x[1h30m:5m])`, []string{"x"}},
		{`{__name__="hidden"}`, nil}, // selected by matcher only: nothing to check by name
		{`x_total + x_total`, []string{"x_total"}},
		{`ns:rule:rate5m`, []string{"ns:rule:rate5m"}},
		{`max by (instance, origin) (shield_breaker_state{instance=~"$instance",origin=~"$origin"}) == 2`, []string{"shield_breaker_state"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
				t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}
}

func TestVarQueryNames(t *testing.T) {
	tests := []struct {
		q    string
		want []string
	}{
		{`label_values(shield_requests_total, instance)`, []string{"shield_requests_total"}},
		{`label_values(shield_requests_total{instance=~"$instance", x="a,b"}, route)`, []string{"shield_requests_total"}},
		{`label_values(instance)`, nil},
		{`query_result(topk(5, sum by (route) (rate(shield_requests_total[1h]))))`, []string{"shield_requests_total"}},
		{`up{job="shield"}`, []string{"up"}},
	}
	for _, tt := range tests {
		t.Run(tt.q, func(t *testing.T) {
			if got := varQueryNames(tt.q); !slices.Equal(got, tt.want) {
				t.Errorf("varQueryNames(%q) = %q, want %q", tt.q, got, tt.want)
			}
		})
	}
}

// FuzzMetricNames checks properties of the lexer on any input: it never
// panics; every name it returns is an identifier that occurs in the
// input; and text inside a label matcher's string never adds a name.
func FuzzMetricNames(f *testing.F) {
	for _, s := range []string{`up`, `sum by (le) (rate(x_bucket{a="b"}[5m]))`, `a{b="c\"d"} or e`, "x # y\nz", `$x ${y} [[z]]`, `1e+5`, `"unterminated`, `{`, `x[`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, n := range metricNames(s) {
			if n == "" || !isIdentStart(n[0]) || strings.IndexFunc(n, func(r rune) bool { return r > 127 || !isIdentChar(byte(r)) }) >= 0 {
				t.Fatalf("metricNames(%q) returned %q, not an identifier", s, n)
			}
			if !strings.Contains(s, n) {
				t.Fatalf("metricNames(%q) returned %q, which is not in the input", s, n)
			}
		}
		quoted := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
		if got := metricNames(`m{l="` + quoted + `"} + n`); !slices.Equal(got, []string{"m", "n"}) {
			t.Fatalf("with %q inside a label value: names %q, want [m n]", s, got)
		}
	})
}
