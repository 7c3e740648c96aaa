package routing

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// RouteSpec is one route as configured: the inputs of the route table.
type RouteSpec struct {
	Name       string
	Hosts      []string // exact host names (any case, no port) or "*"
	PathPrefix string   // starts with "/"
}

// Route is a matched route. Index is the route's position in the
// configuration, so callers keep per-route runtime state in a slice and
// index it without a map lookup.
type Route struct {
	Name       string
	Index      int
	PathPrefix string
	// match is PathPrefix in its matching form, slashed the same with
	// %2F read as '/' (path.go).
	match, slashed string
}

// Table maps a request's host and path to a route. It is immutable after
// NewTable and safe for concurrent use; reloads build a new Table.
//
// Matching: routes are tried in configuration order; a route matches when
// one of its hosts equals the request host (case-insensitive, port
// ignored) or is "*", and the path starts with its prefix, both in their
// matching form (path.go). The first match wins, so "*" routes after
// exact-host routes act as fallbacks.
type Table struct {
	byHost map[string][]*Route // exact host → routes naming it or "*", in order
	any    []*Route            // routes with "*", in order (for hosts not in byHost)
	// longest is the length of the longest prefix in matching form: no
	// more of a path's matching form is ever compared.
	longest int
}

// maxHostLen bounds the host we normalise on the stack; longer hosts
// (DNS names are at most 253 bytes) match only "*" routes.
const maxHostLen = 255

// NewTable compiles specs into a table.
func NewTable(specs []RouteSpec) (*Table, error) {
	t := &Table{byHost: make(map[string][]*Route)}
	var exact []string
	routes := make([]*Route, len(specs))
	for i, s := range specs {
		if !strings.HasPrefix(s.PathPrefix, "/") {
			return nil, fmt.Errorf("routing: route %q: path prefix %q must start with /", s.Name, s.PathPrefix)
		}
		if len(s.Hosts) == 0 {
			return nil, fmt.Errorf("routing: route %q: no hosts", s.Name)
		}
		m := string(AppendMatchForm(nil, []byte(s.PathPrefix), -1))
		sl := string(appendForm(nil, []byte(s.PathPrefix), -1, true))
		routes[i] = &Route{Name: s.Name, Index: i, PathPrefix: s.PathPrefix, match: m, slashed: sl}
		t.longest = max(t.longest, len(m))
		for _, h := range s.Hosts {
			if h == "" {
				return nil, errors.New("routing: route " + s.Name + ": empty host")
			}
			if h != "*" {
				exact = append(exact, strings.ToLower(h))
			}
		}
	}
	// Every exact host gets the ordered list of routes that can match it:
	// its own exact routes and every "*" route, in configuration order.
	for _, h := range exact {
		if _, done := t.byHost[h]; done {
			continue
		}
		var list []*Route
		for i, s := range specs {
			for _, sh := range s.Hosts {
				if sh == "*" || strings.EqualFold(sh, h) {
					list = append(list, routes[i])
					break
				}
			}
		}
		t.byHost[h] = list
	}
	for i, s := range specs {
		for _, sh := range s.Hosts {
			if sh == "*" {
				t.any = append(t.any, routes[i])
				break
			}
		}
	}
	return t, nil
}

// Match returns the route for host and path, or nil (also for a path
// Resolve refuses). host is the Host header as received (any case,
// optional port); path is the raw request path. Match does not retain
// either slice.
func (t *Table) Match(host, path []byte) *Route {
	r, _ := t.Resolve(host, path)
	return r
}

// Resolve is Match that tells a path without a route (nil, nil) from
// one whose route depends on how its encoded slashes are read (nil,
// ErrAmbiguousPath). It does not allocate unless a route prefix is
// longer than formBuf in matching form.
func (t *Table) Resolve(host, path []byte) (*Route, error) {
	candidates := t.hostRoutes(host)
	if bytes.IndexByte(path, '%') < 0 {
		return first(candidates, path, false), nil // already in matching form
	}
	return t.resolveEncoded(candidates, path)
}

// hostRoutes returns the routes that can match host: its byHost list,
// or the "*" routes. The host is compared without its port (after the
// last ':' that follows any ']') and one trailing dot, lower-cased; one
// pass finds the port and whether there is anything to lower-case, so
// a lower-case host (the proxy's canonical form) is looked up as it is.
func (t *Table) hostRoutes(host []byte) []*Route {
	if len(t.byHost) == 0 {
		return t.any // "*" routes only: the host changes nothing
	}
	var special byte
	for _, c := range host {
		special |= hostSpecial[c]
	}
	if special == 0 {
		// No port and nothing to lower-case: the common Host.
		h := host
		if n := len(h); n > 0 && h[n-1] == '.' {
			h = h[:n-1]
		}
		if len(h) <= maxHostLen {
			if list, ok := t.byHost[string(h)]; ok {
				return list
			}
		}
		return t.any
	}
	colon, upper := -1, false
	for i, c := range host {
		switch {
		case c == ':':
			colon = i
		case c == ']':
			colon = -1
		case 'A' <= c && c <= 'Z':
			upper = true
		}
	}
	h := host
	if colon >= 0 {
		h = h[:colon]
	}
	if n := len(h); n > 0 && h[n-1] == '.' {
		h = h[:n-1]
	}
	switch {
	case len(h) > maxHostLen:
		return t.any
	case upper:
		return t.lowerHostRoutes(h)
	}
	if list, ok := t.byHost[string(h)]; ok {
		return list
	}
	return t.any
}

// hostSpecial marks the bytes that make hostRoutes look at a host
// twice: ':' (a port) and upper-case letters.
var hostSpecial = func() (t [256]byte) {
	t[':'] = 1
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = 1
	}
	return t
}()

// lowerHostRoutes is hostRoutes' lookup for a host holding upper case,
// lower-cased on the stack (apart, so the common path's frame stays
// small).
//
//go:noinline
func (t *Table) lowerHostRoutes(h []byte) []*Route {
	var buf [maxHostLen]byte
	n := copy(buf[:], h)
	lower(buf[:n])
	if list, ok := t.byHost[string(buf[:n])]; ok {
		return list
	}
	return t.any
}

// formBuf is the stack space for a path's matching form.
const formBuf = 512

// resolveEncoded matches a path holding percent-encoding (path.go). It is
// apart so the common path's frame stays small.
//
//go:noinline
func (t *Table) resolveEncoded(candidates []*Route, path []byte) (*Route, error) {
	var buf [formBuf]byte
	dst := buf[:0]
	if t.longest > formBuf {
		dst = make([]byte, 0, t.longest)
	}
	r := first(candidates, appendForm(dst, path, t.longest, false), false)
	if !hasEncodedSlash(path) {
		return r, nil
	}
	if first(candidates, appendForm(dst[:0], path, t.longest, true), true) != r {
		return nil, ErrAmbiguousPath
	}
	return r, nil
}

// first returns the first candidate whose prefix starts the matching form
// m, or nil; slashed compares the prefixes' slashed form.
func first(candidates []*Route, m []byte, slashed bool) *Route {
	for _, r := range candidates {
		prefix := r.match
		if slashed {
			prefix = r.slashed
		}
		if hasPrefix(m, prefix) {
			return r
		}
	}
	return nil
}

func lower(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}
