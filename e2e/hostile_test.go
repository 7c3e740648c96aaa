package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shield-proxy/shield/config"
)

// Hostile input on the public listener: request smuggling and framing
// attacks sent as raw bytes over TCP to a real shield, in front of an
// origin that records what it receives. Each case must be refused with a
// 4xx, or be answered with ONE unambiguous meaning, and must never reach
// the origin with another meaning (method, path and body length are
// compared with the meanings the bytes may legitimately have).

// hostileHost is the only host the hostile shield routes.
const hostileHost = "example.com"

// hostileLimits are the public listener limits the hostile shield runs
// with, small so that oversized cases are cheap.
const (
	hostileMaxHeader = 4 << 10
	hostileMaxBody   = 1 << 10
)

// hostileRoutes is the default routes section: example.com only.
const hostileRoutes = `routes:
  - name: main
    hosts: [example.com]
    origin: o
`

// newHostileEnv starts a recording origin and a shield in front of it
// whose config is the fixed head above followed by body (routes and any
// tenants or cluster section). The env's demo-origin fields stay unset:
// what the origin saw comes from the returned recorder.
func newHostileEnv(t *testing.T, body string) (*env, *hostileOrigin) {
	t.Helper()
	o := newHostileOrigin(t)
	e := &env{t: t, client: newClient(), originAddr: o.addr}
	t.Cleanup(e.client.CloseIdleConnections)
	e.cfg = shieldConfig{Listen: freeAddr(t), Admin: freeAddr(t), Origin: o.addr, Extra: []confOpt{
		with(func(c *config.Config) {
			c.Server.ReadTimeout = 3 * time.Second
			c.Server.MaxHeaderSize = hostileMaxHeader
			c.Server.MaxBodySize = hostileMaxBody
			c.Cache.HitForMiss = 2 * time.Second
			c.Origins = map[string]*config.Origin{"o": {Servers: []string{o.addr}, Timeout: 5 * time.Second, MaxConcurrency: 256}}
		}),
		yamlSection(body),
	}}
	e.cfgPath = writeFile(t, "shield.yaml", e.cfg.render(t))
	e.startShield()
	return e, o
}

// hostileSeen is one request as the origin parsed it.
type hostileSeen struct {
	Method  string
	URI     string
	Host    string
	BodyLen int
	Header  http.Header
}

func (s hostileSeen) String() string {
	return fmt.Sprintf("%s %s (host %q, body %d)", s.Method, s.URI, s.Host, s.BodyLen)
}

// hostileOrigin is an HTTP origin on 127.0.0.1 that records every request
// (parsed) and every byte it receives (raw), and answers a JSON echo.
// Query parameters shape the answer: cc=<Cache-Control> (default
// "public, max-age=60"; "cc=" sends none), setcookie=1, vary=<Name>,
// delay=<ms>.
type hostileOrigin struct {
	addr string

	mu   sync.Mutex
	seen []hostileSeen // guarded by mu
	raw  bytes.Buffer  // guarded by mu
	n    int64         // guarded by mu; requests answered
}

// hostileEchoed are the request headers the origin copies into its body:
// identity headers (a leak shows them to another client) and headers an
// attacker would use to steer an unkeyed fetch.
var hostileEchoed = []string{
	"Authorization", "Cookie", "X-Tenant-Id", "X-V", "Accept-Language",
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-For", "Forwarded",
	"X-Original-Url", "X-Rewrite-Url", "X-Http-Method-Override",
	"Shield-Auth", "Shield-Tenant", "Shield-Generation",
}

// hostileBody is the origin's answer body.
type hostileBody struct {
	N       int64             `json:"n"`
	Method  string            `json:"method"`
	URI     string            `json:"uri"`
	BodyLen int               `json:"body_len"`
	Echo    map[string]string `json:"echo"`
}

func newHostileOrigin(t *testing.T) *hostileOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("origin listen: %v", err)
	}
	o := &hostileOrigin{addr: ln.Addr().String()}
	srv := &http.Server{Handler: o, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(&hostileRecListener{Listener: ln, o: o}) }()
	t.Cleanup(func() { _ = srv.Close() })
	return o
}

func (o *hostileOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	q := r.URL.Query()
	o.mu.Lock()
	o.seen = append(o.seen, hostileSeen{Method: r.Method, URI: r.RequestURI, Host: r.Host, BodyLen: len(body), Header: r.Header.Clone()})
	o.n++
	n := o.n
	o.mu.Unlock()
	if ms, err := strconv.Atoi(q.Get("delay")); err == nil && ms > 0 {
		// Simulated origin latency (keeps a fetch in flight), not
		// synchronisation.
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	h := w.Header()
	cc := "public, max-age=60"
	if v, ok := q["cc"]; ok {
		cc = v[0]
	}
	if cc != "" {
		h.Set("Cache-Control", cc)
	}
	if q.Get("setcookie") == "1" {
		h.Set("Set-Cookie", fmt.Sprintf("sid=%d; Path=/", n))
	}
	if v := q.Get("vary"); v != "" {
		h.Set("Vary", v)
	}
	echo := map[string]string{}
	for _, name := range hostileEchoed {
		if v := r.Header.Values(name); len(v) > 0 {
			echo[name] = strings.Join(v, ", ")
		}
	}
	h.Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(hostileBody{N: n, Method: r.Method, URI: r.RequestURI, BodyLen: len(body), Echo: echo})
}

// take returns and forgets what the origin received so far.
func (o *hostileOrigin) take() ([]hostileSeen, []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen, raw := o.seen, bytes.Clone(o.raw.Bytes())
	o.seen = nil
	o.raw.Reset()
	return seen, raw
}

// count returns how many requests for path the origin received.
func (o *hostileOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.seen {
		if p, _, _ := strings.Cut(s.URI, "?"); p == path {
			n++
		}
	}
	return n
}

// hostileRecListener tees every accepted connection's bytes into the
// origin's raw record.
type hostileRecListener struct {
	net.Listener
	o *hostileOrigin
}

func (l *hostileRecListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &hostileRecConn{Conn: c, o: l.o}, nil
}

type hostileRecConn struct {
	net.Conn
	o *hostileOrigin
}

func (c *hostileRecConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.o.mu.Lock()
	c.o.raw.Write(b[:n])
	c.o.mu.Unlock()
	return n, err
}

// hostileAnswer is what a raw exchange got back.
type hostileAnswer struct {
	statuses    []int
	cacheStatus []string
	tail        string // unparseable bytes after the last response, if any
}

func (a hostileAnswer) String() string {
	s := fmt.Sprint(a.statuses)
	if a.tail != "" {
		s += fmt.Sprintf(" then %.60q", a.tail)
	}
	return s
}

// hostileExchange writes raw to addr on one connection, half-closes it (so
// the server sees the end of the pipeline and closes after answering), and
// reads every response until the server closes.
func hostileExchange(t *testing.T, addr string, raw []byte) hostileAnswer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	var a hostileAnswer
	br := bufio.NewReader(conn)
	for {
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("server neither answered nor closed within the deadline; got %v", a)
			}
			return a // closed
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			rest, _ := io.ReadAll(br)
			a.tail = string(rest)
			return a
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		a.statuses = append(a.statuses, resp.StatusCode)
		a.cacheStatus = append(a.cacheStatus, resp.Header.Get("Cache-Status"))
	}
}

// hostileMeaning is one way the origin may legitimately see a request.
type hostileMeaning struct {
	method, path string
	bodyLen      int
}

func (m hostileMeaning) matches(s hostileSeen) bool {
	p, _, _ := strings.Cut(s.URI, "?")
	return s.Method == m.method && p == m.path && s.BodyLen == m.bodyLen
}

// smuggled is the request line an attacker hides in a body; it must never
// reach the origin.
const smuggled = "GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n"

// hostileClTe frames smuggled as a body whose length depends on which of
// Content-Length or Transfer-Encoding wins; heads are the framing header
// lines (with %d for the Content-Length, the whole body).
func hostileClTe(method, path, proto string, heads ...string) (raw string, meanings []hostileMeaning) {
	body := "0\r\n\r\n" + smuggled
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\nHost: example.com\r\n", method, path, proto)
	for _, h := range heads {
		if strings.Contains(h, "%d") {
			h = fmt.Sprintf(h, len(body))
		}
		b.WriteString(h)
	}
	b.WriteString("\r\n" + body)
	return b.String(), []hostileMeaning{{method, path, 0}, {method, path, len(body)}}
}

func TestHostileFraming(t *testing.T) {
	t.Parallel()
	e, o := newHostileEnv(t, hostileRoutes)

	type tcase struct {
		name string
		raw  string
		// reject: only a 4xx is acceptable (exactly status when set), and
		// nothing may reach the origin.
		reject bool
		status int
		// meanings the origin may see when the request is not refused
		// (at most maxOrigin requests, each one of these).
		meanings  []hostileMeaning
		maxOrigin int
		// forbidden: a path that must never reach the origin.
		forbidden string
	}
	clte := func(name, method, path, proto string, heads ...string) tcase {
		raw, m := hostileClTe(method, path, proto, heads...)
		return tcase{name: name, raw: raw, meanings: m, maxOrigin: 1, forbidden: "/smuggled"}
	}
	bigHeader := "GET /big-header HTTP/1.1\r\nHost: example.com\r\nX-Big: " + strings.Repeat("a", 2*hostileMaxHeader) + "\r\n\r\n"
	bigBody := strings.Repeat("b", 2*hostileMaxBody)
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(bigBody), bigBody)
	tests := []tcase{
		// Controls: clean requests get through, with their one meaning.
		{name: "control post", raw: "POST /ok HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello",
			meanings: []hostileMeaning{{"POST", "/ok", 5}}, maxOrigin: 1, status: 200},
		{name: "control chunked", raw: "POST /okc HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n",
			meanings: []hostileMeaning{{"POST", "/okc", 5}}, maxOrigin: 1, status: 200},
		{name: "control pipelined", raw: "GET /p1?cc=no-store HTTP/1.1\r\nHost: example.com\r\n\r\nGET /p2?cc=no-store HTTP/1.1\r\nHost: example.com\r\n\r\n",
			meanings: []hostileMeaning{{"GET", "/p1", 0}, {"GET", "/p2", 0}}, maxOrigin: 2, status: 200},

		// Content-Length versus Transfer-Encoding (RFC 9112 §6.1, §6.3).
		clte("CL then TE", "POST", "/clte", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding: chunked\r\n"),
		clte("TE then CL", "POST", "/tecl", "HTTP/1.1", "Transfer-Encoding: chunked\r\n", "Content-Length: %d\r\n"),
		clte("TE xchunked", "POST", "/xchunked", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding: xchunked\r\n"),
		clte("TE chunked, identity", "POST", "/te-list", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding: chunked, identity\r\n"),
		clte("TE identity, chunked", "POST", "/te-list2", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding: identity, chunked\r\n"),
		clte("TE upper case", "POST", "/te-upper", "HTTP/1.1", "Content-Length: %d\r\n", "TRANSFER-ENCODING: CHUNKED\r\n"),
		clte("TE tab", "POST", "/te-tab", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding:\tchunked\r\n"),
		clte("TE twice", "POST", "/te-twice", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding: identity\r\n", "Transfer-Encoding: chunked\r\n"),
		clte("TE obs-fold", "POST", "/te-fold", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding:\r\n chunked\r\n"),
		clte("TE after bare LF", "POST", "/te-lf", "HTTP/1.1", "Content-Length: %d\r\n", "X-A: a\nTransfer-Encoding: chunked\r\n"),
		clte("TE after bare CR", "POST", "/te-cr", "HTTP/1.1", "Content-Length: %d\r\n", "X-A: a\rTransfer-Encoding: chunked\r\n"),
		clte("TE in HTTP/1.0", "POST", "/te-10", "HTTP/1.0", "Content-Length: %d\r\n", "Transfer-Encoding: chunked\r\n"),
		// RFC 9112 §5.1: whitespace between a field name and the colon
		// MUST be rejected with 400.
		{name: "TE space before colon", raw: func() string {
			r, _ := hostileClTe("POST", "/te-space", "HTTP/1.1", "Content-Length: %d\r\n", "Transfer-Encoding : chunked\r\n")
			return r
		}(), reject: true, status: 400, forbidden: "/smuggled"},

		// Content-Length alone, malformed (RFC 9112 §6.3: unrecoverable).
		{name: "duplicate CL, different values", raw: "POST /dupcl HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
			reject: true, status: 400},
		{name: "CL list, different values", raw: "POST /clist HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5, 6\r\n\r\nhello!",
			reject: true, status: 400},
		{name: "CL plus sign", raw: "POST /clplus HTTP/1.1\r\nHost: example.com\r\nContent-Length: +5\r\n\r\nhello", reject: true, status: 400},
		{name: "CL negative", raw: "POST /clneg HTTP/1.1\r\nHost: example.com\r\nContent-Length: -1\r\n\r\nhello", reject: true, status: 400},
		{name: "CL hex", raw: "POST /clhex HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0x5\r\n\r\nhello", reject: true, status: 400},

		// Line syntax.
		{name: "obs-fold in a header", raw: "GET /fold?cc=no-store HTTP/1.1\r\nHost: example.com\r\nX-Fold: a\r\n b\r\n\r\n",
			meanings: []hostileMeaning{{"GET", "/fold", 0}}, maxOrigin: 1},
		{name: "bare LF line endings", raw: "GET /lf?cc=no-store HTTP/1.1\nHost: example.com\n\n",
			meanings: []hostileMeaning{{"GET", "/lf", 0}}, maxOrigin: 1},

		// Limits: server.max_header_size → 431, server.max_body_size → 413.
		{name: "oversized header", raw: bigHeader, reject: true, status: 431},
		{name: "oversized body (CL)", raw: "POST /bigcl HTTP/1.1\r\nHost: example.com\r\nContent-Length: " + strconv.Itoa(len(bigBody)) + "\r\n\r\n" + bigBody,
			reject: true, status: 413},
		{name: "oversized body (chunked)", raw: "POST /bigch HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk,
			reject: true, status: 413},

		// Targets: shield is a reverse proxy; only origin-form is served.
		{name: "absolute-form, same host", raw: "GET http://example.com/abs HTTP/1.1\r\nHost: example.com\r\n\r\n", reject: true, status: 400},
		{name: "absolute-form, other host", raw: "GET http://evil.example/abs HTTP/1.1\r\nHost: example.com\r\n\r\n", reject: true, status: 400},
		{name: "absolute-form, routed host in URI only", raw: "GET http://example.com/abs2 HTTP/1.1\r\nHost: evil.example\r\n\r\n", reject: true},
		{name: "CONNECT", raw: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", reject: true},
		{name: "asterisk-form", raw: "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", reject: true},
		// RFC 9112 §3.2: more than one Host line MUST get 400; a cache
		// in front that picks the other one would key differently.
		{name: "two Host lines", raw: "GET /twohost HTTP/1.1\r\nHost: example.com\r\nHost: evil.example\r\n\r\n", reject: true, status: 400},
		// A Host that is not host[:port] (RFC 9110 §7.2) must not route
		// by one reading and reach the origin under another: the origin
		// must see the routed host, or nothing.
		{name: "Host with userinfo", raw: "GET /userinfo HTTP/1.1\r\nHost: example.com:@evil.example\r\n\r\n",
			meanings: []hostileMeaning{{"GET", "/userinfo", 0}}, maxOrigin: 1},
		{name: "Host with non-numeric port", raw: "GET /badport?cc=no-store HTTP/1.1\r\nHost: example.com:80x\r\n\r\n",
			meanings: []hostileMeaning{{"GET", "/badport", 0}}, maxOrigin: 1},
		{name: "Host with path", raw: "GET /hostpath HTTP/1.1\r\nHost: example.com/admin\r\n\r\n", reject: true},
		{name: "HTTP/1.1 without Host", raw: "GET /nohost HTTP/1.1\r\n\r\n", reject: true},
		{name: "HTTP/1.0 without Host", raw: "GET /old HTTP/1.0\r\n\r\n", reject: true},

		// Chunked syntax.
		{name: "chunk size not hex", raw: "POST /ch1 HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", reject: true, status: 400},
		{name: "chunk size negative", raw: "POST /ch2 HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", reject: true, status: 400},
		{name: "chunk size overflow", raw: "POST /ch3 HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n", reject: true},
		{name: "chunk longer than size", raw: "POST /ch4 HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", reject: true, status: 400},

		// Pipelines whose first body is ambiguous: the request behind it
		// must not be served with a meaning the first one's framing hid.
		{name: "pipelined after CL:0 + TE", raw: "POST /amb1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + smuggled,
			meanings: []hostileMeaning{{"POST", "/amb1", 0}, {"POST", "/amb1", 5}}, maxOrigin: 1, forbidden: "/smuggled"},
		{name: "pipelined after duplicate CL", raw: "POST /amb2 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\nContent-Length: " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled,
			reject: true, status: 400, forbidden: "/smuggled"},
	}
	var table strings.Builder
	table.WriteString("\n| case | answers | origin saw |\n|---|---|---|\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o.take()
			a := hostileExchange(t, e.cfg.Listen, []byte(tt.raw))
			seen, raw := o.take()
			fmt.Fprintf(&table, "| %s | %v | %v |\n", tt.name, a, seen)
			if len(a.statuses) == 0 {
				t.Errorf("no answer at all (%v); want a 4xx or one meaning", a)
			}
			for i, st := range a.statuses {
				if st < 200 || st >= 500 && st != http.StatusNotImplemented {
					t.Errorf("answer %d is %d: want a 4xx refusal (or 501 for an unknown transfer coding) or a served request", i, st)
				}
			}
			if tt.forbidden != "" && bytes.Contains(raw, []byte(tt.forbidden)) {
				t.Errorf("%s reached the origin: it was hidden in a body; origin bytes:\n%q", tt.forbidden, raw)
			}
			if tt.reject {
				if len(a.statuses) > 0 && (a.statuses[0] < 400 || a.statuses[0] > 499 || tt.status != 0 && a.statuses[0] != tt.status) {
					want := "a 4xx"
					if tt.status != 0 {
						want = strconv.Itoa(tt.status)
					}
					t.Errorf("answer %v, want %s", a, want)
				}
				if len(seen) > 0 || len(raw) > 0 {
					t.Errorf("a refused request reached the origin as %v", seen)
				}
				return
			}
			if tt.status != 0 && (len(a.statuses) == 0 || a.statuses[0] != tt.status) {
				t.Errorf("answer %v, want %d", a, tt.status)
			}
			if len(seen) > tt.maxOrigin {
				t.Errorf("origin saw %d requests %v, want at most %d", len(seen), seen, tt.maxOrigin)
			}
			if len(raw) > 0 && len(seen) == 0 {
				t.Errorf("the origin received bytes it could not parse as a request:\n%q", raw)
			}
			for _, s := range seen {
				if h := hostileHostOnly(s.Host); h != hostileHost {
					t.Errorf("origin saw Host %q (host %q), want the routed host %s", s.Host, h, hostileHost)
				}
				ok := false
				for _, m := range tt.meanings {
					ok = ok || m.matches(s)
				}
				if !ok {
					t.Errorf("origin saw %v, which is none of the request's meanings %v", s, tt.meanings)
				}
			}
		})
	}
	t.Log(table.String())
}

// hostileHostOnly lower-cases a Host value and drops a numeric port.
func hostileHostOnly(h string) string {
	if host, port, err := net.SplitHostPort(h); err == nil {
		if _, err := strconv.Atoi(port); err == nil {
			h = host
		}
	}
	return strings.ToLower(h)
}
