package listener

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"time"

	"golang.org/x/net/http2/hpack"
)

// The read side of an HTTP/2 connection, between the socket and Go's
// HTTP/2 server, where Go's answers to two kinds of client frames differ
// from RFC 9113 (h2spec 6.5.3 and 8.1.2.2):
//
//   - a SETTINGS frame naming one setting more than once: Go hangs up (a
//     flood defence), the RFC processes the values in order. The filter
//     rewrites such a frame into one naming each setting once, with the
//     value processing in order leaves (h2Filter.settings).
//   - a request whose header block carries a connection-specific field
//     (Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding,
//     Upgrade) or a TE other than "trailers": Go answers 400 where the RFC
//     asks for a stream error PROTOCOL_ERROR. The filter adds to such a
//     block a field Go itself resets the stream for (h2Filter.poison).
//
// Every other byte passes as it is: DATA and every other frame without a
// copy, HEADERS and CONTINUATION once whole (Go's framer holds a frame
// whole before reading it too). To know the fields of a header block the
// filter decodes it with an HPACK decoder of its own, kept in step with
// Go's: same table size, every block Go decodes and no other; the field
// it adds is a literal without indexing, which leaves both tables as
// they were. Wherever Go is about to end the connection (a frame too
// large, frames out of order, a block it cannot decode) the filter stops
// looking and passes the rest as it is.

// HTTP/2 frame types and flags the filter reads (RFC 9113 §6).
const (
	frameHeaders      = 0x1
	frameSettings     = 0x4
	frameContinuation = 0x9

	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	frameHeaderLen = 9
	// decoderTableSize is Go's HPACK decoder table size (HTTP2Config's
	// MaxDecoderHeaderTableSize, left at its default).
	decoderTableSize = 4096
)

// h2Limits are the limits of Go's HTTP/2 server the filter mirrors.
type h2Limits struct {
	maxFrame      uint32 // the largest frame payload it reads
	maxHeaderList uint32 // its header list bound (hpack sizes)
}

// newH2Limits are Go's limits for the server newH2Server builds:
// MaxReadFrameSize as Go clamps it, and the header list bound Go derives
// from MaxHeaderBytes (its HTTP/1 count padded for ten fields of 32).
func newH2Limits(maxFrame uint32, maxHeaderBytes int) h2Limits {
	if maxFrame < 16<<10 || maxFrame > 1<<24-1 {
		maxFrame = 1 << 20
	}
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = 1 << 20 // http.DefaultMaxHeaderBytes
	}
	return h2Limits{maxFrame: maxFrame, maxHeaderList: uint32(maxHeaderBytes + 10*32)}
}

// h2Filter is an HTTP/2 connection as Go's server reads it.
type h2Filter struct {
	net.Conn
	tls  *tls.ConnectionState // the connection's TLS state; nil: cleartext
	lim  h2Limits
	skip int    // bytes to pass before the next frame header: the preface, a payload
	buf  []byte // a frame (header, payload so far) held until it is whole
	obuf []byte // a rewritten frame
	out  []byte // bytes the reader gets before anything else is read
	dead bool   // Go is ending the connection: everything passes

	dec  *hpack.Decoder
	cont uint32  // the stream whose header block goes on in CONTINUATION; 0: none
	blk  h2Block // the header block being decoded

	rewrites int // frames rewritten (tests)

	settingsFrom time.Time // the start of the current SETTINGS window
	settingsIn   int       // SETTINGS frames (not ACKs) in it
	flood        bool      // over h2MaxSettings: Read fails, Go ends the connection
}

// A client sends SETTINGS when the connection opens and rarely after;
// more than h2MaxSettings of them in h2SettingsWindow is a flood. Go
// answers each one (its ACKs coalesce while its writer is busy, so it
// never hangs up on its own): the filter ends the connection instead,
// as nginx ends one whose frames do no work.
const (
	h2MaxSettings    = 100
	h2SettingsWindow = 10 * time.Second
)

// errH2Flood ends a connection that sent a SETTINGS flood.
var errH2Flood = errors.New("listener: HTTP/2 SETTINGS flood")

// h2Block is what Go's framer notes while it decodes a header block
// (readMetaFrame), and what the filter looks for.
type h2Block struct {
	remain    uint32 // header list bytes left
	truncated bool   // over the list bound: Go answers 431
	malformed bool   // a connection-specific field, or TE other than trailers
	te        int
}

func newH2Filter(c net.Conn, state *tls.ConnectionState, lim h2Limits) *h2Filter {
	f := &h2Filter{Conn: c, tls: state, lim: lim, skip: len(h2Preface)}
	f.dec = hpack.NewDecoder(decoderTableSize, f.emit)
	f.dec.SetMaxStringLength(int(lim.maxHeaderList))
	return f
}

func (f *h2Filter) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(f.out) > 0 {
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		}
		if f.dead {
			return f.Conn.Read(p)
		}
		if f.flood {
			return 0, errH2Flood
		}
		if f.skip > 0 {
			n, err := f.Conn.Read(p[:min(len(p), f.skip)])
			f.skip -= n
			return n, err
		}
		if err := f.fill(); err != nil {
			return 0, err
		}
	}
}

// fill reads the next frame header, then, for a frame the filter looks
// at, its payload; a whole unit is passed on (f.out, f.skip). A read
// error is returned with what was read kept.
func (f *h2Filter) fill() error {
	need := frameHeaderLen
	if len(f.buf) >= frameHeaderLen {
		need += frameLen(f.buf)
	}
	if len(f.buf) < need {
		if cap(f.buf) < need {
			f.buf = append(make([]byte, 0, max(need, 512)), f.buf...)
		}
		n, err := f.Conn.Read(f.buf[len(f.buf):need])
		f.buf = f.buf[:len(f.buf)+n]
		if n == 0 && err != nil {
			return err
		}
		if len(f.buf) < need {
			return nil
		}
	}
	if need == frameHeaderLen {
		f.header()
		if f.flood {
			return errH2Flood
		}
	}
	if len(f.buf) >= frameHeaderLen && len(f.buf) == frameHeaderLen+frameLen(f.buf) {
		f.frame()
	}
	return nil
}

// header decides on a frame from its header: held to be read whole, or
// passed with its payload.
func (f *h2Filter) header() {
	h := f.buf
	length, typ, flags, stream := uint32(frameLen(h)), h[3], h[4], binary.BigEndian.Uint32(h[5:])&(1<<31-1)
	if length > f.lim.maxFrame {
		f.giveUp() // Go: FRAME_SIZE_ERROR
		return
	}
	// Go's framer: a header block's frames come together (checkFrameOrder).
	if f.cont != 0 && (typ != frameContinuation || stream != f.cont) || f.cont == 0 && typ == frameContinuation {
		f.giveUp()
		return
	}
	switch typ {
	case frameHeaders, frameContinuation:
		f.cont = stream
		if flags&flagEndHeaders != 0 {
			f.cont = 0
		}
		return // held whole
	case frameSettings:
		if flags&flagAck == 0 && f.settingsFlood() {
			return
		}
		if stream == 0 && flags&flagAck == 0 && length%6 == 0 && length >= 12 && length <= 100*6 {
			return // may name a setting twice
		}
	}
	// f.out is read out before f.buf is filled again.
	f.out, f.buf, f.skip = f.buf, f.buf[:0], int(length)
}

// frame passes on a whole frame held by header, rewritten if it must be.
func (f *h2Filter) frame() {
	switch f.buf[3] {
	case frameSettings:
		f.out = f.settings(f.buf)
	default:
		f.headers()
	}
	if !f.dead {
		f.buf = f.buf[:0]
		if cap(f.buf) > 64<<10 {
			f.buf = nil // one huge header block is not kept for the connection's life
		}
	}
}

// giveUp passes the bytes held and everything after: Go is ending the
// connection, or about to, for what the filter has just seen.
func (f *h2Filter) giveUp() {
	f.out, f.buf, f.dead = f.buf, nil, true
}

// settingsFlood counts one SETTINGS frame and reports (and notes, in
// flood) whether it is one too many.
func (f *h2Filter) settingsFlood() bool {
	now := time.Now()
	if now.Sub(f.settingsFrom) > h2SettingsWindow {
		f.settingsFrom, f.settingsIn = now, 0
	}
	f.settingsIn++
	f.flood = f.settingsIn > h2MaxSettings
	return f.flood
}

func frameLen(h []byte) int { return int(h[0])<<16 | int(h[1])<<8 | int(h[2]) }

func setFrameLen(h []byte, n int) { h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n) }

// settings is a SETTINGS frame with each setting named once, as
// processing b's values in order leaves them: the last value of each,
// but the smallest header table size (RFC 7541 §4.2: the encoder is to
// use the smallest size named since its last block). A frame with a
// value the RFC makes a connection error becomes that setting alone, so
// that Go answers it with the error the RFC names.
func (f *h2Filter) settings(b []byte) []byte {
	p := b[frameHeaderLen:]
	n := len(p) / 6
	id := func(i int) uint16 { return binary.BigEndian.Uint16(p[6*i:]) }
	val := func(i int) uint32 { return binary.BigEndian.Uint32(p[6*i+2:]) }
	seen := func(i int) bool { // id(i) named before i
		for j := range i {
			if id(j) == id(i) {
				return true
			}
		}
		return false
	}
	dup := false
	for i := 1; i < n && !dup; i++ {
		dup = seen(i)
	}
	if !dup {
		return b
	}
	f.rewrites++
	o := append(f.obuf[:0], b[:frameHeaderLen]...)
	for i := range n {
		if !validSetting(id(i), val(i)) {
			o = append(o, p[6*i:6*i+6]...)
			setFrameLen(o, 6)
			f.obuf = o
			return o
		}
	}
	for i := range n {
		if seen(i) {
			continue
		}
		v := val(i)
		for j := i + 1; j < n; j++ {
			if id(j) == id(i) {
				if id(i) == 0x1 { // SETTINGS_HEADER_TABLE_SIZE
					v = min(v, val(j))
				} else {
					v = val(j)
				}
			}
		}
		o = binary.BigEndian.AppendUint16(o, id(i))
		o = binary.BigEndian.AppendUint32(o, v)
	}
	setFrameLen(o, len(o)-frameHeaderLen)
	f.obuf = o
	return o
}

// validSetting is Go's (and RFC 9113 §6.5.2's) check of one value.
func validSetting(id uint16, v uint32) bool {
	switch id {
	case 0x2, 0x8: // SETTINGS_ENABLE_PUSH, SETTINGS_ENABLE_CONNECT_PROTOCOL
		return v <= 1
	case 0x4: // SETTINGS_INITIAL_WINDOW_SIZE
		return v <= 1<<31-1
	case 0x5: // SETTINGS_MAX_FRAME_SIZE
		return v >= 16<<10 && v <= 1<<24-1
	}
	return true
}

// headers decodes the fragment of the whole HEADERS or CONTINUATION
// frame in f.buf as Go's framer will (readMetaFrame), and passes the
// frame on, with the field that makes Go reset the stream when the block
// it ends is malformed.
func (f *h2Filter) headers() {
	b := f.buf
	flags := b[4]
	frag := b[frameHeaderLen:]
	if b[3] == frameHeaders {
		if binary.BigEndian.Uint32(b[5:])&(1<<31-1) == 0 {
			f.giveUp() // Go: PROTOCOL_ERROR
			return
		}
		pad := 0
		if flags&flagPadded != 0 {
			if len(frag) < 1 {
				f.giveUp()
				return
			}
			pad, frag = int(frag[0]), frag[1:]
		}
		if flags&flagPriority != 0 {
			if len(frag) < 5 {
				f.giveUp()
				return
			}
			frag = frag[5:]
		}
		if len(frag) < pad {
			// Go resets the stream without decoding the block (and ends
			// the connection at a CONTINUATION after it).
			if flags&flagEndHeaders == 0 {
				f.giveUp()
				return
			}
			f.out = b
			return
		}
		frag = frag[:len(frag)-pad]
		f.blk = h2Block{remain: f.lim.maxHeaderList}
		f.dec.SetEmitEnabled(true)
	}
	// Go ends the connection at a fragment far over the list bound.
	if uint64(len(frag)) > 2*uint64(f.blk.remain) {
		f.giveUp()
		return
	}
	remain := f.blk.remain
	if _, err := f.dec.Write(frag); err != nil {
		f.giveUp() // Go: COMPRESSION_ERROR
		return
	}
	f.out = b
	if flags&flagEndHeaders == 0 {
		return
	}
	if err := f.dec.Close(); err != nil {
		f.giveUp()
		return
	}
	if f.blk.malformed && !f.blk.truncated {
		f.poison(len(frag), remain)
	}
}

// poisonField is a literal field without indexing, named "Malformed":
// an uppercase letter makes a field name invalid in HTTP/2 (RFC 9113
// §8.2.1), which Go answers with a stream error PROTOCOL_ERROR.
const poisonField = "\x00\x09Malformed\x00"

// poison adds poisonField to the end of the block in f.buf, before the
// frame's padding, when Go still takes the frame: within its frame size,
// and its fragment (fragLen bytes, decoded with remain list bytes left)
// within the bound of Go's readMetaFrame. Otherwise (a frame within 11
// bytes of the largest) the frame goes as it is and Go answers 400: a
// CONTINUATION of its own would turn Go's reset of a block with an
// invalid field into the end of the connection.
func (f *h2Filter) poison(fragLen int, remain uint32) {
	b := f.buf
	n := len(poisonField)
	if uint64(len(b)-frameHeaderLen+n) > uint64(f.lim.maxFrame) || uint64(fragLen+n) > 2*uint64(remain) {
		return
	}
	end := len(b)
	if b[3] == frameHeaders && b[4]&flagPadded != 0 {
		end -= int(b[frameHeaderLen])
	}
	o := append(f.obuf[:0], b[:end]...)
	o = append(o, poisonField...)
	o = append(o, b[end:]...)
	setFrameLen(o, len(o)-frameHeaderLen)
	f.rewrites++
	f.obuf, f.out = o, o
}

// emit sees each field Go's framer sees. It counts the header list as
// Go does, but does not check names and values as Go does: a block with
// an invalid field is reset by Go whatever follows it in its last frame,
// so the poison changes nothing there, and the check would double the
// filter's cost per request. (Go stops counting at an invalid field:
// the filter's count is then the larger, so its bounds err on the side
// of leaving the block as it is.)
func (f *h2Filter) emit(hf hpack.HeaderField) {
	b := &f.blk
	if size := hf.Size(); size > b.remain {
		f.dec.SetEmitEnabled(false)
		b.truncated, b.remain = true, 0
		return
	} else {
		b.remain -= size
	}
	// net/http's checkValidHTTP2RequestHeaders, which answers 400.
	switch hf.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		b.malformed = true
	case "te":
		b.te++
		b.malformed = b.malformed || b.te > 1 || hf.Value != "trailers" && hf.Value != ""
	}
}
