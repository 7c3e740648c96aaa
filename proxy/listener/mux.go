package listener

import (
	"bufio"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
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
	logger  *slog.Logger
	h1, h2  *muxListener
	done    chan struct{}
	once    sync.Once
}

func newConnMux(ln net.Listener, tc *tls.Config, timeout time.Duration, logger *slog.Logger) *connMux {
	m := &connMux{ln: ln, tls: tc, timeout: timeout, logger: logger, done: make(chan struct{})}
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
		tc := tls.Server(c, m.tls)
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return
		}
		h2 = tc.ConnectionState().NegotiatedProtocol == "h2"
		out = tc
	} else {
		seen, isH2, err := readPreface(c)
		if err != nil && len(seen) == 0 {
			_ = c.Close()
			return
		}
		// A read error after some bytes goes to fasthttp with them,
		// which answers a partial HTTP/1 request as it always has.
		h2 = isH2
		out = &replayConn{Conn: c, pending: seen}
		if h2 {
			out = &bufferedConn{Conn: c, r: bufio.NewReaderSize(out, h2ReadBuffer)}
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

// readPreface reads c until its bytes either differ from the HTTP/2
// preface or are all of it. An HTTP/1 request differs at its first byte,
// so only a client that is sending the preface is waited for.
func readPreface(c net.Conn) (seen []byte, isH2 bool, err error) {
	buf := make([]byte, 0, 512)
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		k := min(len(buf), len(h2Preface))
		if string(buf[:k]) != h2Preface[:k] {
			return buf, false, nil
		}
		if k == len(h2Preface) {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
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
