package main

import (
	"net"
	"net/http"
	"strconv"
	"time"
)

// garbageReply is what fault mode garbage sends instead of an HTTP answer:
// a status line with a non-numeric code and a line that is no header.
const garbageReply = "HTTP/1.1 2OO NOT-HTTP\r\n\x00\x01\x02 this is not a header\r\n\r\n{garbage"

// hugeLength is the Content-Length fault mode huge announces: 1 TiB, far
// beyond any max_object_size, and more than a test ever reads.
const hugeLength = 1 << 40

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

// garbage answers bytes that are not HTTP, then closes the connection.
func (o *origin) garbage(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_, _ = buf.WriteString(garbageReply)
	_ = buf.Flush()
	_ = conn.Close()
}

// huge announces hugeLength bytes and writes the body as fast as the client
// reads it, until the client leaves or the origin stops. The body opens
// with {"path":"<path>","huge":" so a reader can still tell which request
// it answers; the rest is padAlphabet.
func (o *origin) huge(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", defaultCacheControl)
	h.Set("Content-Length", strconv.FormatInt(hugeLength, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte(`{"path":` + strconv.Quote(r.URL.Path) + `,"huge":"`)); err != nil {
		return
	}
	piece := []byte(padding(32 << 10))
	for {
		select {
		case <-r.Context().Done():
			return
		case <-o.stopped:
			return
		default:
		}
		if _, err := w.Write(piece); err != nil {
			return
		}
	}
}
