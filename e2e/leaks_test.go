package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// No leaks between clients: what one client's request made the origin
// say about that client (its credentials, cookies, tenant, variant) never
// reaches another client, whether sequentially, through a coalesced fetch,
// through a header the cache key ignores, or through the peer listener.
// The recording origin (hostile_test.go) echoes identity headers into its
// body, so a leak is visible as another client's value in a body.

// hostileEcho decodes the recording origin's body.
func hostileEcho(t *testing.T, r result) hostileBody {
	t.Helper()
	var b hostileBody
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("body of %v is not the origin's echo: %v", r, err)
	}
	return b
}

// hostileWantOwn fails unless r echoes exactly value for header (or
// nothing when value is ""): the answer was made for this client.
func hostileWantOwn(t *testing.T, who string, r result, header, value string) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("%s: %v, want 200", who, r)
	}
	if got := hostileEcho(t, r).Echo[header]; got != value {
		t.Errorf("%s got an answer made for %s %q, want its own %q (%v)", who, header, got, value, r)
	}
}

func isHitResult(r result) bool {
	return strings.HasPrefix(r.header.Get("Cache-Status"), "shield; hit")
}

func TestLeakIdentityNotShared(t *testing.T) {
	t.Parallel()
	e, o := newHostileEnv(t, hostileRoutes)
	host := []string{"Host", hostileHost}
	tests := []struct {
		name   string
		query  string
		header string // identity header each client sends its own value of
		a, b   string
		shared bool // RFC 9111 allows sharing: b gets a's (stored) answer
	}{
		{"authorization, max-age only", "cc=max-age%3D60", "Authorization", "Bearer alice", "Bearer bob", false},
		{"authorization, private", "cc=private,max-age%3D60", "Authorization", "Bearer alice", "Bearer bob", false},
		{"authorization, no Cache-Control", "cc=", "Authorization", "Bearer alice", "Bearer bob", false},
		{"cookie, private", "cc=private,max-age%3D60", "Cookie", "sid=alice", "sid=bob", false},
		{"cookie, no-store", "cc=no-store", "Cookie", "sid=alice", "sid=bob", false},
		{"cookie, Vary: Cookie", "vary=Cookie", "Cookie", "sid=alice", "sid=bob", false},
		{"Vary variants", "vary=Accept-Language", "Accept-Language", "fr", "de", false},
		{"Vary variant present vs absent", "vary=X-V", "X-V", "a", "", false},
		// Controls: the origin allows sharing, so the cache does share
		// (this proves the test can tell a shared answer apart).
		{"control: authorization with public", "cc=public,max-age%3D60", "Authorization", "Bearer alice", "Bearer bob", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			path := fmt.Sprintf("/identity/%d", i)
			u := path + "?" + tt.query
			as := func(v string) []string {
				if v == "" {
					return host
				}
				return append([]string{tt.header, v}, host...)
			}
			a1 := e.get(u, as(tt.a)...)
			b1 := e.get(u, as(tt.b)...)
			a2 := e.get(u, as(tt.a)...)
			b2 := e.get(u, as(tt.b)...)
			if tt.shared {
				hostileWantOwn(t, "b (shared)", b1, tt.header, tt.a)
				if !isHitResult(b1) || o.count(path) != 1 {
					t.Errorf("control: b was not served a's stored answer (%v, origin saw %d)", b1, o.count(path))
				}
				return
			}
			hostileWantOwn(t, "a", a1, tt.header, tt.a)
			hostileWantOwn(t, "b", b1, tt.header, tt.b)
			hostileWantOwn(t, "a again", a2, tt.header, tt.a)
			hostileWantOwn(t, "b again", b2, tt.header, tt.b)
			anon := e.get(u, host...)
			if body := string(anon.body); strings.Contains(body, "alice") || strings.Contains(body, "bob") {
				t.Errorf("a client without identity got %v", anon)
			}
		})
	}
}

func TestLeakSetCookieNotShared(t *testing.T) {
	t.Parallel()
	e, o := newHostileEnv(t, hostileRoutes)
	u := "/set-cookie?setcookie=1"
	a := e.get(u, "Host", hostileHost)
	b := e.get(u, "Host", hostileHost)
	ca, cb := a.header.Get("Set-Cookie"), b.header.Get("Set-Cookie")
	if ca == "" || cb == "" || ca == cb {
		t.Errorf("Set-Cookie %q then %q: want each client its own cookie", ca, cb)
	}
	if isHitResult(a) || isHitResult(b) {
		t.Errorf("a Set-Cookie answer was served from the cache: %v / %v", a, b)
	}
	if n := o.count("/set-cookie"); n != 2 {
		t.Errorf("origin saw %d requests, want 2 (nothing shared)", n)
	}
}

// TestLeakCoalescedWaiters sends 50 concurrent requests for one cold key
// whose answer turns out unshareable; each client has its own identity,
// and each must get the answer made for it (docs/architecture.md §6).
func TestLeakCoalescedWaiters(t *testing.T) {
	t.Parallel()
	e, o := newHostileEnv(t, hostileRoutes)
	const n = 50
	tests := []struct {
		name, query, header string
	}{
		{"private", "cc=private,max-age%3D60", "Cookie"},
		{"set-cookie", "setcookie=1", "Cookie"},
		{"authorization", "cc=max-age%3D60", "Authorization"},
		{"no-store", "cc=no-store", "X-V"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := fmt.Sprintf("/coalesce/%d", i)
			u := path + "?delay=300&" + tt.query
			results := make([]result, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for c := range n {
				wg.Go(func() {
					<-start
					results[c], errs[c] = e.try(http.MethodGet, u, "Host", hostileHost, tt.header, fmt.Sprintf("client-%d", c))
				})
			}
			close(start)
			wg.Wait()
			cookies := map[string]int{}
			for c, r := range results {
				if errs[c] != nil {
					t.Fatal(errs[c])
				}
				hostileWantOwn(t, fmt.Sprintf("client %d", c), r, tt.header, fmt.Sprintf("client-%d", c))
				if sc := r.header.Get("Set-Cookie"); sc != "" {
					if prev, dup := cookies[sc]; dup {
						t.Errorf("clients %d and %d got the same Set-Cookie %q", prev, c, sc)
					}
					cookies[sc] = c
				}
			}
			if got := o.count(path); got != n {
				t.Errorf("origin saw %d requests for %s, want %d (every client fetches its own)", got, path, n)
			}
		})
	}
}

// hostileTenants is a routes and tenants section: /scoped/ is
// tenant-scoped, tenants come from X-Tenant-Id.
const hostileTenants = `routes:
  - name: scoped
    hosts: [example.com]
    path_prefix: /scoped/
    origin: o
    cache: { tenant_scoped: true }
  - name: main
    hosts: [example.com]
    origin: o
tenants:
  identify: { header: X-Tenant-ID }
  default: { rate: 10000, burst: 10000, max_concurrency: 1000 }
  classes:
    acme:   { rate: 10000, burst: 10000, max_concurrency: 1000 }
    globex: { rate: 10000, burst: 10000, max_concurrency: 1000 }
`

func TestLeakTenants(t *testing.T) {
	t.Parallel()
	e, o := newHostileEnv(t, hostileTenants)
	const tid = "X-Tenant-Id"
	tenants := []string{"acme", "globex", "unknown-1", "unknown-2", ""}
	tests := []struct {
		name, path, query string
		extra             []string // more request headers, per tenant index
	}{
		{"scoped route", "/scoped/report", "", nil},
		{"scoped route, Vary variants", "/scoped/varied", "vary=X-V", []string{"X-V", "same"}},
		{"scoped route, spoofed peer tenant header", "/scoped/spoof", "", []string{"Shield-Tenant", "acme"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.on(t)
			u := tt.path
			if tt.query != "" {
				u += "?" + tt.query
			}
			for round := range 2 {
				for _, tn := range tenants {
					hdr := append([]string{"Host", hostileHost}, tt.extra...)
					if tn != "" {
						hdr = append(hdr, tid, tn)
					}
					r := e.get(u, hdr...)
					hostileWantOwn(t, fmt.Sprintf("tenant %q (round %d)", tn, round+1), r, tid, tn)
					if round == 1 && !isHitResult(r) {
						t.Errorf("tenant %q: second request not a hit of its own entry: %v", tn, r)
					}
				}
			}
			if got := o.count(tt.path); got != len(tenants) {
				t.Errorf("origin saw %d requests for %s, want %d (one per tenant)", got, tt.path, len(tenants))
			}
		})
	}
}

// TestLeakUnkeyedHeaders: headers that are not part of the cache key
// cannot change a cached body. An attacker sends them on a cold URL; the
// origin lets them steer its answer (it echoes them, as frameworks that
// honour X-Original-URL or X-HTTP-Method-Override effectively do); a
// victim's plain request for the same URL must not get that answer.
func TestLeakUnkeyedHeaders(t *testing.T) {
	t.Parallel()
	e, _ := newHostileEnv(t, hostileRoutes)
	const marker = "poison-c4f1"
	tests := []struct{ header, value string }{
		{"X-Forwarded-Host", marker + ".example"},
		{"X-Forwarded-Proto", marker},
		{"X-Forwarded-For", marker},
		{"Forwarded", "host=" + marker + ".example;proto=" + marker},
		{"X-Original-URL", "/" + marker},
		{"X-Rewrite-URL", "/" + marker},
		{"X-HTTP-Method-Override", "DELETE-" + marker},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			e := e.on(t)
			u := "/unkeyed/" + strings.ToLower(tt.header)
			attacker := e.get(u, "Host", hostileHost, tt.header, tt.value)
			victim := e.get(u, "Host", hostileHost)
			if attacker.status != http.StatusOK || victim.status != http.StatusOK {
				t.Fatalf("attacker %v, victim %v; want 200s", attacker, victim)
			}
			if strings.Contains(string(victim.body), marker) {
				t.Errorf("cache poisoned through unkeyed %s: the victim got %s\n(attacker's answer: %v)", tt.header, victim.body, attacker)
			}
		})
	}
}

func TestLeakUnknownHost(t *testing.T) {
	t.Parallel()
	e, o := newHostileEnv(t, hostileRoutes)
	tests := []struct {
		host string
		want int
	}{
		{"example.com", http.StatusOK}, // control
		{"EXAMPLE.COM:8080", http.StatusOK},
		{"evil.example", http.StatusNotFound},
		{"example.com.evil.example", http.StatusNotFound},
		{"www.example.com", http.StatusNotFound},
		{"127.0.0.1", http.StatusNotFound},
		{o.addr, http.StatusNotFound}, // the origin itself: never an open proxy
		{"localhost", http.StatusNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			path := fmt.Sprintf("/host/%d", i)
			r := e.on(t).get(path, "Host", tt.host)
			if r.status != tt.want {
				t.Errorf("Host %q: %v, want %d", tt.host, r, tt.want)
			}
			wantOrigin := 0
			if tt.want == http.StatusOK {
				wantOrigin = 1
			}
			if got := o.count(path); got != wantOrigin {
				t.Errorf("Host %q: origin saw %d requests, want %d", tt.host, got, wantOrigin)
			}
			if tt.want == http.StatusNotFound && r.header.Get("Cache-Status") == "" {
				t.Errorf("Host %q: 404 without Cache-Status", tt.host)
			}
		})
	}
}

// hostileSecret is the peer secret of TestLeakPeerListener's cluster.
const hostileSecret = "hostile-peer-secret-0123456789"

// TestLeakPeerListener: the peer listener serves only peers — the shared
// secret AND a peer's address. The node listens on 127.0.0.2 (its own
// peer address), so a client on 127.0.0.1 is not a peer even with the
// secret. A request that passes both checks but names no generation gets
// 421, which proves the checks ran first; a purge that passes them is
// applied whatever generation it names (purges must get through while
// views differ), so the control purge is 200.
func TestLeakPeerListener(t *testing.T) {
	t.Parallel()
	peer := hostileFreeAddr(t, "127.0.0.2")
	cluster := fmt.Sprintf(`cluster:
  node_id: a
  listen: %s
  secret: %q
  peers: [{ id: a, addr: %q }]
`, peer, hostileSecret, peer)
	e, o := newHostileEnv(t, hostileRoutes+cluster)
	tests := []struct {
		name, from string
		hdr        []string
		want       int
	}{
		{"no secret, not a peer", "127.0.0.1", nil, http.StatusForbidden},
		{"secret, not a peer", "127.0.0.1", []string{"Shield-Auth", hostileSecret}, http.StatusForbidden},
		{"no secret, from a peer address", "127.0.0.2", nil, http.StatusForbidden},
		{"wrong secret, from a peer address", "127.0.0.2", []string{"Shield-Auth", hostileSecret + "x"}, http.StatusForbidden},
		{"secret prefix, from a peer address", "127.0.0.2", []string{"Shield-Auth", hostileSecret[:16]}, http.StatusForbidden},
		{"control: secret from a peer address", "127.0.0.2", []string{"Shield-Auth", hostileSecret}, http.StatusMisdirectedRequest},
	}
	for i, tt := range tests {
		for _, path := range []string{fmt.Sprintf("/peer/%d", i), "/__shield/purge?route=main"} {
			t.Run(tt.name+" "+path, func(t *testing.T) {
				c := hostileClientFrom(t, tt.from)
				method := http.MethodGet
				if strings.HasPrefix(path, "/__shield/") {
					method = http.MethodPost
				}
				r, err := doHTTP(c, method, "http://"+peer+path, append([]string{"Host", hostileHost}, tt.hdr...)...)
				if err != nil {
					t.Fatal(err)
				}
				want := tt.want
				if want == http.StatusMisdirectedRequest && method == http.MethodPost {
					want = http.StatusOK
				}
				if r.status != want {
					t.Errorf("%s %s from %s: %v, want %d", method, path, tt.from, r, want)
				}
				if p, _, _ := strings.Cut(path, "?"); o.count(p) != 0 {
					t.Errorf("a refused peer request reached the origin")
				}
			})
		}
	}
	// The public listener never honours the peer protocol: the secret
	// there is just another header, and the answer is the public one.
	r := e.get("/peer/public", "Host", hostileHost, "Shield-Auth", hostileSecret, "Shield-Tenant", "acme")
	if r.status != http.StatusOK {
		t.Errorf("public request carrying peer headers: %v, want 200", r)
	}
	for k := range hostileEcho(t, r).Echo {
		if strings.HasPrefix(strings.ToLower(k), "shield-") {
			t.Errorf("peer header %s reached the origin", k)
		}
	}
}

// hostileFreeAddr is freeAddr on another loopback address.
func hostileFreeAddr(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("find a free port on %s: %v", ip, err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// hostileClientFrom is an HTTP client whose connections come from ip.
func hostileClientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
