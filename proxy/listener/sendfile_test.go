package listener

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shield-proxy/shield/config"
)

// testSection is a FileSection over f: n bytes at off, read with pread;
// read counts the bytes Read returned (the rest went by sendfile).
type testSection struct {
	f      *os.File
	off, n int64
	read   *atomic.Int64
}

func (s *testSection) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.n)]
	k, err := s.f.ReadAt(p, s.off)
	s.off += int64(k)
	s.n -= int64(k)
	s.read.Add(int64(k))
	if err == io.EOF && k > 0 {
		err = nil
	}
	return k, err
}

func (s *testSection) Section() (int, int64, int64) { return int(s.f.Fd()), s.off, s.n }

func (s *testSection) Advance(k int64) { s.off += k; s.n -= k }

// TestFileSectionSent: answers whose body is a FileSection of one file
// shared by concurrent connections arrive whole and in order (each sent
// from its own offset, the file's own offset untouched), the large ones
// by sendfile rather than Read, behind a head Coalesce held.
func TestFileSectionSent(t *testing.T) {
	const prefix = 777 // the sections start past it
	sizes := []int64{10, CoalesceMin - 200, CoalesceMin + 1, 100 << 10, 8 << 20}
	content := make([]byte, prefix+sizes[len(sizes)-1])
	for i := range content {
		content[i] = byte(i*7 + i>>12)
	}
	f := openContent(t, content)
	if _, err := f.Seek(5, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	h1 := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n := int64(ctx.QueryArgs().GetUintOrZero("n"))
		Coalesce(ctx.Conn())
		ctx.SetBodyStream(&testSection{f: f, off: prefix, n: n, read: &read}, int(n))
	}, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	pub := New(h1, config.Server{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}, nil)
	ln := servePlain(t, pub)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			var reqs bytes.Buffer
			for _, n := range sizes {
				fmt.Fprintf(&reqs, "GET /?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", n)
			}
			go func() { _, _ = c.Write(reqs.Bytes()) }()
			br := bufio.NewReader(c)
			for _, n := range sizes {
				resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
				if err != nil {
					t.Errorf("n=%d: %v", n, err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || !bytes.Equal(body, content[prefix:prefix+n]) {
					t.Errorf("n=%d: %d bytes (%v), not the section", n, len(body), err)
					return
				}
				runtime.Gosched() // a slow reader now and then: sendfile waits
			}
		})
	}
	wg.Wait()
	if off, err := f.Seek(0, io.SeekCurrent); err != nil || off != 5 {
		t.Errorf("the file's own offset moved to %d (%v)", off, err)
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	if r := read.Load(); r > 3*(total/100) {
		t.Errorf("%d of %d bytes read through Read: sendfile was not used", r, 3*total)
	}
}

// openContent is a file holding content, open for reading, closed and
// removed when the test ends.
func openContent(t *testing.T, content []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
