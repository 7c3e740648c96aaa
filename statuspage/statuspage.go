// Package statuspage renders a shield node's status for operators: the
// admin listener's GET / (HTML) and GET /status.json. It holds the data
// model and the template only; package proxy fills a Status from its own
// state at request time.
//
// The page is server-rendered with html/template (every value escaped),
// has no JavaScript and no inline style — its one stylesheet is served by
// the same listener (CSS, /status.css), so the admin listener's
// Content-Security-Policy (default-src 'self') lets it render — and
// refreshes itself with <meta http-equiv=refresh>, so it works from a
// terminal browser or an SSH tunnel as well as from a desktop.
package statuspage

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"time"
)

// Status is everything the page shows. Its JSON form is /status.json.
type Status struct {
	Node    string        `json:"node"`
	Version string        `json:"version,omitempty"`
	Time    time.Time     `json:"time"`
	Uptime  time.Duration `json:"uptime_ns"`
	Refresh int           `json:"-"`
	Cluster *Cluster      `json:"cluster,omitempty"`
	Routes  []Route       `json:"routes"`
	Origins []Origin      `json:"origins"`
	Tenants *Tenants      `json:"tenants,omitempty"`
	Keys    Keys          `json:"keys"`
	Events  []Event       `json:"events"`
	Cache   Cache         `json:"cache"`
}

// Cluster is the peer set as this node sees it.
type Cluster struct {
	Generation      string `json:"generation"`
	Membership      string `json:"membership"`
	ConsulReachable bool   `json:"consul_reachable"`
	// CacheOpen is false while the node is out of purge sync with a peer
	// (Consul membership): it then answers nothing from its cache.
	CacheOpen bool   `json:"cache_open"`
	Peers     []Peer `json:"peers"`
}

// Peer is one node of the current peer set.
type Peer struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	Self bool   `json:"self"`
	Up   bool   `json:"up"` // this node can reach it (its peer breaker is not open)
	// PurgeSynced: this node has the peer's purges and the peer has this
	// node in its view (always true with static membership).
	PurgeSynced bool    `json:"purge_synced"`
	Weight      float64 `json:"weight"`
	// Share is the fraction of keys it owns, measured over sample digests.
	Share float64 `json:"share"`
}

// Route is one route's counters since start.
type Route struct {
	Name     string            `json:"name"`
	Origin   string            `json:"origin"`
	Requests uint64            `json:"requests"`
	ByResult map[string]uint64 `json:"by_result"`
	// HitRatio is hits (fresh, collapsed, revalidated, stale) over
	// cacheable answers; -1 before any.
	HitRatio float64           `json:"hit_ratio"`
	Stale    map[string]uint64 `json:"stale_served"`
	// Bypass counts answers not served from cache by reason: bypass
	// (uncacheable request or hit-for-miss), pass (unsafe method),
	// rejected (admission), error, peer (forwarded to the key's owner).
	Bypass map[string]uint64 `json:"bypass"`
	// Priority is the route's priority (low, normal, high); Shed counts
	// its fetches the origin budget refused, by reason (the Cache-Status
	// detail: budget, origin-share, shed, queue-timeout).
	Priority string            `json:"priority"`
	Shed     map[string]uint64 `json:"shed"`
}

// Origin is one origin's protection state.
type Origin struct {
	Name      string   `json:"name"`
	Breaker   string   `json:"breaker"` // closed, half-open, open, disabled
	InFlight  int      `json:"in_flight"`
	Budget    int      `json:"budget"` // effective limit (slow start applied)
	Ramping   bool     `json:"ramping"`
	Fetches   uint64   `json:"fetches"`
	Errors    uint64   `json:"errors"` // 5xx, timeouts, connection errors
	ErrorRate float64  `json:"error_rate"`
	Servers   []Server `json:"servers"`
}

// Server is one server of an origin.
type Server struct {
	Name      string  `json:"name"`
	Health    string  `json:"health"` // up, ejected, down
	InFlight  int64   `json:"in_flight"`
	Requests  uint64  `json:"requests"`
	Errors    uint64  `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
}

// Tenants are the tenant classes, twice sorted.
type Tenants struct {
	ByRequests   []Tenant `json:"by_requests"`
	ByRejections []Tenant `json:"by_rejections"`
}

// Tenant is one tenant class's admission counters.
type Tenant struct {
	Name     string            `json:"name"`
	Admitted uint64            `json:"admitted"`
	Rejected uint64            `json:"rejected"`
	ByReason map[string]uint64 `json:"rejected_by_reason"`
	InFlight int               `json:"in_flight"`
	Rate     float64           `json:"rate"`
}

// Keys are the hottest keys on this node.
type Keys struct {
	Window string `json:"window"`
	Sample int    `json:"sample"`
	Top    []Key  `json:"top"`
}

// Key is one hot key (estimates from the sampled sketch).
type Key struct {
	Key      string `json:"key"`
	Requests uint64 `json:"requests"`
	Hits     uint64 `json:"hits"`
	Error    uint64 `json:"error"`
	NearCopy bool   `json:"near_copy"`
}

// Event is a recent purge or reload.
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // purge, reload, reload-failed
	Detail string    `json:"detail"`
}

// Cache is the store's occupancy and traffic: the memory tier's here
// (Entries, Bytes and MaxBytes name the memory tier, as they did before
// the disk tier), the disk tier's in Disk.
type Cache struct {
	Entries  uint64 `json:"entries"`
	Bytes    uint64 `json:"bytes"`
	MaxBytes uint64 `json:"max_bytes"`
	// Lookups and Misses are the memory tier's reads, and those that
	// found nothing there (an entry the disk tier holds is a memory miss).
	Lookups uint64 `json:"lookups"`
	Misses  uint64 `json:"misses"`
	Writes  uint64 `json:"writes"`
	// Corrupt counts memory values that failed their checks.
	Corrupt uint64    `json:"corrupt"`
	Disk    *DiskTier `json:"disk,omitempty"` // nil without cache.disk
}

// DiskTier is the disk tier's occupancy and counters since start
// (cache.disk; the shield_cache_disk_* metrics).
type DiskTier struct {
	Entries   int64  `json:"entries"`
	Bytes     int64  `json:"bytes"`
	MaxBytes  int64  `json:"max_bytes"`
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
	Writes    uint64 `json:"writes"`
	Evictions uint64 `json:"evictions"`
	Errors    uint64 `json:"errors"`
	Corrupt   uint64 `json:"corrupt_files"`
	// Degraded: writes go to memory only after a disk failure (for 30 s
	// at a time); DegradedTotal counts the times it happened.
	Degraded      bool   `json:"degraded"`
	DegradedTotal uint64 `json:"degraded_total"`
	// Dropped counts answers neither tier kept (the disk failed them and
	// they were too large for memory): served, not stored.
	Dropped uint64 `json:"dropped"`
}

//go:embed status.html status.css
var files embed.FS

// CSS is the page's stylesheet, served as /status.css.
var CSS = mustRead("status.css")

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return b
}

var page = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"pct": func(f float64) string {
		if f < 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*f)
	},
	"ago":  func(now, t time.Time) string { return now.Sub(t).Truncate(time.Second).String() },
	"dur":  func(d time.Duration) string { return d.Truncate(time.Second).String() },
	"mib":  func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) },
	"mibi": func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) },
	"sub":  func(a, b uint64) uint64 { return a - min(a, b) },
}).ParseFS(files, "status.html"))

// WriteHTML renders s as the status page.
func WriteHTML(w io.Writer, s *Status) error {
	if s.Refresh <= 0 {
		s.Refresh = 5
	}
	return page.Execute(w, s)
}

// WriteJSON writes s as indented JSON.
func WriteJSON(w io.Writer, s *Status) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
