package cluster

import (
	"bytes"
	"hash/maphash"
	"sync"

	"github.com/valyala/fasthttp"
)

// The same holds for both directions of the multiplexed transport.
//
// An owner's answers to one key repeat the same head, byte for byte,
// until its Age changes (once a second): the stored fields, Date among
// them, Shield-Tags and Cache-Status. Decoding one field by field (each
// copied and normalised, the Date parsed in) costs several times copying
// a ResponseHeader that already holds it, so the edge keeps recently
// decoded heads parsed, one slot per hash of the head's bytes, as the
// local hit path keeps its entries' heads (proxy/hithead.go). A slot
// answers only for the exact bytes it was filled from; one held by
// another answer (TryLock fails) is bypassed by decoding straight into
// the response, one holding another head takes this one. Nothing is
// allocated once a slot's buffers have grown.

// answerHeadSlots is the number of decoded heads kept (about 1 KiB each
// for a usual head: a few MiB at most). A key's head changes every
// second (its Age), so the slots are many more than the keys forwarded
// in a second are expected to be: two keys sharing one take turns
// decoding.
const answerHeadSlots = 4096

type answerHeadSlot struct {
	mu  sync.Mutex
	raw []byte // the head this slot holds decoded; nil: none
	hdr fasthttp.ResponseHeader
}

type answerHeads struct {
	seed  maphash.Seed
	slots [answerHeadSlots]answerHeadSlot
}

func newAnswerHeads() *answerHeads { return &answerHeads{seed: maphash.MakeSeed()} }

// decode sets resp's status and header fields from an answer's head
// (decodeResponseHead), from a slot when one holds it.
func (hs *answerHeads) decode(head []byte, resp *fasthttp.Response) error {
	s := &hs.slots[maphash.Bytes(hs.seed, head)%answerHeadSlots]
	if !s.mu.TryLock() {
		return decodeResponseHead(head, resp)
	}
	defer s.mu.Unlock()
	if len(s.raw) == 0 || !bytes.Equal(s.raw, head) {
		if err := decodeResponseHead(head, resp); err != nil {
			return err
		}
		resp.Header.CopyTo(&s.hdr)
		s.raw = append(s.raw[:0], head...)
		return nil
	}
	s.hdr.CopyTo(&resp.Header)
	return nil
}

// A forwarded request's header fields — Host, the client's, the
// forwarding and peer protocol fields — are the same for every request
// of one client through one edge, whatever the path: the owner keeps
// them decoded the same way, one slot per hash of their bytes, and sets
// the method and request URI of each request on a copy.

// requestFieldSlots is the number of decoded field sets kept.
const requestFieldSlots = 256

type requestFieldSlot struct {
	mu  sync.Mutex
	raw []byte // the encoded fields this slot holds decoded; nil: none
	hdr fasthttp.RequestHeader
}

type requestFields struct {
	seed  maphash.Seed
	slots [requestFieldSlots]requestFieldSlot
}

func newRequestFields() *requestFields { return &requestFields{seed: maphash.MakeSeed()} }

// decode sets req (reset) from a request frame's payload (decodeRequest),
// its header fields from a slot when one holds them.
func (rf *requestFields) decode(b []byte, req *fasthttp.Request) (flags byte, err error) {
	flags, method, uri, fields, err := splitRequest(b)
	if err != nil {
		return 0, err
	}
	s := &rf.slots[maphash.Bytes(rf.seed, fields)%requestFieldSlots]
	if !s.mu.TryLock() {
		req.Header.SetMethodBytes(method)
		req.Header.SetRequestURIBytes(uri)
		return flags, decodeFields(fields, &req.Header)
	}
	defer s.mu.Unlock()
	if len(s.raw) == 0 || !bytes.Equal(s.raw, fields) {
		req.Header.SetMethodBytes(method)
		req.Header.SetRequestURIBytes(uri)
		if err := decodeFields(fields, &req.Header); err != nil {
			return 0, err
		}
		req.Header.CopyTo(&s.hdr)
		s.raw = append(s.raw[:0], fields...)
		return flags, nil
	}
	s.hdr.CopyTo(&req.Header)
	req.Header.SetMethodBytes(method)
	req.Header.SetRequestURIBytes(uri)
	return flags, nil
}
