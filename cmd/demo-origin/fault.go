package main

import (
	"net"
	"net/http"
	"time"
)

// hang answers nothing until the client gives up or the origin stops.
func (o *origin) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-o.stopped:
	}
}

// reset closes the connection without a response. On a TCP connection the
// linger is set to zero so the peer sees a RST, as from a crashed backend,
// not an orderly FIN.
func (o *origin) reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2, a recorder): abort the response; net/http
		// then closes or resets the stream without sending it.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// dribble writes body one byte per slowInterval, flushing each, until done,
// the client leaves or the origin stops.
func (o *origin) dribble(w http.ResponseWriter, r *http.Request, body []byte) {
	rc := http.NewResponseController(w)
	t := time.NewTicker(slowInterval)
	defer t.Stop()
	for i := range body {
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if i == len(body)-1 {
			return
		}
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-o.stopped:
			return
		}
	}
}
