package cache

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Namespaces holds the namespace versions (a route's, a tenant's) that
// every cache key carries: bumping one makes every older key unreachable
// at once (proxy's purge.go). Reads are lock-free snapshots.
type Namespaces struct {
	mu      sync.Mutex // serialises bumps
	routes  atomic.Pointer[map[string]uint16]
	tenants atomic.Pointer[map[string]uint16]
}

func newNamespaces() *Namespaces {
	n := &Namespaces{}
	r, t := map[string]uint16{}, map[string]uint16{}
	n.routes.Store(&r)
	n.tenants.Store(&t)
	return n
}

// Version returns the key namespace for a route and, when scoped, a
// tenant identity. It does not allocate.
func (n *Namespaces) Version(route string, scoped bool, tid []byte) uint32 {
	v := uint32((*n.routes.Load())[route]) << 16
	if scoped {
		v |= uint32((*n.tenants.Load())[string(tid)])
	}
	return v
}

// BumpRoute raises a route's namespace version and returns the new one
// (0 when it wrapped).
func (n *Namespaces) BumpRoute(name string) uint16 { return n.bump(&n.routes, name) }

// BumpTenant raises a tenant's namespace version and returns the new one
// (0 when it wrapped).
func (n *Namespaces) BumpTenant(name string) uint16 { return n.bump(&n.tenants, name) }

func (n *Namespaces) bump(which *atomic.Pointer[map[string]uint16], name string) uint16 {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := *which.Load()
	next := make(map[string]uint16, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name]++
	which.Store(&next)
	return next[name]
}

type nsFile struct {
	Routes  map[string]uint16 `json:"routes"`
	Tenants map[string]uint16 `json:"tenants"`
}

func (n *Namespaces) save(path string) error {
	b, err := json.Marshal(nsFile{Routes: *n.routes.Load(), Tenants: *n.tenants.Load()})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("cache: save namespaces: %w", err)
	}
	return os.Rename(tmp, path)
}

func (n *Namespaces) load(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f nsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("cache: namespaces %s: %w", path, err)
	}
	if f.Routes != nil {
		n.routes.Store(&f.Routes)
	}
	if f.Tenants != nil {
		n.tenants.Store(&f.Tenants)
	}
	return nil
}
