package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 attacks of recent years, each sent by a hostile client
// written with x/net/http2's Framer against a shield with cleartext
// HTTP/2 (the same server as over TLS, minus the handshake). For each:
// the node stays up, the attacker's connection is cut or its excess
// refused, and other clients — HTTP/2 and HTTP/1.1, on their own
// connections — keep being served, every request within probeBound.

// probeBound is the longest a normal client may wait during an attack.
const probeBound = 2 * time.Second

// attacker is one hostile HTTP/2 connection.
type attacker struct {
	t      *testing.T
	addr   string
	conn   net.Conn
	bw     *bufio.Writer
	fr     *http2.Framer
	enc    *hpack.Encoder
	encBuf bytes.Buffer

	goaway   atomic.Uint32 // GOAWAY error code + 1, 0 if none
	resets   atomic.Int64  // RST_STREAM frames received
	statuses sync.Map      // :status → *atomic.Int64
	closed   chan struct{} // the reader saw the connection end
}

// dialAttacker opens a connection, sends the preface and SETTINGS, and,
// when read is set, reads what the server sends in the background (an
// attacker that never reads is the settings-flood case).
func dialAttacker(t *testing.T, addr string, read bool) *attacker {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	a := &attacker{t: t, addr: addr, conn: c, bw: bufio.NewWriterSize(c, 64<<10), closed: make(chan struct{})}
	a.fr = http2.NewFramer(a.bw, c)
	a.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	a.enc = hpack.NewEncoder(&a.encBuf)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := a.bw.WriteString(http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := a.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := a.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if read {
		go a.read()
	}
	return a
}

func (a *attacker) read() {
	defer close(a.closed)
	for {
		f, err := a.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			a.goaway.Store(uint32(f.ErrCode) + 1)
		case *http2.RSTStreamFrame:
			a.resets.Add(1)
		case *http2.MetaHeadersFrame:
			v, _ := a.statuses.LoadOrStore(f.PseudoValue("status"), new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}
	}
}

func (a *attacker) count(status string) int64 {
	v, ok := a.statuses.Load(status)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// block is an HPACK header block for GET path, plus extra fields.
func (a *attacker) block(path string, extra ...hpack.HeaderField) []byte {
	a.encBuf.Reset()
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: a.addr},
	}, extra...) {
		_ = a.enc.WriteField(f)
	}
	return bytes.Clone(a.encBuf.Bytes())
}

// cut reports whether the server has ended the connection: its reader
// saw the end, or a write fails.
func (a *attacker) cut() bool {
	select {
	case <-a.closed:
		return true
	default:
	}
	_ = a.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if err := a.fr.WritePing(false, [8]byte{}); err != nil {
		return true
	}
	return a.bw.Flush() != nil
}

// probes sends requests for a cached URL from an HTTP/2 and an HTTP/1.1
// client until stop, and reports how many were served, the failures and
// the slowest.
type probes struct {
	wg      sync.WaitGroup
	stop    chan struct{}
	mu      sync.Mutex
	served  int
	failed  []string
	slowest time.Duration
	slow    []string // the first requests slower than 300ms
}

func startProbes(h *h2Env) *probes {
	p := &probes{stop: make(chan struct{})}
	for k, c := range []*http.Client{h.client(), newClient()} {
		p.wg.Go(func() {
			for {
				select {
				case <-p.stop:
					return
				default:
				}
				start := time.Now()
				r, err := doHTTP(c, http.MethodGet, h.base()+"/probe")
				took := time.Since(start)
				p.mu.Lock()
				switch {
				case err != nil || r.status != 200:
					p.failed = append(p.failed, fmt.Sprintf("%v %v", r.status, err))
				default:
					p.served++
				}
				if took > 300*time.Millisecond && len(p.slow) < 5 {
					p.slow = append(p.slow, fmt.Sprintf("%s at %s took %v", []string{"HTTP/2", "HTTP/1.1"}[k], start.Format("15:04:05.000"), took.Round(time.Millisecond)))
				}
				p.slowest = max(p.slowest, took)
				p.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return p
}

// check stops the probes and fails t unless every probe was served
// within probeBound.
func (p *probes) check(t *testing.T, attack string) {
	t.Helper()
	close(p.stop)
	p.wg.Wait()
	t.Logf("%s: normal clients served %d requests, slowest %v, %d failed; slow: %q", attack, p.served, p.slowest, len(p.failed), p.slow)
	if len(p.failed) > 0 || p.served < 10 || p.slowest > probeBound {
		t.Errorf("%s: normal clients: %d served, failures %q, slowest %v (bound %v)", attack, p.served, p.failed, p.slowest, probeBound)
	}
}

// underAttack runs attack while normal clients are served, then checks
// them and that shield is still running and ready.
func underAttack(t *testing.T, h *h2Env, name string, attack func()) {
	t.Helper()
	p := startProbes(h)
	start := time.Now()
	attack()
	time.Sleep(200 * time.Millisecond) // probes also just after the attack
	p.check(t, name)
	if h.shield.exited() {
		t.Fatalf("%s: shield exited", name)
	}
	if r, err := doHTTP(newClient(), http.MethodGet, "http://"+h.cfg.Admin+"/readyz"); err != nil || r.status != 200 {
		t.Fatalf("%s: shield not ready after the attack: %v %v", name, r, err)
	}
	t.Logf("%s: attack took %v", name, time.Since(start).Round(time.Millisecond))
}

// answered counts the final answers a received.
func (a *attacker) answered() int64 {
	var n int64
	a.statuses.Range(func(_, v any) bool { n += v.(*atomic.Int64).Load(); return true })
	return n
}

// accounted reports whether each connection's n streams were all either
// refused (RST_STREAM) or answered.
func accounted(as []*attacker, n int64) bool {
	for _, a := range as {
		if a.resets.Load()+a.answered() < n {
			return false
		}
	}
	return true
}

// peakRSS is a process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}

// TestHTTP2Attacks: rapid reset (CVE-2023-44487), CONTINUATION flood
// (CVE-2024-27316), an HPACK bomb, a SETTINGS flood and a stream flood
// against one shield. Each leaves the node up and its other clients
// served; shield's peak memory stays bounded across all of them.
func TestHTTP2Attacks(t *testing.T) {
	h := newH2Env(t, false)
	if a := h.curl("/probe", false); a.status != 200 {
		t.Fatalf("warm-up: %d", a.status)
	}

	t.Run("rapid reset", func(t *testing.T) {
		// 20000 streams opened and cancelled at once, each for a slow,
		// distinct URL: the server must not keep working for them.
		const n = 20000
		a := dialAttacker(t, h.cfg.Listen, true)
		sent := 0
		underAttack(t, h, "rapid reset", func() {
			for i := range n {
				id := uint32(2*i + 1)
				err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.block(target("/rr", "i", strconv.Itoa(i), "delay", "500")), EndStream: true, EndHeaders: true})
				if err == nil {
					err = a.fr.WriteRSTStream(id, http2.ErrCodeCancel)
				}
				if err != nil {
					break
				}
				sent++
			}
			// One last stream, not reset: its answer comes once the
			// server has worked through the ones before it (at most
			// max_concurrent_streams handlers at a time; a backlog of
			// more than 4 times that ends the connection instead).
			last := uint32(2*sent + 1)
			_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: last, BlockFragment: a.block("/probe"), EndStream: true, EndHeaders: true})
			_ = a.bw.Flush()
			eventually(t, "the rapid-reset connection to be cut or worked through", func() bool { return a.count("200") > 0 || a.cut() })
		})
		fetched := originCount(t, h.env, "/rr")
		t.Logf("rapid reset: %d streams sent and reset, GOAWAY code %d (-1: none), last stream answered %v, origin fetched %d",
			sent, int(a.goaway.Load())-1, a.count("200") > 0, fetched)
		if a.goaway.Load() != uint32(http2.ErrCodeEnhanceYourCalm)+1 && a.count("200") == 0 {
			t.Errorf("rapid reset: neither a GOAWAY (ENHANCE_YOUR_CALM) nor the last stream answered")
		}
		if fetched > 1000 {
			t.Errorf("rapid reset: origin fetched %d URLs of %d cancelled streams, want the work bounded", fetched, n)
		}
	})

	t.Run("continuation flood", func(t *testing.T) {
		// A HEADERS frame never ended: CONTINUATION frames of 16KiB of
		// header bytes, up to 256MiB, then the same with empty frames.
		for _, size := range []int{16 << 10, 0} {
			a := dialAttacker(t, h.cfg.Listen, true)
			var filler []byte
			if size > 0 {
				a.encBuf.Reset()
				_ = a.enc.WriteField(hpack.HeaderField{Name: "x-filler", Value: strings.Repeat("a", size-16), Sensitive: true})
				filler = bytes.Clone(a.encBuf.Bytes())
			}
			frames := 0
			name := fmt.Sprintf("continuation flood (%d-byte frames)", len(filler))
			underAttack(t, h, name, func() {
				if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.block("/probe")}); err != nil {
					t.Fatal(err)
				}
				for frames < 1<<14 {
					if a.fr.WriteContinuation(1, false, filler) != nil {
						break
					}
					frames++
					if frames%1024 == 0 && a.bw.Flush() != nil {
						break
					}
				}
				eventually(t, "the flooding connection to end", func() bool { return a.cut() })
			})
			t.Logf("%s: cut after %d frames written, GOAWAY code %d", name, frames, int(a.goaway.Load())-1)
			if frames >= 1<<14 && size > 0 {
				t.Errorf("%s: all %d frames accepted, want the connection cut once the header list is over its limit", name, frames)
			}
		}
	})

	t.Run("hpack bomb", func(t *testing.T) {
		// One 4KiB field put in the dynamic table, then referenced 10000
		// times at one byte each: 10KiB on the wire, 40MiB decoded.
		a := dialAttacker(t, h.cfg.Listen, true)
		underAttack(t, h, "hpack bomb", func() {
			big := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
			fields := make([]hpack.HeaderField, 10000)
			for i := range fields {
				fields[i] = big
			}
			block := a.block("/probe", fields...)
			if len(block) > 20000 {
				t.Fatalf("bomb block is %d bytes, want the references compressed", len(block))
			}
			// Frames of 8KiB: HEADERS, then a CONTINUATION.
			if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:8<<10], EndStream: true}); err != nil {
				t.Fatal(err)
			}
			_ = a.fr.WriteContinuation(1, true, block[8<<10:])
			_ = a.bw.Flush()
			eventually(t, "an answer to the bomb (431, a reset or the connection cut)", func() bool {
				return a.count("431") > 0 || a.resets.Load() > 0 || a.cut()
			})
		})
		if a.count("200") > 0 {
			t.Errorf("hpack bomb: answered 200, want it refused")
		}
		t.Logf("hpack bomb: 431s %d, resets %d, GOAWAY code %d", a.count("431"), a.resets.Load(), int(a.goaway.Load())-1)
	})

	t.Run("settings flood", func(t *testing.T) {
		// SETTINGS frames as fast as they go, never reading the ACKs.
		a := dialAttacker(t, h.cfg.Listen, false)
		// A small receive window, so that the ACKs back up at the server
		// instead of in loopback buffers of several MiB.
		if err := a.conn.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
			t.Fatal(err)
		}
		frames := 0
		underAttack(t, h, "settings flood", func() {
			_ = a.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			for frames < 1<<20 {
				if a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535}) != nil {
					break
				}
				frames++
			}
			_ = a.bw.Flush()
			// Now read: the ACKs the server could send, then the end of
			// the connection it cut.
			_ = a.conn.SetDeadline(time.Now().Add(30 * time.Second))
			go a.read()
			eventually(t, "the server to cut the settings flood", func() bool { return a.cut() })
		})
		t.Logf("settings flood: cut after %d frames written, GOAWAY code %d", frames, int(a.goaway.Load())-1)
	})

	t.Run("slow readers", func(t *testing.T) {
		// 20 connections open windows as large as the protocol allows,
		// ask 100 times each for a 1 MiB object, and never read: the
		// server may send as fast as it can write. What it holds must
		// stay bounded by its write queues and flow control, not grow
		// with the 2 GiB asked for.
		const conns, streams, size = 20, 100, 1 << 20
		pid := h.shield.cmd.Process.Pid
		before := procStatus(t, pid, "VmRSS")
		var as []*attacker
		path := target("/slowread", "size", strconv.Itoa(size))
		underAttack(t, h, "slow readers", func() {
			for range conns {
				a := dialAttacker(t, h.cfg.Listen, false)
				if err := a.conn.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
					t.Fatal(err)
				}
				as = append(as, a)
				_ = a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
				_ = a.fr.WriteWindowUpdate(0, 1<<31-1-65535)
				for i := range streams {
					_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: a.block(path), EndStream: true, EndHeaders: true})
				}
				if err := a.bw.Flush(); err != nil {
					t.Fatalf("slow readers: sending the requests: %v", err)
				}
			}
			// The server writes until its queues and the sockets are
			// full: its memory then stops growing (two readings 100 ms
			// apart within 1 MiB), or 5 s have passed.
			prev := procStatus(t, pid, "VmRSS")
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				cur := procStatus(t, pid, "VmRSS")
				if cur-prev < 1<<10 && cur-prev > -1<<10 {
					break
				}
				prev = cur
			}
		})
		held := procStatus(t, pid, "VmRSS")
		for _, a := range as {
			_ = a.conn.Close()
		}
		t.Logf("slow readers: VmRSS %d MiB before, %d MiB with %d MiB asked and unread", before>>10, held>>10, conns*streams*size>>20)
		// 140–210 MiB in earlier runs here, 190–390 MiB on 2026-12-03
		// at this change's parent as at the change (about 100–200 KiB
		// per stream blocked mid-answer: its goroutine, its copy
		// buffer, garbage not yet collected), 454 MiB once in a CI run
		// (a fifth, the bound until then, is 400); answers buffered
		// whole would be 2,000 MiB. 236–272 MiB in five runs on
		// 2026-12-04 once a memory tier stream no longer held a 256
		// KiB batch buffer per blocked stream (251–342 before): what
		// remains is mostly streamed fills of the object still being
		// read (1 MiB each; their count varies per run) and per-stream
		// state.
		if grew := (held - before) << 10; grew > conns*streams*size/3 {
			t.Errorf("slow readers: VmRSS grew by %d MiB, want under a third of the %d MiB asked for", grew>>20, conns*streams*size>>20)
		}
	})

	t.Run("stream flood", func(t *testing.T) {
		// 20 connections each open 500 streams of a slow URL (the limit
		// is 100 per connection) and keep them open.
		var as []*attacker
		underAttack(t, h, "stream flood", func() {
			for c := range 20 {
				a := dialAttacker(t, h.cfg.Listen, true)
				as = append(as, a)
				for i := range 500 {
					if a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: a.block(target("/sf", "c", strconv.Itoa(c), "i", strconv.Itoa(i), "delay", "1000")), EndStream: true, EndHeaders: true}) != nil {
						break
					}
				}
				_ = a.bw.Flush()
			}
			deadline := time.Now().Add(10 * time.Second)
			for !accounted(as, 500) && time.Now().Before(deadline) {
				time.Sleep(pollInterval)
			}
			for i, a := range as {
				if !accounted(as[i:i+1], 500) || a.resets.Load() == 0 {
					t.Errorf("stream flood: connection %d: %d refused, %d answered, GOAWAY %d; want some of the 500 refused and the rest answered",
						i, a.resets.Load(), a.answered(), int(a.goaway.Load())-1)
				}
			}
		})
		var resets int64
		for _, a := range as {
			resets += a.resets.Load()
		}
		t.Logf("stream flood: %d of 10000 streams refused (over 100 open on their connection), the rest answered", resets)
	})

	rss := peakRSS(t, h.shield.cmd.Process.Pid)
	t.Logf("shield peak RSS across the attacks: %d MiB", rss>>20)
	if rss > 512<<20 {
		t.Errorf("shield peak RSS %d MiB, want under 512 MiB", rss>>20)
	}
}
