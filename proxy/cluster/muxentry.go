package cluster

import (
	"encoding/binary"
	"time"

	"github.com/valyala/fasthttp"
)

// Entry answers (issue 22). A forwarded hit used to cost the owner its
// whole response writer (head copied, Age and Cache-Status set), the
// transport an encoding of that response, and the edge a decoding of it
// into a fasthttp.Response copied again into its client's answer. When
// the edge asks (reqFlagEntry) and the owner's lookup is a fresh hit on
// an entry that fits one frame of EntryAnswerMax bytes, the owner sends
// the entry's stored bytes as they are instead (frameEntry: its clock,
// then the entry), and the edge checks them (checksum, key) and serves
// them with the code of a local hit. Everything else — misses, stale
// answers, errors, larger entries, an owner of an earlier release that
// ignores the flag — is answered with frameResponse as before.

// EntryAnswerMax bounds the entries sent as they are: one piece of the
// store (larger entries keep the response path).
const EntryAnswerMax = 32 << 10

// EntryAnswer is an edge's request for an entry answer and what came
// back. Want asks for one (mux transport only); Got says the owner sent
// one: Buf (the caller's buffer, grown as needed) holds the entry's
// bytes, unchecked, and OwnerNow the owner's clock when it looked the
// entry up (unix ns), the basis of the entry's age.
type EntryAnswer struct {
	Want     bool
	Got      bool
	OwnerNow int64
	Buf      []byte
}

// AnswerEntry answers ctx, a request forwarded over the multiplexed
// transport whose edge asked for entry answers, with entry (a fresh
// hit's stored bytes, at most EntryAnswerMax) looked up at now. It
// reports false, having sent nothing, for any other request: the caller
// then answers as usual. After true the handler's response is not sent.
func AnswerEntry(ctx *fasthttp.RequestCtx, entry []byte, now time.Time) bool {
	tc, ok := ctx.Conn().(*muxTaskConn)
	if !ok || tc.t == nil || !tc.t.entry || tc.t.answered || len(entry) > EntryAnswerMax {
		return false
	}
	t := tc.t
	q, ok := t.s.w.begin()
	if !ok {
		t.answered = true // closed: nothing more is sent
		return true
	}
	q = appendFrameHeader(q, frameEntry, t.id, uint32(8+len(entry)))
	q = binary.BigEndian.AppendUint64(q, uint64(now.UnixNano()))
	q = append(q, entry...)
	t.end(q)
	t.answered = true
	return true
}

// splitEntry splits an entry answer's payload into the owner's clock
// and the entry's bytes.
func splitEntry(b []byte) (ownerNow int64, entry []byte, err error) {
	if len(b) < 8 || len(b)-8 > EntryAnswerMax {
		return 0, nil, errBadFrame
	}
	return int64(binary.BigEndian.Uint64(b)), b[8:], nil
}

// EntryAnswers is the number of entry answers this node received as an
// edge (checked or not).
func (c *Node) EntryAnswers() uint64 { return c.entryAnswers.Load() }
