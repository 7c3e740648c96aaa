package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// nameRE is the syntax of origin and route names: they end up in metric
// labels and cache keys, so they are kept boring.
var nameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)

// minCacheSize is fastcache's floor: it always allocates 512 buckets of at
// least one 64KiB chunk each.
const minCacheSize = 32 * MiB

// at returns the node to blame for path: its own value node, or that of
// the nearest ancestor present in the file (the root mapping at worst).
func (d *decoder) at(path string) (line, col int) {
	for {
		if n := d.nodes[path]; n != nil {
			return n.Line, n.Column
		}
		if path == "" {
			return 1, 1
		}
		i := max(strings.LastIndexByte(path, '.'), strings.LastIndexByte(path, '['))
		path = path[:max(i, 0)]
	}
}

func (d *decoder) has(path string) bool { return d.nodes[path] != nil }

// problem records a validation error at path.
func (d *decoder) problem(path, format string, args ...any) {
	line, col := d.at(path)
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Column: col, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// validate checks c (already defaulted) and records every problem.
func (d *decoder) validate(c *Config) {
	switch {
	case c.Listen == "":
		d.problem("listen", "required: the public listener address, e.g. \"127.0.0.1:8080\"")
	default:
		d.checkListen("listen", c.Listen)
	}
	if c.Admin.Listen != "off" {
		d.checkListen("admin.listen", c.Admin.Listen)
		if c.Admin.Listen == c.Listen && c.Listen != "" {
			d.problem("admin.listen", "must differ from listen (%q), or be \"off\"", c.Listen)
		}
	}
	d.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	d.oneOf("log.format", c.Log.Format, "text", "json")

	d.positive("server.read_timeout", c.Server.ReadTimeout)
	d.positive("server.write_timeout", c.Server.WriteTimeout)
	d.positive("server.idle_timeout", c.Server.IdleTimeout)
	d.positive("server.drain_timeout", c.Server.DrainTimeout)
	d.positiveSize("server.max_header_size", c.Server.MaxHeaderSize)
	d.positiveSize("server.max_body_size", c.Server.MaxBodySize)
	d.atLeastOne("server.max_connections", c.Server.MaxConnections)
	if c.Server.HeapFloor < 0 {
		d.problem("server.heap_floor", "must not be negative (0 turns it off), got %v", c.Server.HeapFloor)
	}
	for i, tp := range c.Server.TrustedProxies {
		if _, err := ParseTrustedProxy(tp); err != nil {
			d.problem(fmt.Sprintf("server.trusted_proxies[%d]", i), "%v", err)
		}
	}
	if t := c.Server.TLS; t != nil {
		d.oneOf("server.tls.min_version", t.MinVersion, "1.2", "1.3")
		d.keyPair("server.tls", t.CertFile, t.KeyFile, true)
	}
	d.validateHTTP2(&c.Server)

	d.validateCache(&c.Cache)
	d.validateOrigins(c.Origins)
	d.validateRoutes(c)
	d.validateProtection(c)
	d.validateCluster(c)
}

func (d *decoder) validateCache(c *Cache) {
	if c.Size < minCacheSize {
		d.problem("cache.size", "must be at least %v (fastcache's minimum), got %v", minCacheSize, c.Size)
	}
	switch {
	case c.MaxObjectSize <= 0:
		d.problem("cache.max_object_size", "must be positive, got %v", c.MaxObjectSize)
	case c.Disk == nil && c.Size >= minCacheSize && c.MaxObjectSize > c.Size/8:
		d.problem("cache.max_object_size", "must be at most cache.size/8 = %v, got %v", c.Size/8, c.MaxObjectSize)
	case c.Disk != nil && c.Disk.Size >= minDiskSize && c.MaxObjectSize > c.Disk.Size/4:
		d.problem("cache.max_object_size", "must be at most cache.disk.size/4 = %v, got %v", c.Disk.Size/4, c.MaxObjectSize)
	}
	if disk := c.Disk; disk != nil {
		if disk.Path == "" {
			d.problem("cache.disk.path", "is required with cache.disk")
		}
		if disk.Size < minDiskSize {
			d.problem("cache.disk.size", "must be at least %v, got %v", minDiskSize, disk.Size)
		}
		if c.Path == "" {
			d.problem("cache.disk", "requires cache.path: the invalidation table saved beside the snapshot proves disk entries un-purged after a restart")
		} else if disk.Path != "" && (within(disk.Path, c.Path) || within(c.Path, disk.Path)) {
			// The snapshot is a directory replaced whole on save, and the
			// tier removes what it does not recognise: neither may hold
			// the other.
			d.problem("cache.disk.path", "must be outside cache.path, and cache.path outside it")
		}
	}
	d.nonNegative("cache.hit_for_miss", c.HitForMiss)
	d.atLeastOne("cache.max_waiters", c.MaxWaiters)
	d.positive("cache.wait_timeout", c.WaitTimeout)
}

func (d *decoder) validateOrigins(origins map[string]*Origin) {
	if len(origins) == 0 {
		d.problem("origins", "at least one origin is required")
		return
	}
	for _, name := range sortedKeys(origins) {
		o, p := origins[name], join("origins", name)
		if !nameRE.MatchString(name) {
			d.problem(p, "origin name %q must match [a-z0-9_-]+", name)
		}
		if len(o.Servers) == 0 {
			d.problem(p+".servers", "at least one server (host:port) is required")
		}
		seen := make(map[string]int, len(o.Servers))
		for i, s := range o.Servers {
			sp := fmt.Sprintf("%s.servers[%d]", p, i)
			if j, dup := seen[s]; dup {
				d.problem(sp, "duplicate of servers[%d]", j)
				continue
			}
			seen[s] = i
			if msg := checkServer(StripScheme(s)); msg != "" {
				d.problem(sp, "%s", msg)
			}
		}
		d.validateOriginTLS(p, o)
		d.positive(p+".idle_timeout", o.IdleTimeout)
		if hc := o.HealthCheck; hc != nil {
			hp := p + ".health_check"
			if !strings.HasPrefix(hc.Path, "/") {
				d.problem(hp+".path", "required, a path starting with \"/\", got %q", hc.Path)
			}
			d.positive(hp+".interval", hc.Interval)
			d.positive(hp+".timeout", hc.Timeout)
			if hc.Timeout > 0 && hc.Interval > 0 && hc.Timeout >= hc.Interval {
				d.problem(hp+".timeout", "must be less than interval (%s), got %s", hc.Interval, hc.Timeout)
			}
			if hc.Healthy < 1 || hc.Healthy > 100 {
				d.problem(hp+".healthy", "must be in [1, 100], got %d", hc.Healthy)
			}
			if hc.Unhealthy < 1 || hc.Unhealthy > 100 {
				d.problem(hp+".unhealthy", "must be in [1, 100], got %d", hc.Unhealthy)
			}
		}
		d.positive(p+".timeout", o.Timeout)
		d.positive(p+".connect_timeout", o.ConnectTimeout)
		d.atLeastOne(p+".max_concurrency", o.MaxConcurrency)
		d.positiveSize(p+".max_response_header_size", o.MaxResponseHeaderSize)
		if o.MaxEarlyHints < 0 || o.MaxEarlyHints > 100 {
			d.problem(p+".max_early_hints", "must be in [0, 100], got %d", o.MaxEarlyHints)
		}
	}
}

func (d *decoder) validateRoutes(c *Config) {
	if len(c.Routes) == 0 {
		d.problem("routes", "at least one route is required")
		return
	}
	names := make(map[string]int, len(c.Routes))
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		switch j, dup := names[r.Name]; {
		case r.Name == "":
			d.problem(p+".name", "required: a name for metrics and cache keys, matching [a-z0-9_-]+")
		case !nameRE.MatchString(r.Name):
			d.problem(p+".name", "route name %q must match [a-z0-9_-]+", r.Name)
		case dup:
			d.problem(p+".name", "duplicate route name %q (also routes[%d])", r.Name, j)
		default:
			names[r.Name] = i
		}
		if len(r.Hosts) == 0 {
			d.problem(p+".hosts", "at least one host is required (\"*\" matches any host)")
		}
		for k, h := range r.Hosts {
			if msg := checkHost(h); msg != "" {
				d.problem(fmt.Sprintf("%s.hosts[%d]", p, k), "%s", msg)
			}
		}
		switch {
		case !strings.HasPrefix(r.PathPrefix, "/"):
			d.problem(p+".path_prefix", "must start with \"/\", got %q", r.PathPrefix)
		case strings.ContainsAny(r.PathPrefix, "?#"):
			d.problem(p+".path_prefix", "must be a path, without query or fragment, got %q", r.PathPrefix)
		}
		switch {
		case r.Origin == "":
			d.problem(p+".origin", "required: the name of an entry in origins")
		case c.Origins[r.Origin] == nil:
			d.problem(p+".origin", "unknown origin %q%s", r.Origin, known(c.Origins))
		}
		d.validateRouteCache(p+".cache", &r.Cache)
		d.validateCompress(p, &r.Compress, r.Cache.AcceptEncoding)
	}
	d.checkShadowing(c.Routes)
}

func (d *decoder) validateRouteCache(p string, rc *RouteCache) {
	d.nonNegative(p+".default_ttl", rc.DefaultTTL)
	d.nonNegative(p+".stale_while_revalidate", rc.StaleWhileRevalidate)
	d.nonNegative(p+".stale_if_error", rc.StaleIfError)
	d.nonNegative(p+".max_stale", rc.MaxStale)
	for i, q := range rc.IgnoreQuery {
		if q == "" {
			d.problem(fmt.Sprintf("%s.ignore_query[%d]", p, i), "query parameter name must not be empty")
		}
	}
	if !isToken(rc.SurrogateKeyHeader) {
		d.problem(p+".surrogate_key_header", "%q is not a valid header name", rc.SurrogateKeyHeader)
	}
	for i, h := range rc.KeyHeaders {
		if !isToken(h) {
			d.problem(fmt.Sprintf("%s.key_headers[%d]", p, i), "%q is not a valid header name", h)
		}
	}
	for i, h := range rc.Targeted {
		if !isToken(h) {
			d.problem(fmt.Sprintf("%s.targeted[%d]", p, i), "%q is not a valid header name", h)
		} else if strings.EqualFold(h, "Cache-Control") {
			d.problem(fmt.Sprintf("%s.targeted[%d]", p, i), "Cache-Control is not a targeted field")
		}
	}
	for i, c := range rc.AcceptEncoding {
		if c == "*" && len(rc.AcceptEncoding) == 1 {
			continue
		}
		if !isToken(c) || c == "*" || strings.EqualFold(c, "identity") {
			d.problem(fmt.Sprintf("%s.accept_encoding[%d]", p, i), "%q is not a content coding (identity is the implicit last choice)", c)
		}
	}
}

// checkShadowing reports routes that can never match. Routes match in
// order, so route j is dead when every host it lists is already matched by
// an earlier route whose path prefix covers j's: any request for j would
// be taken by that earlier route. A "*" host of j is covered only by an
// earlier "*". A prefix covers another only at a segment boundary ("/api"
// covers "/api" and "/api/v2", not "/apiv2"), so the check holds whether
// routing matches prefixes by bytes or by segments.
func (d *decoder) checkShadowing(routes []*Route) {
	hosts := make([]map[string]bool, len(routes)) // route hosts as sets
	for i, r := range routes {
		hosts[i] = make(map[string]bool, len(r.Hosts))
		for _, h := range r.Hosts {
			hosts[i][h] = true
		}
	}
	for j, r := range routes {
		if len(r.Hosts) == 0 || !strings.HasPrefix(r.PathPrefix, "/") {
			continue
		}
		var earlier []int // routes before j whose prefix covers j's
		for i := range j {
			if coversPrefix(routes[i].PathPrefix, r.PathPrefix) {
				earlier = append(earlier, i)
			}
		}
		var by []int // the routes that take j's requests
		dead := len(earlier) > 0
		for h := range hosts[j] {
			k := slices.IndexFunc(earlier, func(i int) bool { return hosts[i]["*"] || hosts[i][h] })
			if k < 0 {
				dead = false
				break
			}
			by = append(by, earlier[k])
		}
		if dead {
			slices.Sort(by)
			var names []string
			for _, i := range slices.Compact(by) {
				names = append(names, fmt.Sprintf("routes[%d] (%q)", i, routes[i].Name))
			}
			d.problem(fmt.Sprintf("routes[%d]", j), "route %q can never match: every request for its hosts and path prefix %q is taken first by %s",
				r.Name, r.PathPrefix, strings.Join(names, ", "))
		}
	}
}

// ParseTrustedProxy reads one server.trusted_proxies entry: a CIDR
// ("10.0.0.0/8", "2001:db8::/32") or a bare IP, which stands for itself
// (/32 or /128). IPv4-mapped IPv6 forms are read as IPv4, as client
// addresses are.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR: %w", s, err)
		}
		if p.Addr().Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped prefix shorter than /96", s)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), bits)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: a zone is not allowed", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// coversPrefix reports whether every path under prefix b is also under a,
// at a segment boundary.
func coversPrefix(a, b string) bool {
	if !strings.HasPrefix(b, a) || !strings.HasPrefix(a, "/") {
		return false
	}
	return len(a) == len(b) || strings.HasSuffix(a, "/") || b[len(a)] == '/'
}

// checkListen checks a listener address: host:port with a numeric port (0
// picks a free port); the host may be empty for all interfaces.
func (d *decoder) checkListen(path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case strings.Contains(addr, "://"):
		d.problem(path, "must be host:port without a scheme, got %q", addr)
	case err != nil:
		d.problem(path, "must be host:port, e.g. \"127.0.0.1:8080\", got %q", addr)
	case strings.ContainsAny(host, " /"):
		d.problem(path, "invalid host %q", host)
	case !validPort(port, 0):
		d.problem(path, "port %q must be a number from 0 to 65535", port)
	}
}

// checkServer checks an origin address; it returns "" when s is fine.
// StripScheme returns an origin server address without its http:// or
// https:// prefix.
func StripScheme(s string) string {
	if r, ok := strings.CutPrefix(s, "https://"); ok {
		return r
	}
	if r, ok := strings.CutPrefix(s, "http://"); ok {
		return r
	}
	return s
}

// IsHTTPS reports whether an origin server address asks for HTTPS.
func IsHTTPS(s string) bool { return strings.HasPrefix(s, "https://") }

func checkServer(s string) string {
	if strings.Contains(s, "://") {
		return fmt.Sprintf("must be host:port, http://host:port or https://host:port, got %q", s)
	}
	host, port, err := net.SplitHostPort(s)
	switch {
	case err != nil:
		return fmt.Sprintf("must be host:port, e.g. \"10.0.0.5:8080\", got %q", s)
	case host == "":
		return fmt.Sprintf("host is empty in %q", s)
	case strings.ContainsAny(host, " /"):
		return fmt.Sprintf("invalid host %q", host)
	case !validPort(port, 1):
		return fmt.Sprintf("port %q must be a number from 1 to 65535", port)
	}
	return ""
}

func validPort(port string, lowest int) bool {
	if port == "" || strings.TrimLeft(port, "0123456789") != "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= lowest && n <= 65535
}

// checkHost checks a route host (already lower-cased); "" means fine.
func checkHost(h string) string {
	switch {
	case h == "*":
		return ""
	case h == "":
		return "host must not be empty"
	case strings.Contains(h, "://") || strings.Contains(h, "/"):
		return fmt.Sprintf("host %q must be a bare host name, without scheme or path", h)
	case strings.Contains(h, "*"):
		return fmt.Sprintf("host %q: the only wildcard is a lone \"*\" (any host)", h)
	case strings.HasPrefix(h, "["):
		ip := net.ParseIP(strings.TrimSuffix(h[1:], "]"))
		if !strings.HasSuffix(h, "]") || ip == nil || ip.To4() != nil {
			return fmt.Sprintf("host %q: write an IPv6 address as [addr], without port", h)
		}
		return ""
	case strings.Contains(h, ":"):
		return fmt.Sprintf("host %q must not include a port", h)
	case len(h) > 253:
		return fmt.Sprintf("host %q is longer than 253 bytes", h)
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" {
			return fmt.Sprintf("host %q has an empty label", h)
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("host %q: invalid character %q (internationalised names must be written in punycode)", h, c)
			}
		}
	}
	return ""
}

// isToken reports whether s is an RFC 9110 token, the syntax of header names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (d *decoder) oneOf(path, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		d.problem(path, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

// within reports whether path p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	return err == nil && (rel == "." || rel != ".." && !strings.HasPrefix(rel, "../"))
}

func (d *decoder) positive(path string, v time.Duration) {
	if v <= 0 {
		d.problem(path, "must be positive, got %v", v)
	}
}

func (d *decoder) nonNegative(path string, v time.Duration) {
	if v < 0 {
		d.problem(path, "must not be negative, got %v", v)
	}
}

// atLeastOne checks a count: connections, waiters, fetches.
func (d *decoder) atLeastOne(path string, v int) {
	if v < 1 {
		d.problem(path, "must be at least 1, got %d", v)
	}
}

func (d *decoder) positiveSize(path string, v Size) {
	if v <= 0 {
		d.problem(path, "must be positive, got %v", v)
	}
}

// known lists the defined origin names for an "unknown origin" message.
func known(origins map[string]*Origin) string {
	if len(origins) == 0 {
		return " (no origins are defined)"
	}
	return " (defined: " + strings.Join(sortedKeys(origins), ", ") + ")"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
