package routing

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestNewStatic(t *testing.T) {
	self := Peer{ID: "b", Addr: "10.0.0.2:7070"}
	tests := []struct {
		name    string
		peers   []Peer
		wantErr error // nil: must succeed
		wantIDs []string
	}{
		{"just self", nil, nil, []string{"b"}},
		{"list with self", []Peer{{ID: "a", Addr: "10.0.0.1:7070"}, self}, nil, []string{"a", "b"}},
		{"list without self", []Peer{{ID: "a", Addr: "10.0.0.1:7070"}}, errNotSelf, nil},
		{"duplicate", []Peer{self, self}, ErrDuplicateID, nil},
		{"bad weight", []Peer{self, {ID: "c", Weight: -1}}, ErrInvalidWeight, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMembership(self, 0, nil)
			s, err := NewStatic(tt.peers, m, t0)
			if tt.wantErr != nil {
				if err == nil || (tt.wantErr != errNotSelf && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("NewStatic error = %v, want %v", err, tt.wantErr)
				}
				if m.View().Current.Len() != 1 {
					t.Error("a rejected list changed the membership")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewStatic: %v", err)
			}
			if got := ids(m.View().Current); !slices.Equal(got, tt.wantIDs) {
				t.Errorf("peers = %v, want %v", got, tt.wantIDs)
			}
			if !s.Reachable() {
				t.Error("static source not reachable")
			}
			s.Refresh() // must not block or panic
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- s.Run(ctx) }()
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
		})
	}
}

// errNotSelf marks the case whose error has no sentinel: any error will do.
var errNotSelf = errors.New("list without self")
