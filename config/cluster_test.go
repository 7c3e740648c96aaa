package config

import (
	"strings"
	"testing"
	"time"
)

const clusterBase = `listen: 127.0.0.1:8080
origins:
  api: { servers: [127.0.0.1:9000], timeout: 3s }
routes:
  - { name: api, hosts: ["*"], origin: api }
cluster:
  node_id: a
  listen: 127.0.0.1:7946
  secret: ${SECRET}
  peers:
    - { id: a, addr: 127.0.0.1:7946 }
    - { id: b, addr: 127.0.0.1:7947, weight: 2 }
`

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestClusterParse(t *testing.T) {
	c, err := Parse("c.yaml", []byte(clusterBase), env(map[string]string{"SECRET": "0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Cluster
	if cl.Advertise != "127.0.0.1:7946" || cl.Weight != 1 || cl.Overlap != 10*time.Second ||
		cl.Membership != "static" || cl.PeerTimeout != 4*time.Second || cl.Peers[0].Weight != 1 || cl.Peers[1].Weight != 2 || cl.UsageInterval != time.Second {
		t.Errorf("cluster = %+v", cl)
	}
}

func TestClusterErrors(t *testing.T) {
	tests := []struct{ name, from, to, field string }{
		{"short secret", "${SECRET}", "short", "cluster.secret"},
		{"self missing", "{ id: a, addr", "{ id: c, addr", "cluster.peers"},
		{"bad membership", "peers:", "membership: etcd\n  peers:", "cluster.membership"},
		{"same as public", "listen: 127.0.0.1:7946", "listen: 127.0.0.1:8080", "cluster.listen"},
		{"dup peer", "{ id: b,", "{ id: a,", "cluster.peers[1].id"},
		{"usage interval too short", "peers:", "usage_interval: 10ms\n  peers:", "cluster.usage_interval"},
		{"usage interval too long", "peers:", "usage_interval: 1m\n  peers:", "cluster.usage_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(clusterBase, tt.from, tt.to, 1)
			_, err := Parse("c.yaml", []byte(src), env(map[string]string{"SECRET": "0123456789abcdef"}))
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Parse = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

// TestClusterUsageIntervalOff: 0 is accepted and turns the exchange off.
func TestClusterUsageIntervalOff(t *testing.T) {
	src := strings.Replace(clusterBase, "peers:", "usage_interval: 0s\n  peers:", 1)
	c, err := Parse("c.yaml", []byte(src), env(map[string]string{"SECRET": "0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.UsageInterval != 0 {
		t.Fatalf("usage_interval = %s, want 0 (off)", c.Cluster.UsageInterval)
	}
}
