package rawio

import "net"

// Listener hands out its plain TCP connections reading and writing with
// raw system calls (Wrap), for TLS to run over: a TLS listener built on
// it (tls.NewListener) reads and writes its records that way.
type Listener struct{ net.Listener }

// Accept is the listener's next connection, wrapped.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// TCPWrapper is a connection that wraps a plain TCP connection without
// changing its bytes — it may watch its Close (listener.Limit counts open
// connections that way) — so its reads and writes may go straight to
// the socket: Wrap treats it as the TCP connection it holds.
type TCPWrapper interface {
	net.Conn
	// TCP is the wrapped connection, whose Read and Write the wrapper's
	// are.
	TCP() *net.TCPConn
}
