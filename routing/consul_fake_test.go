package routing

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// fakeConsul is an httptest server implementing only the agent endpoints
// Consul uses: service register and deregister, and health/service with
// X-Consul-Index and blocking semantics (a query whose index is at or above
// the current one waits for a change, its wait time, or the client leaving).
type fakeConsul struct {
	srv      *httptest.Server
	quit     chan struct{} // closed by close: releases blocked queries
	quitOnce sync.Once

	mu         sync.Mutex // guards everything below
	index      uint64
	entries    []*api.ServiceEntry
	changed    chan struct{} // closed and replaced on every change
	failing    bool          // answer 500 to every request
	registered []fakeRegistration
	deregister []string
	queries    []fakeQuery
}

type fakeRegistration struct {
	Body    api.AgentServiceRegistration
	Raw     map[string]any // the JSON as sent, to check field names
	Replace string         // replace-existing-checks parameter
	Token   string         // X-Consul-Token header
}

type fakeQuery struct {
	Service string
	Index   uint64 // 0 when absent
	Wait    string
	Passing string
	Stale   bool
}

func newFakeConsul(t *testing.T) *fakeConsul {
	f := &fakeConsul{quit: make(chan struct{}), changed: make(chan struct{}), index: 10}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.close)
	return f
}

func (f *fakeConsul) close() {
	f.quitOnce.Do(func() {
		close(f.quit)
		f.srv.Close()
	})
}

func (f *fakeConsul) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	failing := f.failing
	f.mu.Unlock()
	if failing && !strings.HasPrefix(r.URL.Path, "/v1/health/") {
		http.Error(w, "rpc error: no cluster leader", http.StatusInternalServerError)
		return
	}
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/v1/agent/service/register":
		var raw map[string]any
		var reg fakeRegistration
		dec := json.NewDecoder(r.Body)
		if err := dec.Decode(&raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &reg.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reg.Raw = raw
		reg.Replace = r.URL.Query().Get("replace-existing-checks")
		reg.Token = r.Header.Get("X-Consul-Token")
		f.mu.Lock()
		f.registered = append(f.registered, reg)
		f.mu.Unlock()
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/service/deregister/"):
		f.mu.Lock()
		f.deregister = append(f.deregister, strings.TrimPrefix(r.URL.Path, "/v1/agent/service/deregister/"))
		f.mu.Unlock()
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/health/service/"):
		f.health(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeConsul) health(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fq := fakeQuery{
		Service: strings.TrimPrefix(r.URL.Path, "/v1/health/service/"),
		Wait:    q.Get("wait"),
		Passing: q.Get("passing"),
		Stale:   q.Has("stale"),
	}
	if s := q.Get("index"); s != "" {
		fq.Index, _ = strconv.ParseUint(s, 10, 64)
	}
	wait := 5 * time.Minute
	if d, err := time.ParseDuration(fq.Wait); err == nil {
		wait = d
	}
	f.mu.Lock()
	f.queries = append(f.queries, fq)
	changed := f.changed
	block := fq.Index > 0 && fq.Index >= f.index
	failing := f.failing
	f.mu.Unlock()
	if failing {
		http.Error(w, "rpc error: no cluster leader", http.StatusInternalServerError)
		return
	}
	if block {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-f.quit:
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		http.Error(w, "rpc error: no cluster leader", http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(f.index, 10))
	w.Header().Set("X-Consul-LastContact", "0")
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(f.entries)
}

// set replaces the healthy set and moves the index to index, waking
// blocked queries.
func (f *fakeConsul) set(index uint64, peers ...Peer) {
	entries := make([]*api.ServiceEntry, 0, len(peers))
	for _, p := range peers {
		host, port, _ := splitAddr(p.Addr)
		meta := map[string]string{}
		if p.Weight != 0 {
			meta["weight"] = strconv.FormatFloat(p.Weight, 'g', -1, 64)
		}
		entries = append(entries, &api.ServiceEntry{
			Node:    &api.Node{Node: "node-" + p.ID, Address: "192.0.2.1"},
			Service: &api.AgentService{ID: p.ID, Service: "shield", Address: host, Port: port, Meta: meta},
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	f.index = index
	close(f.changed)
	f.changed = make(chan struct{})
}

// setRaw is set for entries that peers cannot express (bad meta, no address).
func (f *fakeConsul) setRaw(index uint64, entries []*api.ServiceEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	f.index = index
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) setFailing(failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = failing
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) snapshot() (regs []fakeRegistration, deregs []string, queries []fakeQuery) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(regs, f.registered...), append(deregs, f.deregister...), append(queries, f.queries...)
}

func (f *fakeConsul) addr() string {
	u, _ := url.Parse(f.srv.URL)
	return u.Host
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
