package listener

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/shield-proxy/shield/proxy/rawio"
)

// h2Preface opens every HTTP/2 connection (RFC 9113 §3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// connMux accepts connections and sorts them onto two listeners, h1 for
// fasthttp and h2 for the HTTP/2 server. The TLS handshake or the look at
// the preface runs on a goroutine per connection, within read_timeout,
// so a slow client delays nobody else.
type connMux struct {
	ln      net.Listener
	tls     *tls.Config // nil: cleartext, sorted by the preface (h2c)
	timeout time.Duration
	lim     h2Limits // of the HTTP/2 server, for the filter of its connections
	logger  *slog.Logger
	h1, h2  *muxListener
	done    chan struct{}
	once    sync.Once
}

func newConnMux(ln net.Listener, tc *tls.Config, timeout time.Duration, lim h2Limits, logger *slog.Logger) *connMux {
	m := &connMux{ln: ln, tls: tc, timeout: timeout, lim: lim, logger: logger, done: make(chan struct{})}
	m.h1 = &muxListener{m: m, c: make(chan net.Conn)}
	m.h2 = &muxListener{m: m, c: make(chan net.Conn)}
	return m
}

func (m *connMux) close() {
	m.once.Do(func() {
		close(m.done)
		_ = m.ln.Close()
	})
}

// run accepts until the listener closes. A failed Accept that is not the
// end (out of file descriptors) is retried after a growing pause, as
// net/http and fasthttp do, instead of ending the listener.
func (m *connMux) run() {
	defer m.close()
	var pause time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			if m.logger != nil {
				m.logger.Warn("accept", "err", err, "retry_in", pause.String())
			}
			select {
			case <-time.After(pause):
			case <-m.done:
				return
			}
			continue
		}
		pause = 0
		go m.sort(c)
	}
}

// sort finds c's protocol and hands c to the server that speaks it.
func (m *connMux) sort(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(m.timeout))
	var out net.Conn
	h2 := false
	if m.tls != nil {
		tc := tls.Server(rawio.Wrap(c), m.tls) // raw calls under TLS too
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return
		}
		st := tc.ConnectionState()
		h2 = st.NegotiatedProtocol == "h2"
		out = tc
		if h2 && h2Secure(&st) {
			// Served as h2c by net/http (a *tls.Conn cannot be
			// filtered), with the TLS state passed in the context
			// (newH2Server's ConnContext). A connection below HTTP/2's
			// TLS requirements goes as it is: Go refuses it.
			out = newH2Filter(newH2Writer(tc), &st, m.lim)
		}
	} else {
		seen, kind, err := readPreface(c)
		if kind == notHTTP || err != nil && len(seen) == 0 {
			_ = c.Close()
			return
		}
		// A read error after some bytes goes to fasthttp with them,
		// which answers a partial HTTP/1 request as it always has.
		h2 = kind == isH2
		out = &replayConn{Conn: c, pending: seen}
		if h2 {
			// Go's HTTP/2 server reads and writes through rawio's raw
			// calls, as fasthttp's plain connections do (deadlineConn):
			// the runtime's sysmon stays asleep.
			rc := rawio.Wrap(c)
			out = newH2Filter(newH2Writer(&bufferedConn{Conn: rc, r: bufio.NewReaderSize(&replayConn{Conn: rc, pending: seen}, h2ReadBuffer)}), nil, m.lim)
		}
	}
	_ = c.SetDeadline(time.Time{})
	dst := m.h1
	if h2 {
		dst = m.h2
	}
	select {
	case dst.c <- out:
	case <-m.done:
		_ = out.Close()
	}
}

// What a cleartext connection opens with (readPreface).
const (
	isH1    = iota // an HTTP/1.x request line, or too little to tell: fasthttp answers
	isH2           // the HTTP/2 preface
	notHTTP        // neither: an invalid HTTP/2 preface, closed unanswered
)

// maxFirstLine bounds what readPreface reads looking for the end of the
// first line; a longer line is fasthttp's to refuse.
const maxFirstLine = 4 << 10

// readPreface reads c until its bytes are the whole HTTP/2 preface, or
// differ from it and hold a whole first line (or maxFirstLine bytes, or
// all c sent before an error). A connection whose first line is neither
// the preface nor an HTTP/1.x request line (method, target, HTTP/x.y,
// RFC 9112 §3) is a client speaking HTTP/2 with an invalid preface
// (h2spec 3.5), which RFC 9113 §3.4 makes a connection error: it is
// closed without an answer, where an HTTP/1.x request, however bad its
// fields, still gets fasthttp's 4xx.
func readPreface(c net.Conn) (seen []byte, kind int, err error) {
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		k := min(len(buf), len(h2Preface))
		if string(buf[:k]) == h2Preface {
			return buf, isH2, nil
		}
		if string(buf[:k]) != h2Preface[:k] {
			if line, ok := firstLine(buf); ok {
				if requestLine(line) {
					return buf, isH1, nil
				}
				return buf, notHTTP, nil
			}
			if len(buf) >= maxFirstLine {
				return buf, isH1, nil
			}
		}
		if err != nil {
			return buf, isH1, err
		}
	}
}

// firstLine is b's first line without its end, after the empty lines a
// server ignores before a request line (RFC 9112 §2.2); false until b
// holds the line's end.
func firstLine(b []byte) ([]byte, bool) {
	b = bytes.TrimLeft(b, "\r\n")
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, false
	}
	return bytes.TrimSuffix(b[:i], []byte("\r")), true
}

// requestLine: line ends with " HTTP/" DIGIT "." DIGIT.
func requestLine(line []byte) bool {
	n := len(line)
	return n >= 9 && string(line[n-9:n-3]) == " HTTP/" && isDigit(line[n-3]) && line[n-2] == '.' && isDigit(line[n-1])
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// h2Secure: state meets HTTP/2's TLS requirements (RFC 9113 §9.2): TLS
// 1.3, or 1.2 with an ephemeral AEAD suite. Anything else is left to Go,
// which refuses it with INADEQUATE_SECURITY.
func h2Secure(st *tls.ConnectionState) bool {
	if st.Version >= tls.VersionTLS13 {
		return true
	}
	if st.Version != tls.VersionTLS12 {
		return false
	}
	switch st.CipherSuite {
	case tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:
		return true
	}
	return false
}

// replayConn returns the bytes read to sort the connection before
// reading further.
type replayConn struct {
	net.Conn
	pending []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(b, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.Conn.Read(b)
}

// h2ReadBuffer is the read buffer of a cleartext HTTP/2 connection.
const h2ReadBuffer = 4 << 10

// bufferedConn reads c through a buffer. net/http's HTTP/2 server reads
// its connection unbuffered, a frame header then its payload: two read
// calls per frame, so two system calls per request on a cleartext
// connection (over TLS, crypto/tls buffers). Through this buffer one read
// takes every frame the client has sent, e.g. a hundred requests' HEADERS.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// muxListener is one side of a connMux.
type muxListener struct {
	m *connMux
	c chan net.Conn
}

func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

// Close closes the shared listener: both servers stop accepting.
func (l *muxListener) Close() error { l.m.close(); return nil }

func (l *muxListener) Addr() net.Addr { return l.m.ln.Addr() }
