// Package config holds shield's YAML schema: strict decoding (unknown keys are
// errors), ${ENV} expansion in string values, defaults, and validation whose
// errors name the file, line and field.
//
// The types here are plain data: durations are time.Duration, sizes are
// Size (bytes). Packages that consume configuration (proxy, routing,
// admission, breaker) turn these values into their runtime form once, at
// start or reload; nothing here is read on the request path.
//
// Load and Parse return a Config only if the whole file is valid, with
// every default filled in explicitly, so consumers never re-apply
// defaults and yaml.Marshal of the result parses back to the same value.
// Decisions beyond the field docs:
//
//   - Problems are reported in two complete phases: first the shape (YAML
//     syntax, unknown or duplicate keys, wrong types, unset variables),
//     then, if the shape is right, the values. Each problem is an *Error
//     with file, line, column and dotted field path ("routes[0].origin").
//   - A key that is present wins over the default even when zero: the zero
//     either means something (cache.hit_for_miss: 0 disables it,
//     cache.max_stale: 0 serves nothing stale) or is rejected, never
//     silently replaced. So cache.wait_timeout: 0 is an error; leave it out
//     to get the longest origin timeout. A null value ("key:" or "key: ~")
//     counts as absent, and an empty list or mapping as nil.
//   - ${NAME} and ${NAME:-default} are expanded in string values only
//     (never in keys, never in the raw text), after YAML parsing, so a
//     secret holding ':' or '#' cannot change the structure. As in the
//     shell, the default applies when NAME is unset or empty; $${ is a
//     literal ${. References in typed settings work too
//     (max_concurrency: ${CONC}).
//   - Scalars are strict: booleans are true or false (not yes/on),
//     integers are decimal, durations need a unit except a bare 0, sizes
//     are decimal digits with a case-sensitive unit.
//   - Anchors, aliases and merge keys (<<: *base) are supported; the work
//     they can cause is bounded by the input size.
//   - Route hosts are lower-cased. A route is rejected as dead when every
//     one of its hosts is matched by an earlier route whose path prefix
//     covers its own at a segment boundary ("/api" covers "/api/v2", not
//     "/apiv2"), so the check is right for byte and segment matching alike.
//   - Listener ports may be 0 (tests); origin ports may not. admin.listen
//     must differ from listen.
package config

import "time"

// Config is the whole file.
type Config struct {
	// Listen is the public listener address, e.g. "127.0.0.1:8080". Required.
	Listen string `yaml:"listen"`
	// Admin is the admin listener (/metrics, /healthz, /readyz).
	Admin Admin `yaml:"admin"`
	// Log chooses the log level and format.
	Log Log `yaml:"log"`
	// Server holds the public listener's limits and timeouts.
	Server Server `yaml:"server"`
	// Cache sizes the store and sets cache-wide behaviour.
	Cache Cache `yaml:"cache"`
	// Origins by name. At least one is required.
	Origins map[string]*Origin `yaml:"origins"`
	// Routes are matched in order: the first route whose host and path
	// prefix match a request wins. At least one is required.
	Routes []*Route `yaml:"routes"`
	// Tenants configures per-tenant admission (rate and concurrency
	// limits, origin share). Absent: no admission control, every request
	// is admitted.
	Tenants *Tenants `yaml:"tenants"`
	// Cluster makes this node one of several sharing one cache. Absent:
	// a single node, exactly as without a cluster.
	Cluster *Cluster `yaml:"cluster"`
}

// Cluster configures membership and peer forwarding (docs/architecture.md §8).
type Cluster struct {
	// NodeID names this node; unique in the cluster. Default: the host
	// name.
	NodeID string `yaml:"node_id"`
	// Listen is the peer listener (host:port). It serves only other
	// shield nodes that present Secret, never the public. Required.
	Listen string `yaml:"listen"`
	// Advertise is the address peers use to reach Listen. Default Listen.
	Advertise string `yaml:"advertise"`
	// Secret authenticates peer requests (compared in constant time).
	// Required; keep it out of the file with ${VAR}.
	Secret string `yaml:"secret"`
	// Weight is this node's share of keys relative to others. Default 1.
	Weight float64 `yaml:"weight"`
	// Overlap is how long the previous generation stays accepted after
	// membership changes. Default 10s.
	Overlap time.Duration `yaml:"overlap"`
	// PeerTimeout bounds one forwarded request (the owner may be fetching
	// from the origin). Default: the longest origin timeout plus 1s.
	PeerTimeout time.Duration `yaml:"peer_timeout"`
	// Transport is how forwarded GET and HEAD requests reach their
	// owner: "http" (one HTTP/1.1 exchange per connection at a time) or
	// "mux" (persistent multiplexed connections; peers that do not speak
	// it are reached over HTTP). The peer listener accepts both.
	// Default "mux".
	Transport string `yaml:"transport"`
	// HotKeyRate: an edge node that forwards one key at least this many
	// times per second keeps a near copy of the owner's answer, so one
	// key cannot saturate its owner. Default 500; 0 disables.
	HotKeyRate float64 `yaml:"hot_key_rate"`
	// HotKeyMaxAge bounds a near copy's freshness. Default 1s, at most 10s.
	HotKeyMaxAge time.Duration `yaml:"hot_key_max_age"`
	// HandoffKeys is how many of its hottest entries a node pushes to
	// their new owners when it leaves gracefully. Default 1000; 0 disables.
	HandoffKeys int `yaml:"handoff_keys"`
	// UsageInterval is how often nodes exchange per-tenant usage so each
	// node's share of a tenant's rate and burst follows where its traffic
	// lands. Default 1s, in [100ms, 10s]; 0 turns the exchange off (every
	// node enforces rate/n).
	UsageInterval time.Duration `yaml:"usage_interval"`
	// Membership is "static" (default: Peers, or just this node) or
	// "consul".
	Membership string `yaml:"membership"`
	// Peers is the static peer list, this node included.
	Peers []*ClusterPeer `yaml:"peers"`
	// Consul configures Consul membership.
	Consul ClusterConsul `yaml:"consul"`
	// TLS, when set, makes peers talk mutual TLS (in addition to Secret).
	TLS *PeerTLS `yaml:"tls"`
}

// ClusterPeer is one node of a static cluster.
type ClusterPeer struct {
	ID     string  `yaml:"id"`
	Addr   string  `yaml:"addr"`
	Weight float64 `yaml:"weight"`
}

// ClusterConsul configures Consul membership.
type ClusterConsul struct {
	// Address of the local Consul agent's HTTP API. Default 127.0.0.1:8500.
	Address string `yaml:"address"`
	// Service name every node registers and watches. Default "shield".
	Service string `yaml:"service"`
	// Token is the ACL token (use ${VAR}).
	Token string `yaml:"token"`
	// CheckInterval of the HTTP check on the admin /healthz. Default 5s.
	CheckInterval time.Duration `yaml:"check_interval"`
	// DeregisterAfter removes a node whose check stays critical. Default 1m.
	DeregisterAfter time.Duration `yaml:"deregister_after"`
}

// Tenants identifies tenants and sets their limits. Rate and burst are
// fleet-wide: each node enforces its share of them, rate/N to start with,
// then following where the tenant's traffic lands (cluster.usage_interval);
// max_concurrency is per node.
type Tenants struct {
	// Identify says where a request's tenant comes from. Exactly one of
	// header or api_keys. A route's `tenant:` overrides it.
	Identify TenantIdentify `yaml:"identify"`
	// Default is the class of requests with no or an unknown tenant.
	// Required.
	Default TenantLimits `yaml:"default"`
	// Classes are the named tenants. A name is matched exactly
	// (case-sensitive); "default" is reserved.
	Classes map[string]*TenantLimits `yaml:"classes"`
}

// TenantIdentify names the request field carrying the tenant.
type TenantIdentify struct {
	// Header is a request header whose value is the tenant name.
	Header string `yaml:"header"`
	// APIKeys maps API keys (in a request header) to tenant names; an
	// unknown key is the default class.
	APIKeys *APIKeys `yaml:"api_keys"`
}

// APIKeys is a header and the keys it may carry.
type APIKeys struct {
	Header string            `yaml:"header"`
	Keys   map[string]string `yaml:"keys"` // key → tenant name; use ${VAR} to keep keys out of the file
}

// TenantLimits are one class's limits.
type TenantLimits struct {
	// Rate is requests per second, fleet-wide. Required, > 0.
	Rate float64 `yaml:"rate"`
	// Burst is the bucket size. Default ceil(rate).
	Burst int `yaml:"burst"`
	// MaxConcurrency bounds in-flight requests per node. Required, ≥ 1.
	MaxConcurrency int `yaml:"max_concurrency"`
	// OriginShare is the fraction (0, 1] of each origin's concurrency
	// budget this tenant's misses may hold. Default 1.
	OriginShare float64 `yaml:"origin_share"`
}

// Admin is the admin listener. It serves operators only: keep it on
// loopback or a management network.
type Admin struct {
	// Listen defaults to "127.0.0.1:9091". "off" disables the listener.
	Listen string `yaml:"listen"`
}

// Log configures log/slog.
type Log struct {
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Format is text (default) or json.
	Format string `yaml:"format"`
	// Access configures the access log (off by default).
	Access AccessLog `yaml:"access"`
}

// AccessLog is a sampled request log. Each logged request costs a few
// microseconds; sample on busy nodes.
type AccessLog struct {
	// Enabled turns it on.
	Enabled bool `yaml:"enabled"`
	// Sample is the fraction of requests logged, in (0, 1]. Default 1
	// when enabled; sampling is deterministic (every Nth request).
	Sample float64 `yaml:"sample"`
}

// Server holds the public listener's limits. Every value has a bounded
// default; zero or negative values are rejected rather than meaning
// "unlimited".
type Server struct {
	// ReadTimeout bounds reading one request (headers and body). Default 10s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one response. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout bounds keep-alive idle time. Default 60s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderSize bounds the request header block. Default 16KiB.
	MaxHeaderSize Size `yaml:"max_header_size"`
	// MaxBodySize bounds request bodies. Default 4MiB.
	MaxBodySize Size `yaml:"max_body_size"`
	// MaxConnections bounds the public listener's open connections
	// (HTTP/1.1 and HTTP/2 together); past it new ones are refused. A
	// reload moves it. Default 10000.
	MaxConnections int `yaml:"max_connections"`
	// DrainTimeout bounds the wait for in-flight requests on SIGTERM.
	// Default 15s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// TLS, when set, makes the public listener speak HTTPS only. The
	// certificate is re-read on SIGHUP and POST /reload; connections in
	// progress keep theirs.
	TLS *ListenerTLS `yaml:"tls"`
	// HTTP2 offers h2 besides http/1.1 in the TLS handshake (ALPN).
	// Default true; without tls it changes nothing (see H2C).
	HTTP2 bool `yaml:"http2"`
	// H2C also accepts cleartext HTTP/2 with prior knowledge on a plain
	// listener, for edges on a trusted network. Default false.
	H2C bool `yaml:"h2c"`
	// HTTP2Limits bounds each HTTP/2 connection (config/http2.go).
	HTTP2Limits HTTP2Limits `yaml:"http2_limits"`
	// TrustedProxies are the clients (CIDRs or bare IPs) whose
	// X-Forwarded-For, -Proto, -Host and -Port shield extends instead of
	// replacing: a load balancer in front of shield. Absent: no client is
	// trusted, and every Forwarded and X-Forwarded-* field a client sends
	// is replaced or removed (ParseTrustedProxy reads one entry).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// HeapFloor is the Go heap size below which the garbage collector
	// does not run (package heapfloor): shield's live heap is small
	// (entries live outside it), so GOGC alone collects tens of times a
	// second under HTTP/2 load. Default: a quarter of cache.size, at
	// most 64MiB; 0 turns it off; ignored when GOGC is set.
	HeapFloor Size `yaml:"heap_floor"`
	// AdaptiveProcs lets shield run Go code on fewer CPUs than it has
	// while fewer serve as many requests (package procs): idle
	// processors cost wake-ups. Default true; ignored when GOMAXPROCS is
	// set.
	AdaptiveProcs bool `yaml:"adaptive_procs"`
}

// ListenerTLS is the public listener's certificate.
type ListenerTLS struct {
	// CertFile and KeyFile are PEM files (the chain, leaf first, and its
	// key). Both required.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string `yaml:"min_version"`
}

// OriginTLS configures HTTPS to an origin's https:// servers.
type OriginTLS struct {
	// ServerName is the name sent in SNI and verified in the server's
	// certificate. Default: host_header if set, else the server's host.
	ServerName string `yaml:"server_name"`
	// CAFile is a PEM bundle of the CAs trusted for this origin. Default:
	// the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate, for origins that
	// require one. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// InsecureSkipVerify accepts any certificate. Only for tests; shield
	// logs a warning at every load.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// HealthCheck configures active health checks of an origin's servers.
type HealthCheck struct {
	// Path is requested with GET on every server; a 2xx or 3xx answer is
	// healthy. Required, starts with "/".
	Path string `yaml:"path"`
	// Interval between checks of one server. Default 5s.
	Interval time.Duration `yaml:"interval"`
	// Timeout of one check. Default 1s; less than Interval.
	Timeout time.Duration `yaml:"timeout"`
	// Healthy good checks in a row bring a down server back. Default 2.
	Healthy int `yaml:"healthy"`
	// Unhealthy failed checks in a row mark a server down. Default 3.
	Unhealthy int `yaml:"unhealthy"`
}

// PeerTLS makes the peer listener and peer clients speak mutual TLS.
type PeerTLS struct {
	// CertFile and KeyFile are this node's certificate, presented both as
	// a server and as a client. Both required.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile is the PEM bundle that signs every node's certificate;
	// peers whose certificate it does not verify are refused. Required.
	CAFile string `yaml:"ca_file"`
}

// Cache sizes the shared store.
type Cache struct {
	// Size is the fastcache capacity. Default 512MiB; minimum 32MiB
	// (fastcache allocates 512 buckets of 64KiB chunks).
	Size Size `yaml:"size"`
	// MaxObjectSize: responses larger than this stream through uncached.
	// Default 8MiB; at most Size/8. With a disk tier: default 1GiB or
	// Disk.Size/4 when smaller, and at most Disk.Size/4.
	MaxObjectSize Size `yaml:"max_object_size"`
	// Path, when set, is where the cache is saved on clean shutdown and
	// loaded from at start. A missing or corrupt file starts empty.
	Path string `yaml:"path"`
	// HitForMiss is how long a key whose response was not storable skips
	// coalescing and goes straight to the origin. Default 10s; 0 disables.
	HitForMiss time.Duration `yaml:"hit_for_miss"`
	// MaxWaiters bounds the requests waiting on one in-flight fetch; the
	// rest fetch on their own. Default 1024.
	MaxWaiters int `yaml:"max_waiters"`
	// WaitTimeout bounds how long a waiter waits for the fetch it joined
	// before it answers 504. Default: the longest origin timeout, so a
	// waiter never gives up before the fetch it joined can.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// Disk, when set, adds a disk tier for large entries (restart only).
	Disk *CacheDisk `yaml:"disk"`
}

// CacheDisk configures the cache's disk tier: entries of 64KiB and more
// are kept there, one file each, and survive restarts (proxy/cache's
// disk.go). It requires Cache.Path: the invalidation table saved beside
// the snapshot is what proves disk entries un-purged after a restart.
type CacheDisk struct {
	// Path is the tier's directory, created when missing. Required.
	Path string `yaml:"path"`
	// Size bounds the bytes its files take (least recently used files
	// are removed beyond it). Required; at least 64MiB.
	Size Size `yaml:"size"`
}

// Origin is one upstream service.
type Origin struct {
	// Servers are host:port addresses, optionally prefixed by http:// (the
	// default) or https://. Required.
	Servers []string `yaml:"servers"`
	// HostHeader is the Host sent upstream. Default: the client's Host.
	HostHeader string `yaml:"host_header"`
	// TLS configures HTTPS to https:// servers.
	TLS OriginTLS `yaml:"tls"`
	// IdleTimeout closes pooled connections idle longer than this. It
	// should be below the origin's own keep-alive timeout (Node 5s, nginx
	// 75s, Go 90s+); a connection the origin closed first costs one
	// immediate retry on a new connection. Default 4s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// HealthCheck, when set, probes every server; absent: passive
	// health only.
	HealthCheck *HealthCheck `yaml:"health_check"`
	// Timeout bounds one fetch (connect, write, read of the response).
	// Default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// ConnectTimeout bounds the TCP dial. Default 1s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxConcurrency bounds in-flight fetches to this origin per node.
	// Default 256.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxResponseHeaderSize bounds a response header block. Default 64KiB.
	MaxResponseHeaderSize Size `yaml:"max_response_header_size"`
	// MaxRate bounds fetches per second to this origin per node. Default
	// 0: no rate limit (max_concurrency still applies).
	MaxRate float64 `yaml:"max_rate"`
	// SlowStart: after the breaker closes, the concurrency budget ramps
	// from 10% to 100% over this long. Default 30s; 0 disables.
	SlowStart time.Duration `yaml:"slow_start"`
	// MaxEarlyHints bounds the 103 Early Hints relayed to a client per
	// answer; later ones, and every other 1xx, are read and dropped.
	// Default 3; 0 relays none; at most 100.
	MaxEarlyHints int `yaml:"max_early_hints"`
	// QueueTimeout is how long a fetch waits for a slot of the
	// concurrency budget before it is refused (503, or a stale copy where
	// stale-if-error allows). Default 50ms; 0 refuses at once.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// ShuffleShard, when > 0, sends each tenant's fetches to its own
	// stable subset of this many servers (rendezvous hash of the tenant
	// class), health and ejection applying within it, so one tenant's
	// traffic that breaks servers breaks only its shard. Default 0: every
	// tenant uses all servers. At most len(Servers).
	ShuffleShard int `yaml:"shuffle_shard"`
	// Breaker is the origin's circuit breaker.
	Breaker Breaker `yaml:"breaker"`
}

// Breaker configures an origin's circuit breaker. Zero values take the
// breaker package's defaults (5 consecutive failures; or a failure ratio
// of 0.5 over at least 20 requests in a 10s interval; open for 5s; 3
// half-open probes).
type Breaker struct {
	// Disabled turns the breaker off (never recommended in production).
	Disabled            bool          `yaml:"disabled"`
	ConsecutiveFailures int           `yaml:"consecutive_failures"`
	FailureRatio        float64       `yaml:"failure_ratio"`
	MinRequests         int           `yaml:"min_requests"`
	Interval            time.Duration `yaml:"interval"`
	OpenFor             time.Duration `yaml:"open_for"`
	HalfOpenProbes      int           `yaml:"half_open_probes"`
	// TripOn429 counts origin 429 answers as failures. Default false: a
	// 429 is usually about one client, not the origin's health.
	TripOn429 bool `yaml:"trip_on_429"`
	// FailureStatuses are the origin answer statuses the breaker (and
	// passive server ejection) count as failures, besides connection
	// errors and timeouts. Default [502, 503, 504]: an application's 500
	// on one path is not the origin's health. Codes in 100–599; [] counts
	// none.
	FailureStatuses []int `yaml:"failure_statuses"`
}

// Route maps requests to an origin and a cache policy.
type Route struct {
	// Name identifies the route in metrics and cache keys. Required,
	// unique, [a-z0-9_-]+.
	Name string `yaml:"name"`
	// Hosts are exact host names (case-insensitive, without port), or "*"
	// for any host. Required.
	Hosts []string `yaml:"hosts"`
	// PathPrefix must start with "/". Default "/".
	PathPrefix string `yaml:"path_prefix"`
	// Origin names an entry of Config.Origins. Required.
	Origin string `yaml:"origin"`
	// Cache is the route's cache policy.
	Cache RouteCache `yaml:"cache"`
	// Compress makes shield compress the origin's uncompressed answers
	// itself (once, when it stores them) and negotiate the coding with
	// each client. Off by default.
	Compress RouteCompress `yaml:"compress"`
	// Tenant, when set, fixes the tenant of every request on this route
	// (a class name or "default"), whatever the request carries.
	Tenant string `yaml:"tenant"`
	// Cost is the number of tokens one request on this route takes from
	// its tenant's bucket (and counts in the fleet's usage exchange), for
	// routes whose requests are dearer than others. Default 1, at most
	// 1000000.
	Cost int `yaml:"cost"`
	// Priority orders this route's origin fetches when the origin's
	// concurrency budget is short: low, normal (default) or high
	// (admission.Priority has the rule).
	Priority string `yaml:"priority"`
}

// RouteCache is a route's cache policy.
type RouteCache struct {
	// Disabled passes every request through uncached.
	Disabled bool `yaml:"disabled"`
	// DefaultTTL is the freshness lifetime for storable responses that
	// carry no explicit freshness (no s-maxage, max-age or Expires). It
	// takes precedence over heuristic freshness. Default 0 (use the RFC
	// 9111 heuristic where allowed).
	DefaultTTL time.Duration `yaml:"default_ttl"`
	// IgnoreQuery lists query parameter names dropped from the cache key
	// (e.g. utm_source). Cache fetches drop them too (ForwardIgnoredQuery).
	IgnoreQuery []string `yaml:"ignore_query"`
	// ForwardIgnoredQuery sends the IgnoreQuery parameters to the origin
	// on cache fetches. Default false: a cache fetch drops them, so an
	// origin that echoes one (utm_source) cannot let one request decide
	// the answer stored for everybody. Pass-through requests (never
	// stored) are forwarded as sent either way.
	ForwardIgnoredQuery bool `yaml:"forward_ignored_query"`
	// KeyHeaders lists request headers whose values are part of the key.
	KeyHeaders []string `yaml:"key_headers"`
	// StaleWhileRevalidate is the default RFC 5861 window when the origin
	// gives none. Default 0.
	StaleWhileRevalidate time.Duration `yaml:"stale_while_revalidate"`
	// StaleIfError is the default RFC 5861 window when the origin gives
	// none. Default 0.
	StaleIfError time.Duration `yaml:"stale_if_error"`
	// MaxStale caps both stale windows, whatever the origin says.
	// Default 1h.
	MaxStale time.Duration `yaml:"max_stale"`
	// AllowSetCookie stores responses that carry Set-Cookie (the header
	// is stored and replayed). Default false: such responses are never
	// stored or shared.
	AllowSetCookie bool `yaml:"allow_set_cookie"`
	// TenantScoped makes the tenant part of the cache key: one tenant
	// never reads another's entry. Needs `tenants:`.
	TenantScoped bool `yaml:"tenant_scoped"`
	// StaleOn429 serves a stale copy (inside stale-if-error) when the
	// origin answers 429, as for 5xx. Default false.
	StaleOn429 bool `yaml:"stale_on_429"`
	// SurrogateKeyHeader names the response field whose space-separated
	// values tag an entry for POST /purge?tag=. Default "Surrogate-Key".
	SurrogateKeyHeader string `yaml:"surrogate_key_header"`
	// ExposeSurrogateKeys passes that field on to clients. Default false:
	// tags are the origin's business, not the client's.
	ExposeSurrogateKeys bool `yaml:"expose_surrogate_keys"`
	// Targeted lists the targeted cache-control fields (RFC 9213) shield
	// obeys, in priority order: the first one present in a response
	// replaces its Cache-Control and Expires for shield. Default
	// [CDN-Cache-Control]; [] obeys Cache-Control only.
	Targeted []string `yaml:"targeted"`
	// ForwardTargeted passes the Targeted fields on to clients. Default
	// false: they are addressed to shield and removed.
	ForwardTargeted bool `yaml:"forward_targeted"`
	// AcceptEncoding is the content codings, in preference order, that
	// a request's Accept-Encoding is reduced to before keying and
	// forwarding: the first one the client accepts, else identity, so a
	// URL has at most one variant per coding. Default [br, gzip]; [] or
	// ["*"] forwards Accept-Encoding as the client sent it.
	AcceptEncoding []string `yaml:"accept_encoding"`
	// TTLJitter shortens each stored entry's freshness lifetime by a
	// random fraction in [0, TTLJitter), so entries stored together do
	// not expire together (a synchronized miss storm). Never lengthens
	// what the origin allowed. Default 0, at most 0.5.
	TTLJitter float64 `yaml:"ttl_jitter"`
	// EagerRefresh, a fraction of the freshness lifetime in (0, 1): a hit
	// on an entry at least this far into its lifetime starts one
	// background refresh (coalesced like stale-while-revalidate's), so a
	// steadily requested key is never a miss or stale. Default 0: off.
	EagerRefresh float64 `yaml:"eager_refresh"`
}

// RouteCompress is a route's compression at the shield.
type RouteCompress struct {
	// Codings are the content codings shield produces, in preference
	// order for clients that weigh them equally: br, gzip. Default []
	// (off). When set, cache.accept_encoding does not apply: the origin
	// is asked for identity and shield negotiates with clients itself.
	Codings []string `yaml:"codings"`
	// Types are the compressible media types: "type/subtype",
	// "type/*", or "+suffix" (a structured syntax suffix such as +json).
	Types []string `yaml:"types"`
	// MinSize is the smallest body compressed: below it the framing
	// costs more than it saves. Default 1KiB.
	MinSize Size `yaml:"min_size"`
}

// DefaultCompressTypes are the media types compressed when
// routes[].compress.types is absent: text and the usual text-based
// structured formats.
var DefaultCompressTypes = []string{"text/*", "application/json", "+json", "application/javascript", "application/xml", "+xml", "image/svg+xml"}

// Size is a byte count. In YAML it is an integer or a string with a unit:
// B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
type Size int64
