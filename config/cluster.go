package config

import (
	"fmt"
	"os"
	"time"
)

const defaultOverlap = 10 * time.Second

// applyClusterDefaults fills cluster settings absent from the file.
func applyClusterDefaults(c *Config, has func(string) bool) {
	cl := c.Cluster
	if cl == nil {
		return
	}
	if !has("cluster.node_id") {
		if h, err := os.Hostname(); err == nil {
			cl.NodeID = h
		}
	}
	setDefault(&cl.Advertise, has("cluster.advertise"), cl.Listen)
	setDefault(&cl.Weight, has("cluster.weight"), 1)
	setDefault(&cl.Overlap, has("cluster.overlap"), defaultOverlap)
	setDefault(&cl.Membership, has("cluster.membership"), "static")
	setDefault(&cl.Transport, has("cluster.transport"), "mux")
	setDefault(&cl.HotKeyRate, has("cluster.hot_key_rate"), 500)
	setDefault(&cl.HotKeyMaxAge, has("cluster.hot_key_max_age"), time.Second)
	setDefault(&cl.HandoffKeys, has("cluster.handoff_keys"), 1000)
	setDefault(&cl.UsageInterval, has("cluster.usage_interval"), time.Second)
	longest := time.Duration(0)
	for _, o := range c.Origins {
		longest = max(longest, o.Timeout)
	}
	setDefault(&cl.PeerTimeout, has("cluster.peer_timeout"), longest+time.Second)
	for _, p := range cl.Peers {
		if p != nil && p.Weight == 0 {
			p.Weight = 1
		}
	}
}

// validateCluster checks the cluster block.
func (d *decoder) validateCluster(c *Config) {
	cl := c.Cluster
	if cl == nil {
		return
	}
	if cl.NodeID == "" {
		d.problem("cluster.node_id", "required (no host name to default to)")
	}
	if cl.Listen == "" {
		d.problem("cluster.listen", "required: the peer listener address")
	} else {
		d.checkListen("cluster.listen", cl.Listen)
		if cl.Listen == c.Listen || cl.Listen == c.Admin.Listen {
			d.problem("cluster.listen", "must differ from the public and admin listeners")
		}
	}
	if msg := checkServer(cl.Advertise); cl.Advertise != "" && msg != "" {
		d.problem("cluster.advertise", "%s", msg)
	}
	if len(cl.Secret) < 16 {
		d.problem("cluster.secret", "required, at least 16 characters (use ${VAR})")
	}
	if !(cl.Weight >= 1e-6 && cl.Weight <= 1e6) {
		d.problem("cluster.weight", "must be in [0.000001, 1000000], got %g", cl.Weight)
	}
	if t := cl.TLS; t != nil {
		d.keyPair("cluster.tls", t.CertFile, t.KeyFile, true)
		if t.CAFile == "" {
			d.problem("cluster.tls.ca_file", "required: the CA that signs every node's certificate")
		} else {
			d.caFile("cluster.tls.ca_file", t.CAFile)
		}
	}
	d.positive("cluster.overlap", cl.Overlap)
	d.positive("cluster.peer_timeout", cl.PeerTimeout)
	d.oneOf("cluster.membership", cl.Membership, "static", "consul")
	d.oneOf("cluster.transport", cl.Transport, "http", "mux")
	if cl.HotKeyRate < 0 {
		d.problem("cluster.hot_key_rate", "must be ≥ 0 (0 disables near copies), got %g", cl.HotKeyRate)
	}
	if cl.HotKeyMaxAge <= 0 || cl.HotKeyMaxAge > 10*time.Second {
		d.problem("cluster.hot_key_max_age", "must be in (0, 10s], got %s", cl.HotKeyMaxAge)
	}
	if cl.HandoffKeys < 0 || cl.HandoffKeys > 100000 {
		d.problem("cluster.handoff_keys", "must be in [0, 100000], got %d", cl.HandoffKeys)
	}
	if u := cl.UsageInterval; u != 0 && (u < 100*time.Millisecond || u > 10*time.Second) {
		d.problem("cluster.usage_interval", "must be 0 (off) or in [100ms, 10s], got %s", u)
	}
	switch cl.Membership {
	case "static":
		seen := map[string]bool{}
		self := false
		for i, p := range cl.Peers {
			pp := fmt.Sprintf("cluster.peers[%d]", i)
			if p == nil || p.ID == "" {
				d.problem(pp+".id", "required")
				continue
			}
			if seen[p.ID] {
				d.problem(pp+".id", "duplicate peer id %q", p.ID)
			}
			seen[p.ID] = true
			self = self || p.ID == cl.NodeID
			if msg := checkServer(p.Addr); msg != "" {
				d.problem(pp+".addr", "%s", msg)
			}
			if !(p.Weight >= 1e-6 && p.Weight <= 1e6) {
				d.problem(pp+".weight", "must be in [0.000001, 1000000], got %g", p.Weight)
			}
		}
		if len(cl.Peers) > 0 && !self {
			d.problem("cluster.peers", "must include this node (node_id %q)", cl.NodeID)
		}
	case "consul":
		if len(cl.Peers) > 0 {
			d.problem("cluster.peers", "peers are for static membership; consul discovers them")
		}
		d.nonNegative("cluster.consul.check_interval", cl.Consul.CheckInterval)
		d.nonNegative("cluster.consul.deregister_after", cl.Consul.DeregisterAfter)
	}
}
