package routing

import (
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
}

// Table maps a request's host and path to a route. It is immutable after
// NewTable and safe for concurrent use; reloads build a new Table.
//
// Matching: routes are tried in configuration order; a route matches when
// one of its hosts equals the request host (case-insensitive, port
// ignored) or is "*", and the path starts with its prefix. The first
// match wins, so "*" routes after exact-host routes act as fallbacks.
type Table struct {
	byHost map[string][]*Route // exact host → routes naming it or "*", in order
	any    []*Route            // routes with "*", in order (for hosts not in byHost)
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
		routes[i] = &Route{Name: s.Name, Index: i, PathPrefix: s.PathPrefix}
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

// Match returns the route for host and path, or nil. host is the Host
// header as received (any case, optional port); path is the raw request
// path. Match does not retain either slice and does not allocate.
func (t *Table) Match(host, path []byte) *Route {
	var buf [maxHostLen]byte
	h := hostOnly(host)
	candidates := t.any
	if len(h) <= maxHostLen {
		n := copy(buf[:], h)
		lower(buf[:n])
		if list, ok := t.byHost[string(buf[:n])]; ok {
			candidates = list
		}
	}
	for _, r := range candidates {
		if hasPrefix(path, r.PathPrefix) {
			return r
		}
	}
	return nil
}

// hostOnly strips the port (and IPv6 brackets stay) and one trailing dot.
func hostOnly(h []byte) []byte {
	if i := lastColon(h); i >= 0 {
		h = h[:i]
	}
	if n := len(h); n > 0 && h[n-1] == '.' {
		h = h[:n-1]
	}
	return h
}

// lastColon finds a port separator, ignoring colons inside an IPv6 literal.
func lastColon(h []byte) int {
	for i := len(h) - 1; i >= 0; i-- {
		switch h[i] {
		case ':':
			return i
		case ']':
			return -1
		}
	}
	return -1
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
