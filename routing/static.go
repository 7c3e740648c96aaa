package routing

import (
	"context"
	"fmt"
	"time"
)

// Static is the membership source for a fixed peer list from configuration
// (`peers:`), or for a single node. It needs no Consul and is the default.
// Every node must be given the same list, so that all compute the same
// generation; a reload calls NewStatic again with the new list.
type Static struct {
	m *Membership
}

// NewStatic validates peers, applies them to m at once (so m's View is
// ready before Run) and returns the source. An empty list means just the
// local node. A non-empty list must contain the local node's ID: a shared
// config file that forgets this node is a mistake, not a way to exclude it.
func NewStatic(peers []Peer, m *Membership, now time.Time) (*Static, error) {
	self := m.Self()
	if len(peers) == 0 {
		peers = []Peer{self}
	}
	set, err := NewPeerSet(self.ID, peers)
	if err != nil {
		return nil, fmt.Errorf("routing: static peers: %w", err)
	}
	if set.Self() == nil {
		return nil, fmt.Errorf("routing: static peers do not include this node %q", self.ID)
	}
	m.Update(set.peers, now)
	return &Static{m: m}, nil
}

// Run blocks until ctx is done: a static list never changes by itself.
func (s *Static) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Refresh does nothing: there is nothing to re-read.
func (s *Static) Refresh() {}

// Reachable is always true.
func (s *Static) Reachable() bool { return true }

var _ Source = (*Static)(nil)
