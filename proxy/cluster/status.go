package cluster

import (
	"strconv"
	"time"

	"github.com/shield-proxy/shield/breaker"
	"github.com/shield-proxy/shield/routing"
	"github.com/shield-proxy/shield/statuspage"
)

// shareSamples is how many synthetic digests measure each peer's share.
const shareSamples = 4096

// Status is the status page's cluster part: the membership, each
// peer's share of the keys, whether its breaker lets requests through
// and whether it is in purge sync.
func (c *Node) Status() *statuspage.Cluster {
	v := c.m.View()
	cs := &statuspage.Cluster{
		Generation:      strconv.FormatUint(v.Current.Generation(), 16),
		Membership:      "static",
		ConsulReachable: c.src.Reachable(),
		CacheOpen:       true,
	}
	var synced map[string]bool
	if c.sync != nil {
		synced, cs.CacheOpen = c.sync.synced()
	}
	if _, ok := c.src.(*routing.Consul); ok {
		cs.Membership = "consul"
	}
	owned := map[string]int{}
	for i := range uint64(shareSamples) {
		owner, _ := v.Current.Owner(i * 0x9e3779b97f4a7c15)
		owned[owner.ID]++
	}
	self := v.Current.Self()
	table := c.peers.Load()
	for _, peer := range v.Current.Peers() {
		ps := statuspage.Peer{ID: peer.ID, Addr: peer.Addr, Weight: peer.Weight, Share: float64(owned[peer.ID]) / shareSamples, Up: true}
		if ps.Weight == 0 {
			ps.Weight = 1
		}
		ps.Self = self != nil && self.ID == peer.ID
		ps.PurgeSynced = synced == nil || ps.Self || synced[peer.ID]
		if table != nil && !ps.Self {
			if pc := table.byID[peer.ID]; pc != nil && pc.skip.state(time.Now().UnixNano()) == breaker.Open {
				ps.Up = false
			}
		}
		cs.Peers = append(cs.Peers, ps)
	}
	return cs
}
